"""The plugin registry as users meet it: broken plugins, blocking, order, a checkout never installed.

Third-party plugins here are real installed distributions: a ``*.dist-info`` folder with an
``entry_points.txt`` on ``sys.path``, found by ``importlib.metadata`` exactly as pip's would be.
"""

from __future__ import annotations

import sys
import textwrap
import types
from importlib import metadata
from pathlib import Path

import pytest

from helpers import PluginSite
from patchspec.errors import PluginError
from patchspec.host import registry as plugins_module
from patchspec.host.registry import PluginRegistry
from patchspec.spec.catalog import DISABLE_ENV
from patchspec.testing import make_model, registered, run_cli, run_spec

PATCH_PLUGIN = """
from patchspec import PatchResult, PatchType, hookimpl

class AppendPatch(PatchType):
    name = "{type_name}"
    description = "append text to the model doc string"
    params_schema = {{"type": "object", "additionalProperties": False, "required": ["text"],
                      "properties": {{"text": {{"type": "string", "description": "what to append"}}}}}}

    def apply(self, model, params, context):
        model.doc_string += params["text"]
        return PatchResult(True, "appended " + params["text"])

@hookimpl
def register_patch_types(register):
    register(AppendPatch)
{extra}
"""

RAISE_AFTER_REGISTERING = """
@hookimpl
def register_verifiers(register):
    raise RuntimeError("cannot find the acme licence server")
"""

MISSPELLED_HOOK = """
@hookimpl
def register_verifier(register):
    pass
"""

VALID_SPEC = "patches: []\nverify: []\n"


class FakeSite:
    """A folder on sys.path where tests 'pip install' small distributions."""

    def __init__(self, root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.root = root
        self.modules: list[str] = []
        root.mkdir()
        monkeypatch.syspath_prepend(str(root))

    def install(self, dist: str, version: str, entry_points: dict[str, str], sources: dict[str, str]) -> None:
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
        (info / "entry_points.txt").write_text("[patchspec]\n" + lines)
        for module, source in sources.items():
            (self.root / f"{module}.py").write_text(textwrap.dedent(source))
            self.modules.append(module)

    def forget_modules(self) -> None:
        for module in self.modules:
            sys.modules.pop(module, None)


@pytest.fixture
def site(tmp_path, monkeypatch):
    fake = FakeSite(tmp_path / "site", monkeypatch)
    monkeypatch.delenv(DISABLE_ENV, raising=False)
    yield fake
    fake.forget_modules()


def patch_plugin(type_name: str, extra: str = "") -> str:
    return PATCH_PLUGIN.format(type_name=type_name, extra=extra)


def install_broken_plugins(site: FakeSite) -> None:
    site.install(
        "acme-missing", "1.0.1", {"missing": "missing_plugin"}, {"missing_plugin": "import not_installed_dependency\n"}
    )
    site.install(
        "acme-crash",
        "2.0.0",
        {"crash": "crash_plugin"},
        {"crash_plugin": patch_plugin("crash.append", RAISE_AFTER_REGISTERING)},
    )
    site.install(
        "acme-badclass",
        "0.3",
        {"badclass": "badclass_plugin"},
        {
            "badclass_plugin": "from patchspec import hookimpl\n@hookimpl\ndef register_patch_types(register):\n    register(dict)\n"
        },
    )
    site.install("acme-bare", "0.4", {"bare": "bare_plugin"}, {"bare_plugin": patch_plugin("append")})
    site.install(
        "acme-typo", "0.5", {"typo": "typo_plugin"}, {"typo_plugin": patch_plugin("typo.append", MISSPELLED_HOOK)}
    )


def plugins_listing() -> str:
    """The listing; exit 3 exactly when one plugin in it is BROKEN."""
    code, stdout, stderr = run_cli(["plugins"])
    assert code == (5 if "  BROKEN: " in stdout else 0), stderr
    return stdout


def block_of(listing: str, name: str) -> str:
    """The lines ``patchspec plugins`` prints for one plugin: its header and the indented lines after it."""
    lines = listing.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(f"{name} (")]
    assert len(starts) == 1, f"plugin {name!r} listed {len(starts)} times:\n{listing}"
    block = [lines[starts[0]]]
    for line in lines[starts[0] + 1 :]:
        if not line.startswith("  "):
            break
        block.append(line)
    return "\n".join(block)


