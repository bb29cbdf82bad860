"""patchspec inside build systems: digest and 'up to date', --depfile, --report, --model/--output,
and real Make, Ninja and CMake builds (skipped where the tool is not installed)."""

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec
from patchspec.run.stamp import DIGEST_KEY

PATCHSPEC = Path(sys.executable).parent / "patchspec"


def add_model(value: float = 1.0) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.full((1, 8), value, dtype=np.float32), "w")
    return graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])], [tensor_info("x", [1, 8])], [tensor_info("y", [1, 8])], [weight]
    )


def save_external(model, path: Path) -> None:
    onnx.save(model, path, save_as_external_data=True, location=path.name + ".data", size_threshold=0)


def digest_of(path: Path) -> str:
    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}[DIGEST_KEY]


def parse_depfile(text: str) -> tuple[list[str], list[str]]:
    """Split a one-rule Make depfile into targets and prerequisites, undoing Make's escapes."""
    assert text.endswith("\n") and text.count("\n") == 1
    words, current, index = [], "", 0
    line = text.rstrip("\n")
    while index < len(line):
        char = line[index]
        if char == "\\" and index + 1 < len(line):
            current, index = current + line[index + 1], index + 2
            continue
        if char == "$" and line[index + 1 : index + 2] == "$":
            current, index = current + "$", index + 2
            continue
        if char == " ":
            if current:
                words.append(current)
            current, index = "", index + 1
            continue
        current, index = current + char, index + 1
    words.append(current)
    colon = next(i for i, word in enumerate(words) if word.endswith(":"))
    return words[:colon] + [words[colon][:-1]], words[colon + 1 :]


@pytest.fixture
def project(tmp_path):
    save_external(add_model(), tmp_path / "m.onnx")
    write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: build/m.onnx\npatches: []\n")
    return tmp_path


# -- digest -------------------------------------------------------------------------------------
def test_digest_changes_with_spec_text_model_data_and_no_verify(project, run_cli):
    spec = project / "spec.yaml"
    output = project / "build" / "m.onnx"
    assert run_cli("-q", "apply", "spec.yaml", cwd=project).exit_code == 0
    digests = [digest_of(output)]

    def rebuilt(*args) -> bool:
        result = run_cli("apply", "spec.yaml", *args, cwd=project)
        assert result.exit_code == 0, result.output
        digests.append(digest_of(output))
        return digests[-1] != digests[-2] and "up to date" not in result.stdout

    assert not rebuilt()  # nothing changed
    assert rebuilt("--no-verify")  # --no-verify is part of the digest
    assert not rebuilt("--no-verify")
    assert rebuilt()  # and back
    assert digests[-1] == digests[0]
    spec.write_text(spec.read_text() + "# a comment is part of the spec's text\n")
    assert rebuilt()
    save_external(add_model(2.0), project / "m.onnx")  # new data file, same graph bytes
    assert rebuilt()
    assert np.all(numpy_helper.to_array(onnx.load(str(output)).graph.initializer[0]) == 2.0)


def test_touching_an_input_without_changing_it_is_still_up_to_date(project, run_cli):
    """Up to date, and nothing rewritten; the output is dated at least as late as the touched input, so
    a build tool that compares times (Make, Ninja, CMake) settles instead of running patchspec forever."""
    assert run_cli("-q", "apply", "spec.yaml", cwd=project).exit_code == 0
    output = project / "build" / "m.onnx"
    stat, body = output.stat(), output.read_bytes()
    later = stat.st_mtime_ns + 5 * 10**9
    os.utime(project / "m.onnx.data", ns=(later, later))
    result = run_cli("apply", "spec.yaml", cwd=project)
    assert result.exit_code == 0 and "up to date" in result.stdout
    assert output.stat().st_ino == stat.st_ino and output.read_bytes() == body
    assert output.stat().st_mtime_ns >= later and (project / "build" / "m.onnx.data").stat().st_mtime_ns >= later
    again = run_cli("apply", "spec.yaml", cwd=project)
    assert "up to date" in again.stdout and output.stat().st_mtime_ns == later  # settled: not dated again


# -- --model / --output -------------------------------------------------------------------------
def test_model_and_output_overrides(project, run_cli):
    save_external(add_model(3.0), project / "other.onnx")
    result = run_cli("-q", "apply", "spec.yaml", "--model", "other.onnx", "--output", "elsewhere/o.onnx", cwd=project)
    assert result.exit_code == 0, result.output
    assert not (project / "build").exists()
    written = project / "elsewhere" / "o.onnx"
    assert np.all(numpy_helper.to_array(onnx.load(str(written)).graph.initializer[0]) == 3.0)
    assert (project / "elsewhere" / "o.onnx.data").is_file()


