"""The output is written by staging + rename only: symlinks, stale files, failures, signals, races, readers.

Signals need a second process. The child (``CHILD`` below) is the real ``patchspec.cli.main`` with
one extra verifier registered in that process: it writes a marker file from inside the staging
folder and sleeps, so the parent knows the run is mid-write when it sends the signal. No timing
guesses: the signal always lands while staging exists.
"""

import errno
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import patchspec.run.commit
from helpers import graph_model, tensor_info, write_spec
from patchspec.run.commit import PREFIX

VENV_PATCHSPEC = Path(sys.executable).parent / "patchspec"


def add_model(value: float, doc: str = "") -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.full((1, 256), value, dtype=np.float32), "w")
    model = graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [tensor_info("x", [1, 256])],
        [tensor_info("y", [1, 256])],
        [weight],
    )
    model.doc_string = doc
    return model


def save_external(model: onnx.ModelProto, path: Path) -> None:
    onnx.save(
        model,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=path.name + ".data",
        size_threshold=0,
    )


def snapshot(*paths):
    return {str(p): (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_ino) for p in paths}


def staging_left(folder: Path) -> list[Path]:
    return [p for p in folder.rglob(PREFIX + "*")]


def weights(path: Path) -> np.ndarray:
    model = onnx.load(str(path))  # with external data, resolved next to the file
    return numpy_helper.to_array(model.graph.initializer[0])


@pytest.fixture
def inline_project(tmp_path):
    onnx.save(add_model(1.0), tmp_path / "m.onnx")
    write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches: []\n")
    return tmp_path


@pytest.fixture
def external_project(tmp_path):
    save_external(add_model(1.0), tmp_path / "m.onnx")
    write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches: []\n")
    return tmp_path


# -- symlinks and stale files ---------------------------------------------------------------------
def test_symlinked_output_is_replaced_and_its_target_untouched(inline_project, run_cli):
    (inline_project / "out").mkdir()
    target = inline_project / "elsewhere.onnx"
    target.write_bytes(b"someone else's file")
    (inline_project / "out" / "m.onnx").symlink_to(target)
    before = snapshot(target, inline_project / "m.onnx")
    output = inline_project / "out" / "m.onnx"
    refused = run_cli("apply", inline_project / "spec.yaml")  # the spec's output: a link is not patchspec's file
    assert refused.exit_code == 2 and "patchspec did not write" in refused.stderr, refused.output
    assert output.is_symlink() and snapshot(target, inline_project / "m.onnx") == before
    result = run_cli("apply", inline_project / "spec.yaml", "--output", output)  # the caller's: the link goes
    assert result.exit_code == 0, result.output
    assert not output.is_symlink() and onnx.load(str(output)).graph.node[0].op_type == "Add"
    assert snapshot(target, inline_project / "m.onnx") == before


def test_symlinked_output_data_file_is_replaced_and_its_target_untouched(external_project, run_cli):
    out = external_project / "out"
    out.mkdir()
    target = external_project / "precious.bin"
    target.write_bytes(b"\x07" * 4096)
    (out / "m.onnx.data").symlink_to(target)
    before = snapshot(target)
    refused = run_cli("apply", external_project / "spec.yaml")
    assert refused.exit_code == 2 and "patchspec did not write" in refused.stderr, refused.output
    assert (out / "m.onnx.data").is_symlink() and snapshot(target) == before
    result = run_cli("apply", external_project / "spec.yaml", "--output-dir", out)  # the caller's output folder
    assert result.exit_code == 0, result.output
    assert not (out / "m.onnx.data").is_symlink()
    assert snapshot(target) == before
    assert np.all(weights(out / "m.onnx") == 1.0)


def test_stale_data_file_is_never_appended_to(external_project, run_cli):
    out = external_project / "out"
    out.mkdir()
    (out / "m.onnx.data").write_bytes(b"\xff" * (1 << 20))
    result = run_cli("apply", external_project / "spec.yaml", "--output-dir", out)
    assert result.exit_code == 0, result.output
    size = (out / "m.onnx.data").stat().st_size
    assert 256 * 4 <= size < (1 << 20)
    assert np.all(weights(out / "m.onnx") == 1.0)


def test_stale_staging_folders_are_never_written_into(external_project, run_cli):
    stale = external_project / "out" / f"{PREFIX}stale"
    stale.mkdir(parents=True)
    for name in ("m.onnx", "m.onnx.data"):
        (stale / name).write_bytes(b"left by a killed run")
    before = snapshot(stale / "m.onnx", stale / "m.onnx.data")
    result = run_cli("apply", external_project / "spec.yaml")
    assert result.exit_code == 0, result.output
    assert snapshot(stale / "m.onnx", stale / "m.onnx.data") == before
    assert staging_left(external_project) == [stale]
    assert np.all(weights(external_project / "out" / "m.onnx") == 1.0)


