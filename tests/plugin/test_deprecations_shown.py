"""A plugin that uses a deprecated name of patchspec's API is told so by every patchspec run: Python
hides a DeprecationWarning raised outside ``__main__``, so the CLI shows patchspec's own."""

from __future__ import annotations

import os
import subprocess
import sys

import onnx

from helpers import PluginSite
from patchspec.testing import make_model

PLUGIN = """
from typing import Annotated, TypedDict

import patchspec.api as api
from patchspec import Param, PatchResult, PatchType, hookimpl


class OldParams(TypedDict):
    key: Annotated[str, Param("unused", default="x")]


class OldPatch(PatchType[OldParams]):
    name = "old.names"
    description = "Uses a deprecated name and a renamed one."

    def apply(self, model, params, context):
        api.uses_of  # deprecated
        list(api.annotations(model.graph))  # renamed all_annotations
        return PatchResult(False, "nothing")


@hookimpl
def register_patch_types(register):
    register(OldPatch)
"""


def run(folder, site, *options: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONWARNINGS",)}
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    command = [sys.executable, *options, "-m", "patchspec", "apply", "spec.yaml"]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300, check=False)


def test_a_plugins_deprecated_and_renamed_names_are_shown_and_the_run_goes_on(tmp_path, monkeypatch):
    site = PluginSite(tmp_path / "site", monkeypatch, "old-names", "1.0")
    plugin = site.install(PLUGIN, module="old_names_plugin", name="old")
    (tmp_path / "work" / ".git").mkdir(parents=True)
    onnx.save(make_model({"x": (1, 3)}), tmp_path / "work" / "m.onnx")
    (tmp_path / "work" / "spec.yaml").write_text(
        "patchspec: 1\nmodel: m.onnx\noutput: build/m.onnx\npatches:\n  - old.names: {}\n"
    )
    done = run(tmp_path / "work", site.root)
    assert done.returncode == 0, done.stderr
    assert f"{plugin}:17: DeprecationWarning: patchspec.api.uses_of is deprecated since plugin API 1.2" in done.stderr
    assert "patchspec.api.annotations was renamed all_annotations" in done.stderr
    assert "'_Feature' object is not callable" not in done.stderr
    quiet = run(tmp_path / "work", site.root, "-W", "ignore::DeprecationWarning")  # the user's -W wins
    assert quiet.returncode == 0 and "DeprecationWarning" not in quiet.stderr, quiet.stderr