# -- --depfile ----------------------------------------------------------------------------------
def test_depfile_lists_spec_model_and_data_as_given(project, run_cli):
    result = run_cli("-q", "apply", "spec.yaml", "--depfile", "build/m.d", cwd=project)
    assert result.exit_code == 0, result.output
    targets, deps = parse_depfile((project / "build" / "m.d").read_text())
    assert targets == ["build/m.onnx", "build/m.onnx.data"]  # the data file is an output too
    assert deps == ["spec.yaml", "m.onnx", "m.onnx.data"]


def test_depfile_target_is_the_output_option_as_written(project, run_cli):
    result = run_cli(
        "-q", "apply", "spec.yaml", "--model", "./m.onnx", "--output", "out/x.onnx", "--depfile", "x.d", cwd=project
    )
    assert result.exit_code == 0, result.output
    targets, deps = parse_depfile((project / "x.d").read_text())
    assert (targets, deps) == (["out/x.onnx", "out/x.onnx.data"], ["spec.yaml", "m.onnx", "m.onnx.data"])


def test_depfile_escapes_spaces_and_special_characters(tmp_path, run_cli):
    (tmp_path / ".git").mkdir()  # a repository: the spec's folder and build/ beside it are inside it
    folder = tmp_path / "my models #1"
    folder.mkdir()
    save_external(add_model(), folder / "a model.onnx")
    write_spec(
        folder, "patchspec: 1\nmodel: a model.onnx\noutput: ../build $out/m.onnx\npatches: []\n", name="the spec.yaml"
    )
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    spec = folder / "the spec.yaml"
    result = run_cli("-q", "apply", spec, "--depfile", tmp_path / "deps.d", cwd=outside)
    assert result.exit_code == 0, result.output
    text = (tmp_path / "deps.d").read_text()
    assert "a\\ model.onnx" in text and "\\#1" in text and "$$out" in text
    targets, deps = parse_depfile(text)
    assert targets[0] == str(tmp_path / "build $out" / "m.onnx")  # outside the CWD: absolute
    assert deps == [str(spec), str(folder / "a model.onnx"), str(folder / "a model.onnx.data")]


def test_depfile_is_written_when_up_to_date_and_not_on_failure(project, run_cli):
    assert run_cli("-q", "apply", "spec.yaml", cwd=project).exit_code == 0
    result = run_cli("apply", "spec.yaml", "--depfile", "m.d", cwd=project)
    assert result.exit_code == 0 and "up to date" in result.stdout
    assert (project / "m.d").is_file()
    (project / "m.onnx").write_bytes(b"")
    failed = run_cli("-q", "apply", "spec.yaml", "--depfile", "n.d", cwd=project)
    assert failed.exit_code == 3 and not (project / "n.d").exists()


# -- --report -----------------------------------------------------------------------------------
def test_report_json_of_a_written_run(project, run_cli):
    result = run_cli("-q", "apply", "spec.yaml", "--report", "r.json", cwd=project)
    assert result.exit_code == 0, result.output
    report = json.loads((project / "r.json").read_text())
    assert report["status"] == "written" and report["error"] is None
    assert Path(report["output"]) == project / "build" / "m.onnx"
    assert Path(report["model"]) == project / "m.onnx"
    assert sorted(Path(f).name for f in report["files"]) == ["m.onnx", "m.onnx.data"]
    assert report["patches"] == []
    (check,) = report["verifiers"]
    assert check["label"] == "verify[0] (check)" and check["status"] == "passed" and check["seconds"] >= 0


def test_report_json_of_up_to_date_and_failed_runs(project, run_cli):
    assert run_cli("-q", "apply", "spec.yaml", cwd=project).exit_code == 0
    assert run_cli("-q", "apply", "spec.yaml", "--report", "r.json", cwd=project).exit_code == 0
    assert json.loads((project / "r.json").read_text())["status"] == "up to date"
    (project / "m.onnx").write_bytes(b"")
    assert run_cli("-q", "apply", "spec.yaml", "--force", "--report", "r.json", cwd=project).exit_code == 3
    report = json.loads((project / "r.json").read_text())
    assert report["status"] == "failed" and "not an ONNX model (0 bytes)" in report["error"]


def test_report_of_several_specs(project, run_cli):
    write_spec(project, "patchspec: 1\nmodel: m.onnx\noutput: build/two.onnx\npatches: []\n", name="two.yaml")
    assert run_cli("-q", "apply", "spec.yaml", "two.yaml", "--report", "r.json", cwd=project).exit_code == 0
    runs = json.loads((project / "r.json").read_text())["runs"]
    assert [Path(r["output"]).name for r in runs] == ["m.onnx", "two.onnx"]
    assert all(r["status"] == "written" for r in runs)


# -- real build tools ---------------------------------------------------------------------------
def run_tool(args, cwd) -> str:
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout


def bump_mtime(path: Path) -> None:
    later = time.time() + 5
    os.utime(path, (later, later))


needs_console_script = pytest.mark.skipif(
    not PATCHSPEC.exists(), reason="the patchspec console script is not installed"
)