@pytest.mark.parametrize(
    ("name", "label", "reason"),
    [
        (
            "missing",
            "acme-missing 1.0.1",
            "failed to import missing_plugin: ModuleNotFoundError: No module named 'not_installed_dependency'",
        ),
        ("crash", "acme-crash 2.0.0", "verifier registration raised RuntimeError: cannot find the acme licence server"),
        ("badclass", "acme-badclass 0.3", "registered <class 'dict'>, which is not a PatchType subclass"),
        ("bare", "acme-bare 0.4", "patch type name 'append' must start with 'bare.'"),
        ("typo", "acme-typo 0.5", "register_verifier"),
    ],
)
def test_broken_plugin_is_listed_with_name_version_and_reason(site, name, label, reason):
    install_broken_plugins(site)
    block = block_of(plugins_listing(), name)
    assert block.startswith(f"{name} ({label})"), block
    assert "BROKEN: " in block and reason in block, block
    assert "patch types:" not in block  # a broken plugin provides nothing, not what it got to register


def test_broken_plugins_do_not_break_validate_or_apply_of_specs_that_do_not_use_them(site, tmp_path):
    install_broken_plugins(site)
    run_spec(tmp_path / "v", VALID_SPEC, make_model(), command="validate").assert_success()
    run_spec(tmp_path / "a", VALID_SPEC, make_model()).assert_success()


@pytest.mark.parametrize(
    ("type_name", "failure"),
    [
        ("missing.append", "plugin 'missing' (acme-missing 1.0.1) failed to load: failed to import missing_plugin"),
        ("crash.append", "plugin 'crash' (acme-crash 2.0.0) failed to load: verifier registration raised RuntimeError"),
        ("typo.append", "plugin 'typo' (acme-typo 0.5) failed to load: invalid hooks"),
    ],
)
def test_spec_using_a_broken_plugin_is_invalid_with_a_hint_naming_the_failure(site, tmp_path, type_name, failure):
    install_broken_plugins(site)
    run = run_spec(tmp_path, f"patches:\n  - {type_name}: {{text: x}}\n", make_model(), command="validate")
    run.assert_failed(2, match=f"unknown patch type '{type_name}'")
    assert f"hint: {failure}" in run.stderr


def test_duplicate_type_name_is_an_error_naming_both_plugins(site, tmp_path):
    site.install("acme-one", "1.0", {"dupe": "dupe_one"}, {"dupe_one": patch_plugin("dupe.append")})
    site.install("acme-two", "2.0", {"dupe": "dupe_two"}, {"dupe_two": patch_plugin("dupe.append")})
    listing = plugins_listing()
    message = "the plugin name 'dupe' is claimed by acme-one 1.0 and acme-two 2.0: uninstall one of them"
    assert listing.count(f"BROKEN: {message}") == 2, listing  # neither wins by the order of sys.path
    registry = PluginRegistry.load()
    assert registry.owner("patch type", "dupe.append") is None


def test_disable_plugins_skips_broken_and_working_plugins_by_entry_point_name(site, tmp_path, monkeypatch):
    install_broken_plugins(site)
    site.install("acme-good", "1.0", {"good": "good_plugin"}, {"good_plugin": patch_plugin("good.append")})
    spec = "patches:\n  - good.append: {text: x}\n"
    run_spec(tmp_path / "on", spec, make_model(), command="validate").assert_success()
    monkeypatch.setenv(DISABLE_ENV, "missing, crash,good")
    listing = plugins_listing()
    assert "missing (" not in listing and "crash (" not in listing and "good (" not in listing
    assert "typo (acme-typo 0.5)" in listing  # only the named ones
    run_spec(tmp_path / "off", spec, make_model(), command="validate").assert_failed(
        2, match="unknown patch type 'good.append'"
    )


