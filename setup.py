"""Package discovery, the one thing pyproject.toml cannot say: every package under patchspec/ is found
(``patchspec/cmake`` is a folder of data, a namespace package), and plugins/ is installed as
``patchspec_plugins`` (``[tool.setuptools.package-dir]``), never as a top-level ``plugins``.
Everything else is in pyproject.toml."""

from setuptools import find_namespace_packages, setup

setup(
    packages=[
        *find_namespace_packages(include=["patchspec", "patchspec.*"], exclude=["*.__pycache__"]),
        "patchspec_plugins",
    ]
)
