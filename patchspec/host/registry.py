"""Load plugins from the ``patchspec`` entry-point group into a fresh registry, each only when needed.

One list of plugins: built-ins (distribution ``patchspec``) are found through the same entry
points as third-party ones. Each entry point is loaded inside a try, so a broken plugin is
reported with its name and version and does not break ``validate`` or ``plugins``.
Nothing happens at import time; every run builds its own :class:`PluginRegistry`.

A plugin is imported when a step needs one of its types, not before: the registry learns which
plugin provides a type from metadata, never by importing every plugin. A type name ``acme.x`` is
plugin ``acme``'s (the prefix rule every third-party type follows); a plugin may also declare its
types as entry points of their own, one per type (``[patchspec.patch_types]`` and
``[patchspec.verifiers]``: the type's name = ``module:Class``), which is how the built-ins' bare
names are found. Listing the types (``patchspec plugins``, ``schema``, a did-you-mean for an unknown
type) loads every plugin, as does a type no metadata places.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any, TypeVar

import pluggy

from patchspec import PLUGIN_API, __version__
from patchspec.errors import PluginError
from patchspec.host.api_range import range_problem
from patchspec.host.boundary import Guard, Origin, plugin_failure, schema_fault, shorthand_fault
from patchspec.host.installed import (
    _IN_PROCESS,
    BUILTIN_DISTRIBUTION,
    IN_PROCESS_DISTRIBUTION,
    disabled_names,
    distribution_of,
)
from patchspec.plugin import hookspecs
from patchspec.plugin.contract import PatchType, Verifier
from patchspec.spec.catalog import StepKind

T = TypeVar("T")


@dataclass
class PluginInfo:
    """One installed plugin as ``patchspec plugins`` shows it."""

    name: str
    distribution: str
    version: str
    module: str
    location: str = ""
    patch_types: list[str] = field(default_factory=list)
    verifiers: list[str] = field(default_factory=list)
    error: str | None = None
    #: the plugin's own traceback of ``error`` when its code raised (import or registration)
    traceback: str | None = None
    #: named in PATCHSPEC_DISABLE_PLUGINS: not loaded, provides nothing
    disabled: bool = False

    @property
    def builtin(self) -> bool:
        return self.distribution == BUILTIN_DISTRIBUTION

    @property
    def label(self) -> str:
        if self.distribution.startswith("("):  # "(registered in process)": no distribution
            return f"plugin '{self.name}' {self.distribution}"
        return f"plugin '{self.name}' ({self.distribution} {self.version})"

    @property
    def origin(self) -> Origin:
        """Who answers for this plugin's code when it faults (see :mod:`patchspec.host.boundary`)."""
        if self.builtin:
            return Origin(f"patchspec {self.version}", "patchspec's maintainers", (self.module,))
        if self.distribution in ("?", IN_PROCESS_DISTRIBUTION):
            return Origin(self.label, f"the author of plugin '{self.name}'", (self.module,))
        return Origin(self.label, f"the author of {self.distribution}", (self.module,))


#: the entry-point groups where a plugin may declare each of its types (name = ``module:Class``)
TYPE_GROUPS = {StepKind.PATCH_TYPE: f"{hookspecs.NAME}.patch_types", StepKind.VERIFIER: f"{hookspecs.NAME}.verifiers"}


class TypeTable(Mapping[str, type[T]]):
    """A registry's patch types (or verifiers) by name: a lookup loads only the plugin that provides
    the name; iterating lists every plugin's, so it loads them all."""

    def __init__(self, kind: str, need: Callable[[str, str], None], load_all: Callable[[], None]) -> None:
        self.kind = kind
        self.loaded: dict[str, type[T]] = {}
        self._need, self._load_all = need, load_all

    def __getitem__(self, name: str) -> type[T]:
        if name not in self.loaded:
            self._need(self.kind, name)
        return self.loaded[name]

    def __contains__(self, name: object) -> bool:
        if isinstance(name, str) and name not in self.loaded:
            self._need(self.kind, name)
        return name in self.loaded

    def __iter__(self) -> Iterator[str]:
        self._load_all()
        return iter(dict(self.loaded))

    def __len__(self) -> int:
        self._load_all()
        return len(self.loaded)


