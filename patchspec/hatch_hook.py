"""A hatchling build hook: apply specs while a wheel is built, and ship the patched models in it.

In the pyproject.toml of a project whose wheel ships models (patchspec must be a build requirement):

    [build-system]
    requires = ["hatchling", "patchspec"]
    build-backend = "hatchling.build"

    [tool.hatch.build.hooks.patchspec]
    specs = ["specs/detector_b32.yaml"]

Each spec is applied as ``patchspec apply`` would (up to date when nothing changed; verifiers run;
a failure fails the build with patchspec's message). The output model and its data files are put in
the wheel at their paths relative to the project root, even when they are git-ignored build
artifacts. hatchling imports this module through the ``hatch`` entry point; nothing else needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface
from hatchling.plugin import hookimpl

if TYPE_CHECKING:  # generic in hatchling's stubs; older hatchling is not subscriptable at run time
    _BuildHook = BuildHookInterface[Any]
else:
    _BuildHook = BuildHookInterface


class PatchspecBuildHook(_BuildHook):
    PLUGIN_NAME = "patchspec"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        from patchspec.errors import PatchspecError
        from patchspec.host.registry import PluginRegistry
        from patchspec.run.engine import Engine
        from patchspec.spec.confine import project_root
        from patchspec.spec.load import load_spec

        specs = self.config.get("specs", [])
        if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
            raise ValueError("[tool.hatch.build.hooks.patchspec] specs must be a list of spec paths")
        root = Path(self.root)
        # the specs' project root: the repository holding this project, else the project's own folder
        # (an sdist has no .git), whichever folder the spec sits in
        confined = project_root(root / "pyproject.toml")
        registry = PluginRegistry.load()
        engine = Engine(registry, lambda text: self.app.display_info(text), root=confined)
        for relative in specs:
            try:
                spec = load_spec(root / relative, registry, root=confined)
                report = engine.apply(spec)
            except PatchspecError as exc:
                raise RuntimeError(f"patchspec: {exc}") from None
            for name in report.files:
                path = Path(name)
                build_data["force_include"][str(path)] = path.relative_to(root).as_posix()


@hookimpl
def hatch_register_build_hook() -> type[PatchspecBuildHook]:
    return PatchspecBuildHook