# -- an output folder that cannot be written ------------------------------------------------------
@pytest.mark.skipif(
    os.name != "posix" or os.geteuid() == 0,
    reason="root writes into a 0555 folder anyway; the monkeypatched tests below cover it",
)
def test_read_only_output_folder_is_exit_3_naming_it(inline_project, run_cli):
    assert run_cli("-q", "apply", inline_project / "spec.yaml").exit_code == 0
    out = inline_project / "out"
    before = snapshot(out / "m.onnx")
    out.chmod(0o555)
    try:
        result = run_cli("apply", inline_project / "spec.yaml", "--force", "--no-verify")
    finally:
        out.chmod(0o755)
    assert result.exit_code == 3 and str(out) in result.stderr and "Traceback" not in result.output
    assert snapshot(out / "m.onnx") == before


def test_staging_folder_cannot_be_created_is_exit_3_naming_it(inline_project, run_cli, monkeypatch):
    assert run_cli("-q", "apply", inline_project / "spec.yaml").exit_code == 0
    out = inline_project / "out"
    before = snapshot(out / "m.onnx")

    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(patchspec.run.commit.tempfile, "mkdtemp", refuse)
    result = run_cli("apply", inline_project / "spec.yaml", "--no-verify")  # a new digest: must write
    assert result.exit_code == 3, result.output
    assert f"{out}: cannot write the output here: Permission denied" in result.stderr
    assert "Traceback" not in result.output
    assert snapshot(out / "m.onnx") == before


@pytest.mark.parametrize("failing", ["m.onnx", "m.onnx.data"])
def test_failing_rename_is_exit_3_and_previous_output_intact(external_project, run_cli, monkeypatch, failing):
    assert run_cli("-q", "apply", external_project / "spec.yaml").exit_code == 0
    out = external_project / "out"
    save_external(add_model(2.0), external_project / "m.onnx")  # new weights: both files must change
    before = snapshot(out / "m.onnx", out / "m.onnx.data")
    real_replace = os.replace

    def replace(source, destination, *args, **kwargs):
        if Path(destination).name == failing and Path(source).parent.name.startswith(PREFIX):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(source, destination, *args, **kwargs)

    monkeypatch.setattr(patchspec.run.commit.os, "replace", replace)
    result = run_cli("apply", external_project / "spec.yaml")
    monkeypatch.undo()
    assert result.exit_code == 3, result.output
    assert f"{out / failing}: cannot write: No space left on device" in result.stderr
    assert "Traceback" not in result.output
    assert staging_left(external_project) == []
    assert snapshot(out / "m.onnx", out / "m.onnx.data") == before
    assert np.all(weights(out / "m.onnx") == 1.0)  # model and data still from the same run


# -- signals (a second process) -------------------------------------------------------------------
CHILD = """
import signal, sys, time, types
from pathlib import Path
signal.signal(signal.SIGINT, signal.default_int_handler)  # whatever disposition the test runner passed on
import patchspec.cli
from patchspec import Verifier, VerifyResult, hookimpl
from patchspec.host.installed import in_process_plugin

marker = Path(sys.argv[1])

class SlowVerifier(Verifier):
    name = "slow.wait"
    description = "announces that the run is in staging, then waits"
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def verify(self, params, context):
        marker.write_text(str(context.output_path))
        time.sleep(60)
        return VerifyResult("passed", "waited")

@hookimpl
def register_verifiers(register):
    register(SlowVerifier)

module = types.ModuleType("slow_plugin")
module.register_verifiers = register_verifiers
with in_process_plugin("slow", module):  # the test kit's way in: no record of a no-op is kept
    sys.exit(patchspec.cli.main(sys.argv[2:]))
"""