@needs_console_script
@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_rebuilds_when_a_file_named_only_in_the_depfile_changes(project):
    (project / "Makefile").write_text(
        f"build/m.onnx: spec.yaml\n\t{PATCHSPEC} -q apply $< --output $@ --depfile $@.d\n-include build/m.onnx.d\n"
    )
    run_tool(["make"], project)
    assert (project / "build" / "m.onnx").is_file()
    assert "is up to date" in run_tool(["make"], project)
    save_external(add_model(2.0), project / "m.onnx")  # m.onnx and its data: named only by the depfile
    assert "patchspec" in run_tool(["make"], project)
    assert "is up to date" in run_tool(["make"], project)
    assert np.all(numpy_helper.to_array(onnx.load(str(project / "build" / "m.onnx")).graph.initializer[0]) == 2.0)


@needs_console_script
@pytest.mark.skipif(shutil.which("ninja") is None, reason="ninja is not installed")
def test_ninja_rebuilds_when_a_file_named_only_in_the_depfile_changes(project):
    (project / "build.ninja").write_text(
        "rule patchspec\n"
        f"  command = {PATCHSPEC} -q apply $in --output $out --depfile $out.d\n"
        "  depfile = $out.d\n  deps = gcc\n  restat = 1\n"
        "build build/m.onnx: patchspec spec.yaml\n"
    )
    run_tool(["ninja"], project)
    assert "no work to do" in run_tool(["ninja"], project)
    bump_mtime(project / "m.onnx")  # named only by the depfile
    assert "patchspec" in run_tool(["ninja", "-v"], project)
    assert "no work to do" in run_tool(["ninja"], project)
    (project / "spec.yaml").write_text((project / "spec.yaml").read_text() + "# changed\n")
    run_tool(["ninja"], project)
    assert "no work to do" in run_tool(["ninja", "-d", "explain"], project)


@pytest.mark.slow
@needs_console_script
@pytest.mark.skipif(
    shutil.which("cmake") is None or shutil.which("ninja") is None, reason="cmake or ninja is not installed"
)
def test_cmake_custom_command_with_depfile(project):
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.21)\nproject(patched NONE)\n"
        "add_custom_command(\n"
        "  OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/m.onnx ${CMAKE_CURRENT_BINARY_DIR}/m.onnx.data\n"
        f"  COMMAND {PATCHSPEC} -q apply ${{CMAKE_CURRENT_SOURCE_DIR}}/spec.yaml\n"
        "          --output ${CMAKE_CURRENT_BINARY_DIR}/m.onnx --depfile ${CMAKE_CURRENT_BINARY_DIR}/m.onnx.d\n"
        "  DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/spec.yaml\n"
        "  DEPFILE ${CMAKE_CURRENT_BINARY_DIR}/m.onnx.d)\n"
        "add_custom_target(model ALL DEPENDS ${CMAKE_CURRENT_BINARY_DIR}/m.onnx)\n"
    )
    build = project / "cmake-build"
    run_tool(["cmake", "-G", "Ninja", "-S", str(project), "-B", str(build)], project)
    run_tool(["cmake", "--build", str(build)], project)
    assert (build / "m.onnx").is_file()
    assert "no work to do" in run_tool(["cmake", "--build", str(build)], project)
    bump_mtime(project / "m.onnx.data")
    assert "patchspec" in run_tool(["cmake", "--build", str(build), "--verbose"], project)
    assert "no work to do" in run_tool(["cmake", "--build", str(build)], project)


@pytest.mark.slow
@needs_console_script
@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
@pytest.mark.parametrize("generator", ["Ninja", "Unix Makefiles"])
def test_cmake_module_patchspec_add_model(project, generator):
    if shutil.which("ninja" if generator == "Ninja" else "make") is None:
        pytest.skip(f"no {generator} build tool installed")
    module_dir = run_tool([str(PATCHSPEC), "cmake-path"], project).strip()
    assert (Path(module_dir) / "Patchspec.cmake").is_file()
    (project / "CMakeLists.txt").write_text(
        "cmake_minimum_required(VERSION 3.20)\nproject(patched NONE)\n"
        f'list(APPEND CMAKE_MODULE_PATH "{module_dir}")\ninclude(Patchspec)\n'
        f'patchspec_add_model(model SPEC spec.yaml OUTPUT m.onnx DATA m.onnx.data PATCHSPEC "{PATCHSPEC}")\n'
    )
    build = project / f"cmake-{generator.split()[0].lower()}"
    run_tool(["cmake", "-G", generator, "-S", str(project), "-B", str(build)], project)
    run_tool(["cmake", "--build", str(build)], project)
    assert (build / "m.onnx").is_file() and (build / "m.onnx.data").is_file()
    bump_mtime(project / "m.onnx.data")  # an input's data file: the depfile names it
    assert "patchspec" in run_tool(["cmake", "--build", str(build), "--verbose"], project)
    (build / "m.onnx.data").unlink()  # a deleted output data file rebuilds too
    run_tool(["cmake", "--build", str(build)], project)
    assert (build / "m.onnx.data").is_file()