def test_patches_run_in_spec_order_whatever_order_pluggy_calls_plugins(tmp_path):
    alpha, beta = fake_plugin("alpha", patch_plugin("alpha.append")), fake_plugin("beta", patch_plugin("beta.append"))
    steps = [("beta", "1"), ("alpha", "2"), ("beta", "3"), ("alpha", "4")]
    for order in (steps, steps[::-1]):
        spec = "patches:\n" + "".join(f"  - {name}.append: {{text: '{text}'}}\n" for name, text in order)
        run = run_spec(tmp_path / "".join(t for _, t in order), spec, make_model(), plugins=[alpha, beta])
        run.assert_success()
        assert run.output_model.doc_string == "".join(text for _, text in order)


def test_verifiers_run_in_spec_order(tmp_path):
    calls: list[str] = []
    first, second = (fake_verifier_plugin(name, calls) for name in ("first", "second"))
    spec = "patches: []\nverify:\n  - second.record: {}\n  - first.record: {}\n  - second.record: {}\n"
    run_spec(tmp_path, spec, make_model(), plugins=[first, second]).assert_success()
    assert calls == ["second", "first", "second"]


def test_registered_plugin_is_gone_after_the_with_block(tmp_path):
    name, module = fake_plugin("scoped", patch_plugin("scoped.append"))
    with registered(module, name=name):
        assert "scoped.append" in PluginRegistry.load().patch_types
    assert "scoped.append" not in PluginRegistry.load().patch_types
    assert plugins_module._IN_PROCESS == []


def test_checkout_never_installed_says_to_pip_install(monkeypatch):
    third_party_only = [
        ep for ep in metadata.entry_points(group="patchspec") if ep.dist is None or ep.dist.name != "patchspec"
    ]
    monkeypatch.setattr(plugins_module, "_patchspec_entry_points", lambda: third_party_only)
    with pytest.raises(PluginError) as raised:
        PluginRegistry.load()
    assert "never installed" in raised.value.message
    code, _, stderr = run_cli(["plugins"])
    assert code != 0
    assert "run: pip install -e ." in stderr


def test_builtin_plugins_are_found_through_entry_points():
    registry = PluginRegistry.load()
    check = [p for p in registry.plugins if p.name == "check"]
    assert len(check) == 1 and check[0].builtin and check[0].error is None
    assert check[0].module == "patchspec_plugins.verify_check"
    assert registry.owner("verifier", "check") is check[0]


def fake_plugin(name: str, source: str) -> tuple[str, types.ModuleType]:
    """A plugin module made in memory, as ``(name, module)`` for ``run_spec(plugins=...)``."""
    module = types.ModuleType(f"fake_{name}_plugin")
    exec(compile(textwrap.dedent(source), module.__name__, "exec"), module.__dict__)
    return name, module


def fake_verifier_plugin(name: str, calls: list[str]) -> tuple[str, object]:
    """A plugin object (not a module) whose verifier records that it ran."""
    from patchspec import Verifier, VerifyResult, hookimpl

    class RecordVerifier(Verifier):
        description = "record that it ran"
        params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

        def verify(self, params, context):
            calls.append(name)
            return VerifyResult("passed", "recorded")

    RecordVerifier.name = f"{name}.record"

    class Plugin:
        @staticmethod
        @hookimpl
        def register_verifiers(register):
            register(RecordVerifier)

    return name, Plugin()