class PluginRegistry:
    """Every patch type and verifier available in this run, and which plugin gave it."""

    def __init__(self) -> None:
        self._plugins: list[PluginInfo] = []
        self.patch_types: TypeTable[PatchType[Any]] = TypeTable(StepKind.PATCH_TYPE, self._need, self._load_all)
        self.verifiers: TypeTable[Verifier[Any]] = TypeTable(StepKind.VERIFIER, self._need, self._load_all)
        self.owners: dict[tuple[str, str], PluginInfo] = {}  # (kind, name) -> plugin, of the plugins loaded
        #: installed plugins that PATCHSPEC_DISABLE_PLUGINS kept from loading
        self.disabled: list[PluginInfo] = []
        #: names in PATCHSPEC_DISABLE_PLUGINS that no installed plugin has (a typo, or uninstalled since)
        self.disabled_unknown: list[str] = []
        #: entry points not imported yet, by plugin name (two distributions may claim one name)
        self._pending: dict[str, list[metadata.EntryPoint]] = {}
        #: (kind, type name) -> the plugin names whose metadata declares it
        self._declared: dict[tuple[str, str], set[str]] = {}
        self._manager = pluggy.PluginManager(hookspecs.NAME)
        self._manager.add_hookspecs(hookspecs)

    @classmethod
    def load(
        cls, extra: Iterable[tuple[str, object]] = (), *, entry_points: Iterable[metadata.EntryPoint] | None = None
    ) -> PluginRegistry:
        """Find entry points (and take ``extra`` (name, module) pairs, for tests) for a new registry;
        an entry point is imported when one of its types is first asked for."""
        registry = cls()
        extra = [*_IN_PROCESS, *extra]
        disabled = disabled_names()
        replaced = {name for name, _ in _IN_PROCESS}  # an in-process plugin replaces the installed one
        found = sorted(entry_points if entry_points is not None else _patchspec_entry_points(), key=lambda e: e.name)
        for entry_point in found:
            if entry_point.name in replaced:
                continue
            if entry_point.name in disabled:
                info = _info(entry_point)
                info.disabled = True
                registry.disabled.append(info)
                continue
            registry._pending.setdefault(entry_point.name, []).append(entry_point)
        registry._refuse_shared_names()
        registry.disabled_unknown = sorted(disabled - {e.name for e in found})
        registry._declared = _declared_types(found) if entry_points is None else {}
        for name, module in extra:
            info = PluginInfo(name, IN_PROCESS_DISTRIBUTION, "", getattr(module, "__name__", repr(module)))
            registry._register_object(info, module)
        if not any(_is_builtin(e) for e in found) and entry_points is None:
            msg = "patchspec's built-in plugins are not registered: this checkout was never installed"
            raise PluginError(msg, "run: pip install -e .  (or: make demo)")
        return registry

    def _refuse_shared_names(self) -> None:
        """An entry-point name two distributions claim is an error naming both: each is listed as
        broken and provides nothing (which one won used to depend on the order of sys.path)."""
        for name, points in list(self._pending.items()):
            owners = sorted({distribution_of(point) for point in points})
            if len(owners) < 2:
                continue
            claimed = " and ".join(f"{dist} {version}" for dist, version in owners)
            for point in self._pending.pop(name):
                info = _info(point)
                info.error = f"the plugin name '{name}' is claimed by {claimed}: uninstall one of them"
                self._plugins.append(info)

    @property
    def plugins(self) -> list[PluginInfo]:
        """Every plugin, loaded (or found broken) by now."""
        self._load_all()
        return self._plugins

    def _need(self, kind: str, name: str) -> None:
        """Load the plugins that may provide ``kind`` ``name``: those whose metadata declares it, else
        the one its prefix names (``acme`` for ``acme.x``), else, for a bare name, the built-ins."""
        names = self._declared.get((kind, name)) or (
            {name.split(".")[0]}
            if "." in name
            else {plugin for plugin, points in self._pending.items() if any(map(_is_builtin, points))}
        )
        for plugin in sorted(names):
            for entry_point in self._pending.pop(plugin, []):
                self._load_entry_point(entry_point)

    def _load_all(self) -> None:
        while self._pending:
            for entry_point in self._pending.pop(min(self._pending)):
                self._load_entry_point(entry_point)

    def _load_entry_point(self, entry_point: metadata.EntryPoint) -> None:
        info = _info(entry_point)
        try:
            module = entry_point.load()
        except Exception as exc:  # a broken third-party plugin must not break the tool
            site, info.traceback = plugin_failure(exc, [entry_point.value])
            info.error = f"failed to import {entry_point.value}: {_exception_line(exc)}" + (
                f" (at {site})" if site else ""
            )
            if isinstance(exc, ImportError) and "from 'patchspec" in str(exc):  # a name this patchspec lacks
                info.error += (
                    f"; this patchspec {__version__} has plugin API {PLUGIN_API}: the plugin may need a newer one"
                )
            self._plugins.append(info)
            return
        self._register_object(info, module)

    def _register_object(self, info: PluginInfo, module: object) -> None:
        manager = self._manager
        info.location = getattr(module, "__file__", "") or ""
        self._plugins.append(info)
        if hasattr(module, "PATCHSPEC_API"):  # the plugin's range of plugin API versions, checked first
            problem = range_problem(module.PATCHSPEC_API, PLUGIN_API)
            if problem:
                info.error = (
                    f"{problem}: install a {info.distribution} that fits patchspec {__version__}, or another patchspec"
                )
                return
        try:
            # pluggy's name is unique per distribution, so that two distributions that claim the same
            # entry-point name reach the duplicate check below, which names both
            manager.register(module, name=f"{info.distribution}:{info.name}")
            manager.check_pending()
        except Exception as exc:
            info.error = f"invalid hooks: {exc}"
            if manager.is_registered(module):
                manager.unregister(module)
            return
        for hook_name, kind in (
            ("register_patch_types", StepKind.PATCH_TYPE),
            ("register_verifiers", StepKind.VERIFIER),
        ):
            for impl in getattr(manager.hook, hook_name).get_hookimpls():
                if impl.plugin is module:
                    self._call_register_hook(info, impl.function, kind)

    def _table(self, kind: str) -> dict[str, Any]:
        return self.patch_types.loaded if kind == StepKind.PATCH_TYPE else self.verifiers.loaded

    def _call_register_hook(self, info: PluginInfo, function: Callable[..., object], kind: str) -> None:
        base: type = PatchType if kind == StepKind.PATCH_TYPE else Verifier
        listed = info.patch_types if kind == StepKind.PATCH_TYPE else info.verifiers

        def register(cls_: type[PatchType[Any]] | type[Verifier[Any]]) -> None:
            self._add(info, cls_, kind, base)
            listed.append(cls_.name)

        try:
            function(register=register)
        except PluginError as exc:
            info.error = exc.message
        except Exception as exc:
            site, info.traceback = plugin_failure(exc, [info.module, getattr(function, "__module__", "") or ""])
            info.error = f"{kind} registration raised {_exception_line(exc)}" + (f" (at {site})" if site else "")
        if info.error:
            self._forget(info)

    def _forget(self, info: PluginInfo) -> None:
        """A broken plugin provides nothing, not the half it registered before failing."""
        for kind, name in [key for key, owner in self.owners.items() if owner is info]:
            del self.owners[(kind, name)]
            self._table(kind).pop(name, None)
        info.patch_types.clear()
        info.verifiers.clear()

    def _add(self, info: PluginInfo, cls_: type, kind: str, base: type) -> None:
        if not (isinstance(cls_, type) and issubclass(cls_, base)):
            msg = f"{info.label} registered {cls_!r}, which is not a {base.__name__} subclass"
            raise PluginError(msg)
        name = getattr(cls_, "name", None)
        if not isinstance(name, str) or not name:
            raise PluginError(f"{info.label}: {cls_.__name__} has no 'name'")
        for attr in ("description", "params_schema"):
            if not hasattr(cls_, attr):
                raise PluginError(f"{info.label}: {kind} {name!r} has no '{attr}'")
        # the built-ins' schemas are checked by patchspec's own tests (the same check, in the test kit):
        # checking them here would cost every command ~0.1 s
        fault = None if info.builtin else schema_fault(cls_) or shorthand_fault(cls_)
        if fault:
            raise PluginError(f"{kind} {name!r}: {fault}")
        if not info.builtin and not name.startswith(info.name + "."):
            msg = f"{info.label}: {kind} name {name!r} must start with '{info.name}.'; bare names are built-ins'"
            raise PluginError(msg)
        key = (kind, name)
        if key in self.owners:
            other = self.owners[key]
            raise PluginError(f"{kind} {name!r} is registered by both {other.label} and {info.label}")
        self.owners[key] = info
        self._table(kind)[name] = cls_

    def owner(self, kind: str, name: str) -> PluginInfo | None:
        if (kind, name) not in self.owners:
            self._need(kind, name)
        return self.owners.get((kind, name))

    def guard(self, kind: str, name: str, where: str = "") -> Guard:
        """The registered ``kind`` ("patch type" or "verifier") ``name``, to be called through the boundary
        for the step at ``where``."""
        cls_ = (self.patch_types if kind == StepKind.PATCH_TYPE else self.verifiers)[name]
        owner = self.owner(kind, name)
        return Guard(cls_, owner.origin if owner is not None else origin_of(cls_), where)

    def in_process(self) -> bool:
        """Whether a plugin was handed in by a test rather than installed (see :func:`installed_plugins`)."""
        return any(p.distribution == IN_PROCESS_DISTRIBUTION for p in self._plugins)

    def broken(self) -> list[PluginInfo]:
        return [p for p in self.plugins if p.error]

    def why_missing(self, type_name: str) -> PluginInfo | None:
        """The installed plugin that would provide ``type_name`` but is broken or disabled, if any.

        The plugin is the name's prefix (``acme`` for ``acme.x``; a bare name is a built-in's own).
        None when a working plugin of that name is loaded: the type is then merely unknown.
        """
        prefix = type_name.split(".")[0]
        if any(p.name == prefix and not p.error for p in self.plugins):  # an error's path: every plugin loaded
            return None
        return next((p for p in [*self.broken(), *self.disabled] if p.name == prefix), None)

    def versions(self) -> dict[str, str]:
        """Name -> version of every loaded plugin (part of the output digest)."""
        return {f"{p.distribution}:{p.name}": p.version for p in self.plugins if not p.error}