def wait_for(path: Path, process: subprocess.Popen, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not (path.exists() and path.read_text()):  # created, then written: wait for its text
        if process.poll() is not None:
            pytest.fail(f"the child ended before staging: {process.communicate()}")
        if time.monotonic() > deadline:
            process.kill()
            pytest.fail("the child never reached staging")
        time.sleep(0.02)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_mid_run_removes_staging_and_keeps_previous_output(external_project, run_cli, signum, code):
    assert run_cli("-q", "apply", external_project / "spec.yaml").exit_code == 0
    out = external_project / "out"
    before = snapshot(
        out / "m.onnx", out / "m.onnx.data", external_project / "m.onnx", external_project / "m.onnx.data"
    )
    save_external(add_model(2.0), external_project / "next.onnx")
    spec = write_spec(
        external_project,
        "patchspec: 1\nmodel: next.onnx\noutput: out/m.onnx\npatches: []\nverify:\n  - check: {}\n  - slow.wait: {}\n",
        name="slow.yaml",
    )
    child, marker = external_project / "child.py", external_project / "in-staging"
    child.write_text(CHILD)
    process = subprocess.Popen(
        [sys.executable, str(child), str(marker), "apply", str(spec)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    wait_for(marker, process)
    staged = Path(marker.read_text())
    assert staged.parent.name.startswith(PREFIX) and staged.is_file()  # the signal lands mid-run, in staging
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=30)
    assert process.returncode == code, (stdout, stderr)
    assert stderr.strip().splitlines()[-1] == "interrupted"
    assert "Traceback" not in stderr
    assert staging_left(external_project) == []
    assert (
        snapshot(out / "m.onnx", out / "m.onnx.data", external_project / "m.onnx", external_project / "m.onnx.data")
        == before
    )


# -- concurrency and readers ----------------------------------------------------------------------
@pytest.mark.skipif(
    not VENV_PATCHSPEC.exists(), reason="the patchspec console script is not installed next to this python"
)
def test_two_runs_writing_the_same_output_leave_a_complete_consistent_model(tmp_path):
    for name, value in (("a", 1.0), ("b", 2.0)):
        save_external(add_model(value, doc=name), tmp_path / f"{name}.onnx")
        write_spec(
            tmp_path, f"patchspec: 1\nmodel: {name}.onnx\noutput: out/m.onnx\npatches: []\n", name=f"{name}.yaml"
        )
    for _ in range(3):
        runs = [
            subprocess.Popen(
                [str(VENV_PATCHSPEC), "-q", "apply", "--force", str(tmp_path / f"{name}.yaml")],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for name in ("a", "b")
        ]
        for run in runs:
            _, stderr = run.communicate(timeout=120)
            assert run.returncode == 0, stderr
        output = tmp_path / "out" / "m.onnx"
        onnx.checker.check_model(str(output), full_check=True)
        expected = {"a": 1.0, "b": 2.0}[onnx.load(str(output), load_external_data=False).doc_string]
        assert np.all(weights(output) == expected)  # model and data from the same run
        assert staging_left(tmp_path) == []


def test_a_reader_holding_the_old_output_keeps_the_old_inode(inline_project, run_cli):
    output = inline_project / "out" / "m.onnx"
    assert run_cli("-q", "apply", inline_project / "spec.yaml").exit_code == 0
    old_bytes = output.read_bytes()
    with open(output, "rb") as reader:
        old_inode = os.fstat(reader.fileno()).st_ino
        spec = inline_project / "spec.yaml"
        spec.write_text(spec.read_text() + "# a changed spec changes the digest\n")
        result = run_cli("-q", "apply", spec, "--force")
        assert result.exit_code == 0, result.output
        assert os.stat(output).st_ino != old_inode and output.read_bytes() != old_bytes
        assert os.fstat(reader.fileno()).st_ino == old_inode
        assert reader.read() == old_bytes


def test_an_onnxruntime_session_on_the_old_output_keeps_its_weights(external_project, run_cli):
    ort = pytest.importorskip("onnxruntime")
    output = external_project / "out" / "m.onnx"
    assert run_cli("-q", "apply", external_project / "spec.yaml").exit_code == 0
    session = ort.InferenceSession(str(output), providers=["CPUExecutionProvider"])
    x = np.zeros((1, 256), dtype=np.float32)
    assert np.all(session.run(None, {"x": x})[0] == 1.0)
    save_external(add_model(5.0), external_project / "five.onnx")
    result = run_cli("-q", "apply", external_project / "spec.yaml", "--model", external_project / "five.onnx")
    assert result.exit_code == 0, result.output
    assert np.all(session.run(None, {"x": x})[0] == 1.0)
    assert np.all(weights(output) == 5.0)


# -- unchanged outputs are not touched ------------------------------------------------------------
def test_same_inputs_twice_is_up_to_date_and_untouched(external_project, run_cli):
    spec = external_project / "spec.yaml"
    out = external_project / "out"
    assert run_cli("apply", spec).exit_code == 0
    first = snapshot(out / "m.onnx", out / "m.onnx.data")
    time.sleep(0.01)
    second = run_cli("apply", spec)
    assert second.exit_code == 0 and f"{out / 'm.onnx'}: up to date" in second.stdout
    assert "check" not in second.stdout  # nothing re-ran
    assert snapshot(out / "m.onnx", out / "m.onnx.data") == first


def test_force_rebuilds_but_does_not_replace_identical_files(external_project, run_cli):
    spec = external_project / "spec.yaml"
    out = external_project / "out"
    assert run_cli("apply", spec).exit_code == 0
    first = snapshot(out / "m.onnx", out / "m.onnx.data")
    time.sleep(0.01)
    forced = run_cli("apply", spec, "--force")
    assert forced.exit_code == 0, forced.output
    assert "check" in forced.stdout and "unchanged (identical bytes)" in forced.stdout
    assert snapshot(out / "m.onnx", out / "m.onnx.data") == first
    assert staging_left(external_project) == []


def test_output_is_deterministic(inline_project, run_cli):
    spec = inline_project / "spec.yaml"
    for folder in ("a", "b"):
        assert run_cli("-q", "apply", spec, "--output", inline_project / folder / "m.onnx").exit_code == 0
    assert (inline_project / "a" / "m.onnx").read_bytes() == (inline_project / "b" / "m.onnx").read_bytes()
    first = (inline_project / "a" / "m.onnx").read_bytes()
    (inline_project / "a" / "m.onnx").unlink()
    assert run_cli("-q", "apply", spec, "--output", inline_project / "a" / "m.onnx").exit_code == 0
    assert (inline_project / "a" / "m.onnx").read_bytes() == first


def test_damaged_output_is_rebuilt_even_with_the_same_inputs(external_project, run_cli):
    spec = external_project / "spec.yaml"
    out = external_project / "out"
    assert run_cli("-q", "apply", spec).exit_code == 0
    good = (out / "m.onnx.data").read_bytes()
    with open(out / "m.onnx.data", "r+b") as handle:
        handle.truncate(10)  # the model's digest matches, its data does not
    result = run_cli("apply", spec)
    assert result.exit_code == 0 and "up to date" not in result.stdout
    assert (out / "m.onnx.data").read_bytes() == good


def test_concurrent_commits_do_not_interleave_model_and_data(tmp_path, monkeypatch):
    """Forces the worst interleaving: B commits while A has moved its data file but not its model."""
    import threading

    output = tmp_path / "out" / "m.onnx"
    output.parent.mkdir()
    a_moved_data, b_started = threading.Event(), threading.Event()
    real_replace = os.replace

    def replace(source, destination, *args, **kwargs):
        real_replace(source, destination, *args, **kwargs)
        if threading.current_thread().name == "A" and Path(destination).suffix == ".data":
            a_moved_data.set()
            b_started.wait(timeout=2)
            time.sleep(0.3)  # without a lock, B replaces both files now

    monkeypatch.setattr(patchspec.run.commit.os, "replace", replace)

    def commit(tag: str) -> None:
        with patchspec.run.commit.Staging(output) as staging:
            files = [staging.path(output), staging.path(output.with_name("m.onnx.data"))]
            for path in files:
                path.write_text(tag)
            if tag == "B":
                a_moved_data.wait(timeout=5)
                b_started.set()
            staging.commit(files)

    threads = [threading.Thread(target=commit, args=(tag,), name=tag) for tag in ("A", "B")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert output.read_text() == output.with_name("m.onnx.data").read_text()
    assert staging_left(tmp_path) == []


def test_input_changed_during_the_run_is_exit_3_and_nothing_written(inline_project, run_cli):
    import types

    from patchspec import Verifier, VerifyResult, hookimpl
    from patchspec.host.installed import in_process_plugin

    class RewriteInput(Verifier):  # stands for another process writing the input mid-run
        name = "race.rewrite_input"
        description = "rewrites the input model while the output is staged"
        params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

        def verify(self, params, context):
            onnx.save(add_model(9.0), inline_project / "m.onnx")
            return VerifyResult("passed", "rewrote the input")

    module = types.ModuleType("race_plugin")

    @hookimpl
    def register_verifiers(register):
        register(RewriteInput)

    module.register_verifiers = register_verifiers
    spec = write_spec(
        inline_project,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches: []\nverify:\n  - race.rewrite_input: {}\n",
        name="race.yaml",
    )
    with in_process_plugin("race", module):
        result = run_cli("apply", spec)
    assert result.exit_code == 3, result.output
    assert "the input changed while patchspec was running" in result.stderr and "Traceback" not in result.output
    assert not (inline_project / "out").exists()