def test_a_plugin_is_imported_only_when_a_step_uses_one_of_its_types(site):
    site.install("acme-one", "1.0", {"one": "one_plugin"}, {"one_plugin": patch_plugin("one.append")})
    site.install("acme-two", "1.0", {"two": "two_plugin"}, {"two_plugin": patch_plugin("two.append")})
    registry = PluginRegistry.load()
    assert registry.owner("patch type", "one.append").distribution == "acme-one"  # found by its prefix
    assert "one_plugin" in sys.modules and "two_plugin" not in sys.modules
    assert "two.append" in set(registry.patch_types)  # listing the types loads every plugin
    assert "two_plugin" in sys.modules


def test_a_builtin_type_is_found_by_its_metadata_without_importing_the_other_builtins():
    import subprocess

    probe = (
        "import sys; from patchspec.host.registry import PluginRegistry; registry = PluginRegistry.load(); "
        "registry.verifiers['check']; print(sorted(m for m in sys.modules if m.startswith('patchspec_plugins.')))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "['patchspec_plugins.verify_check']", done.stdout + done.stderr


SHARED = """
from patchspec import PatchResult, PatchType, hookimpl


class APatch(PatchType):
    name = "fric.TYPE"
    description = "a patch of one of two distributions that both call their plugin 'fric'"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        return PatchResult(False, "nothing")


@hookimpl
def register_patch_types(register):
    register(APatch)
"""


def test_two_distributions_claiming_one_plugin_name_is_an_error_naming_both(tmp_path, monkeypatch):
    """Issue 35: one silently won (by the order of sys.path) and the other's types vanished."""
    PluginSite(tmp_path / "one", monkeypatch, "dist-one", "1.0").install(SHARED.replace("TYPE", "a"), module="mod_one")
    PluginSite(tmp_path / "two", monkeypatch, "dist-two", "2.0").install(SHARED.replace("TYPE", "b"), module="mod_two")
    listing = plugins_listing()
    assert listing.count("BROKEN: the plugin name 'fric' is claimed by dist-one 1.0 and dist-two 2.0") == 2, listing
    _, _, stderr = run_cli(["plugins"])  # the summary tells the two apart
    assert "2 installed plugins failed to load: plugin 'fric' (dist-one 1.0), plugin 'fric' (dist-two 2.0)" in stderr
    (tmp_path / "m.onnx").write_bytes(make_model({"x": ("N", 3)}).SerializeToString())
    (tmp_path / "s.yaml").write_text("patchspec: 1\nmodel: m.onnx\noutput: out/o.onnx\npatches:\n  - fric.a: {}\n")
    code, _, stderr = run_cli(["validate", "s.yaml"], cwd=tmp_path)
    assert code == 2 and "claimed by dist-one 1.0 and dist-two 2.0" in stderr, stderr


@pytest.mark.parametrize(
    ("wanted", "loads"), [(">=1.3,<2", True), (">=1.6", False), ("<1", False), ("==1.5", True), ("1.5", None)]
)
def test_a_plugin_requires_a_range_of_the_plugin_api_checked_at_load(tmp_path, monkeypatch, wanted, loads):
    import patchspec

    source = f"PATCHSPEC_API = {wanted!r}\n" + SHARED.replace("TYPE", "a")
    module = f"fric_ranged_{sum(map(ord, wanted))}"  # a module of its own per case: sys.modules keeps them
    monkeypatch.delitem(sys.modules, module, raising=False)
    PluginSite(tmp_path / "site", monkeypatch, "fric-tools", "3.0").install(source, module=module)
    block = block_of(plugins_listing(), "fric")
    if loads:
        assert "BROKEN" not in block and "patch types: fric.a" in block, block
    elif loads is False:
        assert f"requires plugin API {wanted}, and this patchspec has plugin API {patchspec.PLUGIN_API}" in block, block
        assert "install a fric-tools that fits patchspec" in block
    else:
        assert f"PATCHSPEC_API '{wanted}': '{wanted}' is not OPERATOR VERSION" in block, block