def _info(entry_point: metadata.EntryPoint) -> PluginInfo:
    distribution, version = distribution_of(entry_point)
    return PluginInfo(name=entry_point.name, distribution=distribution, version=version, module=entry_point.value)


def _exception_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def origin_of(cls_: type) -> Origin:
    """Who answers for ``cls_``, a class of an installed plugin or not (the test kit's checks): the
    plugin whose entry point is in the class's package, as the registry would name it."""
    module = cls_.__module__
    found = [e for e in _patchspec_entry_points() if e.value.split(":")[0].split(".")[0] == module.split(".")[0]]
    exact = [e for e in found if e.value.split(":")[0] == module]
    if exact or found:
        return _info((exact or found)[0]).origin
    top = module.split(".")[0]
    return Origin(f"module '{top}'", f"the author of '{top}'", (module,))


def _patchspec_entry_points() -> list[metadata.EntryPoint]:
    return list(metadata.entry_points(group=hookspecs.NAME))


def _is_builtin(entry_point: metadata.EntryPoint) -> bool:
    return distribution_of(entry_point)[0] == BUILTIN_DISTRIBUTION


def _declared_types(plugins: list[metadata.EntryPoint]) -> dict[tuple[str, str], set[str]]:
    """(kind, type name) -> the plugins whose distribution declares the type in its own entry point:
    the plugin whose module holds (or is a package above) the type's class."""
    declared: dict[tuple[str, str], set[str]] = {}
    for kind, group in TYPE_GROUPS.items():
        for entry in metadata.entry_points(group=group):
            module = entry.value.split(":")[0].strip()
            dist = distribution_of(entry)[0]
            for plugin in plugins:
                home = plugin.value.split(":")[0].strip()
                same_dist = distribution_of(plugin)[0] == dist
                if same_dist and (module == home or module.startswith(home + ".")):
                    declared.setdefault((kind, entry.name), set()).add(plugin.name)
    return declared


__all__ = ["TYPE_GROUPS", "PluginInfo", "PluginRegistry", "TypeTable", "origin_of"]
