"""One list of plugins, a wheel that works outside this checkout, and a demo that installs what a user gets.

The folder ``plugins/`` (installed as ``patchspec_plugins``) and ``[project.entry-points.patchspec]``
must agree. ``make demo`` installs patchspec as a user does, without the test tools or the example
plugin. The slow tests build the wheel (without a warning from the build backend), install it into a
throwaway virtualenv, then the example plugin, and run ``patchspec`` from there.
"""

from __future__ import annotations

import configparser
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import onnx
import pytest

from patchspec.testing import SPEC_HEADER, make_model

REPO = Path(__file__).resolve().parents[2]
ACME = REPO / "examples" / "plugin-acme"
PLUGIN_PACKAGE = "patchspec_plugins"
SOURCES = ("pyproject.toml", "setup.py", "README.md", "LICENSE", "patchspec", "plugins")  # what the wheel is built from
#: what only the test suite and the linters need: a user's install has none of it
TEST_ONLY = ("acme", "pytest", "hypothesis", "hatchling", "ruff", "mypy", "rapidocr", "corpus", "[test", "lint]")


def pyproject() -> dict:
    if sys.version_info < (3, 11):
        pytest.skip("reads pyproject.toml with tomllib (python 3.11+); the 3.11 CI job covers it")
    import tomllib

    with open(REPO / "pyproject.toml", "rb") as handle:
        return tomllib.load(handle)


def declared_entry_points() -> dict[str, str]:
    return dict(pyproject()["project"].get("entry-points", {}).get("patchspec", {}))


def plugin_modules() -> list[str]:
    """Modules in plugins/ that must be plugins; ``_name.py`` helpers shared by plugins are not."""
    return sorted(p.stem for p in (REPO / "plugins").glob("*.py") if not p.stem.startswith("_"))


def test_every_plugin_module_has_exactly_one_entry_point():
    targets = list(declared_entry_points().values())
    problems = []
    for module in plugin_modules():
        count = targets.count(f"{PLUGIN_PACKAGE}.{module}")
        if count != 1:
            problems.append(
                f"plugins/{module}.py has {count} entry points in [project.entry-points.patchspec], expected 1; "
                f"add '{module.removeprefix('verify_')} = \"{PLUGIN_PACKAGE}.{module}\"' "
                f"or, if it is a helper shared by plugins, rename it plugins/_{module}.py"
            )
    assert not problems, "\n".join(problems)


def test_every_entry_point_names_a_module_in_the_plugins_folder():
    problems = []
    for name, target in declared_entry_points().items():
        package, _, module = target.partition(".")
        if package != PLUGIN_PACKAGE or not module.isidentifier():
            problems.append(
                f"entry point {name} = {target!r}: expected '{PLUGIN_PACKAGE}.<module>', a module of plugins/"
            )
        elif not (REPO / "plugins" / f"{module}.py").is_file():
            problems.append(f"entry point {name} = {target!r}: plugins/{module}.py does not exist")
    assert not problems, "\n".join(problems)


