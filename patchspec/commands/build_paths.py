"""``patchspec cmake-path`` and ``patchspec bazel-path``: where the build-system integrations live."""

from __future__ import annotations

from pathlib import Path

import click

#: the installed ``patchspec`` package, which holds ``cmake/`` and ``bazel/``
PACKAGE = Path(__file__).resolve().parent.parent


@click.command(name="cmake-path")
def cmake_path() -> None:
    """Print the folder of patchspec's CMake module, for CMAKE_MODULE_PATH (include(Patchspec))."""
    click.echo(PACKAGE / "cmake")


@click.command(name="bazel-path")
def bazel_path() -> None:
    """Print the folder of patchspec's Bazel rules, a repository (local_repository, patchspec.bzl)."""
    click.echo(PACKAGE / "bazel")
