"""A hatchling build hook: apply specs while a wheel is built, and ship the patched models in it.

In the pyproject.toml of a project whose wheel ships models (patchspec must be a build requirement;
docs/build-systems.md says how ``requires`` names a wheel or a checkout):

    [build-system]
    requires = ["hatchling", "patchspec @ file:///opt/wheels/patchspec-0.1.0-py3-none-any.whl"]
    build-backend = "hatchling.build"

    [tool.hatch.build.hooks.patchspec]
    specs = ["specs/detector_b32.yaml"]

Each spec is applied as ``patchspec apply`` would (up to date when nothing changed; verifiers run;
a failure fails the build with patchspec's message) when the wheel is built; an sdist holds the
sources (the specs and the models they read), not their outputs. The output model and its data
files are put in the wheel at their paths relative to the project root, even when they are
git-ignored build artifacts. patchspec's bookkeeping beside an output (its lock, stat cache and
staging folders, which hold this machine's paths, inodes and mtimes) is left out of every target,
so a wheel is the same bytes wherever and whenever it is built (hatchling's reproducible builds:
``SOURCE_DATE_EPOCH``). hatchling imports this module through the ``hatch`` entry point; nothing
else needs it.
"""

from __future__ import annotations

from pathlib import Path, PurePath
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
        specs = self.config.get("specs", [])
        if not isinstance(specs, list) or not all(isinstance(s, str) for s in specs):
            raise ValueError("[tool.hatch.build.hooks.patchspec] specs must be a list of spec paths")
        leave_out_bookkeeping(self.build_config)
        if self.target_name == "wheel":
            for source, target in self._apply(specs).items():
                build_data["force_include"][source] = target

    def _apply(self, specs: list[str]) -> dict[str, str]:
        """Apply each spec; the files they wrote, as hatchling's force_include (path: path in the wheel)."""
        from patchspec.errors import PatchspecError
        from patchspec.host.registry import PluginRegistry
        from patchspec.run.engine import Engine
        from patchspec.spec.confine import project_root
        from patchspec.spec.load import load_spec

        root = Path(self.root)
        # the specs' project root: the repository holding this project, else the project's own folder
        # (an sdist has no .git), whichever folder the spec sits in
        confined = project_root(root / "pyproject.toml")
        registry = PluginRegistry.load()
        engine = Engine(registry, lambda text: self.app.display_info(text), root=confined)
        shipped: dict[str, str] = {}
        for relative in specs:
            try:
                spec = load_spec(root / relative, registry, root=confined)
                report = engine.apply(spec)
            except PatchspecError as exc:
                raise RuntimeError(f"patchspec: {exc}") from None
            for name in report.files:
                shipped[name] = Path(name).relative_to(root).as_posix()
        return shipped


def leave_out_bookkeeping(config: Any) -> None:
    """Make hatchling's builder ``config`` leave out patchspec's own files (any path through one of its
    names: the lock, a stat cache, a staging folder) wherever they lie, whatever includes them.

    hatchling gives a hook no way to exclude a file, so its ``include_path`` is wrapped: every file
    hatchling walks, or finds in a force-included folder, goes through it (``include``, ``exclude``,
    ``artifacts`` and .gitignore are decided there)."""
    from patchspec.spec.confine import reserved_name

    included = config.include_path

    def include_path(relative_path: str, *args: Any, **kwargs: Any) -> bool:
        if any(reserved_name(part) for part in PurePath(relative_path).parts):
            return False
        return bool(included(relative_path, *args, **kwargs))

    config.include_path = include_path


@hookimpl
def hatch_register_build_hook() -> type[PatchspecBuildHook]:
    return PatchspecBuildHook