def test_the_version_is_written_once_and_packages_are_found_not_listed():
    config = pyproject()
    assert "version" not in config["project"] and "version" in config["project"]["dynamic"], (
        "pyproject.toml must read the version from patchspec.__version__, not repeat it"
    )
    assert config["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "patchspec.__version__"}
    assert "packages" not in config["tool"]["setuptools"], "a hand-kept package list: setup.py finds the packages"


def make_dry_run(target: str, tmp_path: Path) -> str:
    """The commands ``make TARGET`` runs on a fresh clone (.venv spelled ``$VENV``): every step (-B), printed, not run (-n)."""
    if shutil.which("make") is None:
        pytest.skip("needs make")
    venv = tmp_path / "fresh" / ".venv"
    done = subprocess.run(
        ["make", "-n", "-B", target, f"VENV={venv}"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.replace(str(venv), "$VENV")


def test_make_demo_installs_patchspec_as_a_user_does(tmp_path):
    commands = make_dry_run("demo", tmp_path)
    installs = [line for line in commands.splitlines() if " pip install" in line]
    assert any(line.endswith("pip install -q .") for line in installs), (
        f"make demo does not `pip install .`:\n{commands}"
    )
    extra = [line for line in installs if " -e " in line or any(word in line for word in TEST_ONLY)]
    assert not extra, "make demo installs what only the tests need (a user's install has none of it):\n" + "\n".join(
        extra
    )
    assert "patchspec apply specs/scrfd_b32.yaml" in commands


def test_make_test_still_sets_up_the_whole_suite(tmp_path):
    commands = make_dry_run("test", tmp_path)
    for needed in (
        "pip install -q -e '.[test,lint]'",
        "pip install -q -e examples/plugin-acme",
        "rapidocr",
        "--target $VENV/corpus",
        "pytest -q tests",
        "examples/plugin-acme/tests",
    ):
        assert needed in commands, f"make test no longer runs {needed!r}:\n{commands}"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, str]:
    """patchspec's wheel and pip's verbose log, built from a copy of the sources (the checkout gets no build/ folder)."""
    work = tmp_path_factory.mktemp("wheel")
    source = copy_sources(REPO, SOURCES, work / "src")
    log = pip(sys.executable, "wheel", "--no-deps", "-v", "-w", str(work / "dist"), str(source))
    (wheel,) = (work / "dist").glob("patchspec-*.whl")
    return wheel, log


@pytest.fixture(scope="module")
def wheel(built) -> Path:
    return built[0]


@pytest.mark.slow
def test_the_build_backend_has_no_warning(built):
    _, log = built
    warnings = [line.strip() for line in log.splitlines() if "Warning" in line or "absent from" in line]
    assert not warnings, "building the wheel warns:\n" + "\n".join(warnings)


@pytest.mark.slow
def test_the_wheel_has_the_version_and_requires_no_test_tool(wheel):
    import patchspec

    with zipfile.ZipFile(wheel) as archive:
        (metadata_file,) = [n for n in archive.namelist() if n.endswith(".dist-info/METADATA")]
        metadata = archive.read(metadata_file).decode()
    assert f"\nVersion: {patchspec.__version__}\n" in metadata
    required = [line for line in metadata.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert required and not [line for line in required if any(word in line.lower() for word in TEST_ONLY)], required


@pytest.mark.slow
def test_wheel_ships_the_plugins_under_their_own_name_with_the_entry_points(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        (entry_file,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        parser = configparser.ConfigParser()
        parser.optionxform = str  # keep names as written
        parser.read_string(archive.read(entry_file).decode())
    assert not [n for n in names if n.startswith("plugins/")], "plugins/ must not be installed as a top-level package"
    shipped = sorted(Path(n).stem for n in names if n.startswith(f"{PLUGIN_PACKAGE}/") and n.endswith(".py"))
    assert shipped == sorted(["__init__", *(p.stem for p in (REPO / "plugins").glob("*.py") if p.stem != "__init__")])
    assert dict(parser["patchspec"]) == declared_entry_points()
    assert parser["console_scripts"]["patchspec"] == "patchspec.cli:script"
    data = {"patchspec/py.typed", "patchspec/cmake/Patchspec.cmake"}
    assert data <= set(names), f"the wheel lacks {sorted(data - set(names))}"
    sources = {
        p.relative_to(REPO).as_posix()
        for p in (REPO / "patchspec").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts
    }
    assert not sources - set(names), f"the wheel lacks {sorted(sources - set(names))}"


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("PIP_NO_INDEX", "").lower() in ("1", "true", "yes", "on"),
    reason="PIP_NO_INDEX is set: a fresh virtualenv cannot get patchspec's dependencies (an offline machine)",
)
def test_wheel_and_example_plugin_work_in_a_fresh_virtualenv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = str(venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python"))
    pip(python, "install", "-q", str(wheel))
    alone = patchspec(venv, "plugins", cwd=tmp_path)
    assert "check (built-in" in alone and "acme" not in alone, alone
    acme = copy_sources(ACME, ("pyproject.toml", "README.md", "patchspec_acme"), tmp_path / "acme")
    pip(python, "install", "-q", str(acme), "pytest")
    listing = patchspec(venv, "plugins", cwd=tmp_path)
    assert "check (built-in 0.1.0)" in listing and "acme (patchspec-acme 0.1.0)" in listing, listing
    assert str(REPO) not in listing, f"plugins were loaded from the checkout, not the wheel:\n{listing}"
    onnx.save(make_model(doc_string="exported by acme"), str(tmp_path / "model.onnx"))
    spec = SPEC_HEADER + "patches:\n  - acme.strip_doc_strings: {}\nverify:\n  - check: {}\n  - acme.max_nodes: 1\n"
    (tmp_path / "spec.yaml").write_text(spec)
    applied = patchspec(venv, "apply", "spec.yaml", cwd=tmp_path)
    assert "removed" in applied and "doc string" in applied, applied
    assert onnx.load(str(tmp_path / "out" / "model.onnx")).doc_string == ""
    tests = subprocess.run(
        [python, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ACME / "tests")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr


def copy_sources(folder: Path, names, target: Path) -> Path:
    """Build from a copy: pip builds in the source tree, which would leave build/ in the checkout."""
    target.mkdir(parents=True)
    for name in names:
        path = folder / name
        if path.is_dir():
            shutil.copytree(
                path, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build")
            )
        elif path.is_file():
            shutil.copy2(path, target / name)
    return target


def pip(python: str, *args: str) -> str:
    done = subprocess.run([python, "-m", "pip", *args], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"pip {' '.join(args)} failed:\n{done.stdout}{done.stderr}"
    return done.stdout + done.stderr


def patchspec(venv: Path, *args: str, cwd: Path) -> str:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PATCHSPEC_DISABLE_PLUGINS")}
    command = [str(venv / ("Scripts" if os.name == "nt" else "bin") / "patchspec"), *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, f"patchspec {' '.join(args)} -> {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout


def test_each_builtin_type_is_declared_as_metadata_for_the_plugin_that_registers_it():
    """The registry imports a built-in only for the types pyproject.toml says it provides: every type
    a built-in registers is declared, under its kind's group, with the module that registers it."""
    from patchspec.host.registry import TYPE_GROUPS, PluginRegistry

    groups = pyproject()["project"]["entry-points"]
    declared = {(kind, name): module for kind, group in TYPE_GROUPS.items() for name, module in groups[group].items()}
    registered = {}
    for plugin in PluginRegistry.load().plugins:
        if plugin.builtin:
            registered.update({("patch type", name): plugin.module for name in plugin.patch_types})
            registered.update({("verifier", name): plugin.module for name in plugin.verifiers})
    assert declared == registered, (
        f'[project.entry-points."patchspec.patch_types"] and ."patchspec.verifiers" must name each built-in type '
        f"with the module that registers it: declared {declared}, registered {registered}"
    )
