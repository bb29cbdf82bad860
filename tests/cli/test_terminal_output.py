"""What a person reads: each message once, progress and colour on a terminal only, plan's shapes.

Terminal behaviour is tested in-process by forcing the reporter's terminal check (with the status
line's delay at zero) and, for colour, once under a real pseudo-terminal.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
import sys
import time

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import patchspec.run.reporter as reporter_module
from helpers import graph_model, tensor_info, write_spec
from patchspec.ort.sessions import Session
from patchspec.run.reporter import Reporter, summary_line, wrap

REASON = "differs beyond tolerance"  # the run verifier's reason for the failure below
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def add_model(shape=("N", 4)) -> onnx.ModelProto:
    weight = numpy_helper.from_array(np.ones((1, 4), np.float32), "w")
    return graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [tensor_info("x", list(shape))],
        [tensor_info("y", list(shape))],
        [weight],
    )


def failing_spec(folder, name="spec.yaml", output="out/m2.onnx"):
    """A patch that changes the weight, and a run against the original: fails at both levels alike."""
    onnx.save(add_model(), folder / "m.onnx")
    return write_spec(
        folder,
        f"patchspec: 1\nmodel: m.onnx\noutput: {output}\npatches:\n"
        "  - replace_initializer: {initializer: w, value: [[2, 2, 2, 2]]}\n"
        "verify:\n  - check: {}\n  - run:\n      cases: [{inputs: {x: [2, 4]}}]\n",
        name,
    )


def passing_spec(folder, name, output):
    onnx.save(add_model(), folder / "m.onnx")
    return write_spec(folder, f"patchspec: 1\nmodel: m.onnx\noutput: {output}\npatches: []\n", name)


@pytest.fixture
def terminal(monkeypatch):
    """stdout and stderr are terminals 100 columns wide; the status line shows at once."""
    monkeypatch.setattr(reporter_module, "is_terminal", lambda stream: True)
    monkeypatch.setattr(reporter_module, "DELAY", 0.0)
    monkeypatch.setattr(reporter_module, "TICK", 0.02)
    monkeypatch.setenv("COLUMNS", "100")
    monkeypatch.delenv("NO_COLOR", raising=False)


@pytest.fixture
def slow_runs(monkeypatch):
    """Every onnxruntime run takes a quarter of a second more."""
    real = Session.run

    def slow(self, feeds):
        time.sleep(0.25)
        return real(self, feeds)

    monkeypatch.setattr(Session, "run", slow)


def shown(stream_text: str) -> list[str]:
    """The lines a terminal shows at the end: a status line overwritten in place leaves nothing."""
    lines = []
    for line in stream_text.split("\n"):
        line = ANSI.sub("", line.split("\r")[-1])
        lines.append(line)
    return lines


# -- each message once --------------------------------------------------------------------------------
def test_a_failed_verification_says_its_reason_once(tmp_path, run_cli):
    spec = failing_spec(tmp_path)
    default = run_cli("apply", spec)
    assert default.exit_code == 1, default.output
    assert default.output.count(REASON) == 1, default.output
    assert "  run ..................... failed" in default.stdout  # the step line, then the error with its details
    assert default.stderr.startswith(f"{spec}:9:7: verify[1] (run): verification failed: ")
    quiet = run_cli("-q", "apply", spec)
    assert quiet.exit_code == 1 and quiet.stdout == ""
    assert quiet.output.count(REASON) == 1, quiet.output
    assert quiet.stderr.splitlines()[0] == default.stderr.splitlines()[0]


def test_identical_failures_at_two_levels_are_one_line_naming_both(tmp_path, run_cli):
    result = run_cli("apply", failing_spec(tmp_path))
    assert result.exit_code == 1
    assert "first: CPUExecutionProvider case 0 (optimizations all, disabled): output 'y' " + REASON in result.stderr
    assert "CPUExecutionProvider case 0 (optimizations all, disabled) y: FAIL max abs 1 " in result.stderr
    assert "(optimizations all)" not in result.output and "(optimizations disabled)" not in result.output


@pytest.mark.parametrize("code", [1, 4])
def test_verbose_adds_no_traceback_to_an_expected_failure(tmp_path, run_cli, code):
    spec = failing_spec(tmp_path)
    if code == 4:  # a constant the model does not have: the patch cannot apply
        spec.write_text(spec.read_text().replace("initializer: w,", "initializer: nope,"))
    result = run_cli("-v", "apply", spec)
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output
    headline = result.stderr.splitlines()[0]
    assert result.output.count(headline) == 1, result.output


def test_a_bug_with_verbose_prints_one_traceback_and_the_error_once(tmp_path, run_cli, monkeypatch):
    import patchspec.run.freshness

    def broken_digest(self, loaded, *args):
        raise AttributeError("boom " + "in core")  # the source line the traceback quotes does not say it

    monkeypatch.setattr(patchspec.run.freshness.Freshness, "parts", broken_digest)
    result = run_cli("-v", "apply", passing_spec(tmp_path, "spec.yaml", "out/m2.onnx"))
    assert result.exit_code == 5
    assert result.stderr.count("Traceback (most recent call last):") == 1
    assert result.output.count("boom in core") == 1, result.stderr
    assert "report it with the traceback above" in result.stderr


# -- several specs ------------------------------------------------------------------------------------
def test_several_specs_end_with_a_summary(tmp_path, run_cli):
    first = passing_spec(tmp_path, "a.yaml", "out/a.onnx")
    assert run_cli("apply", first).exit_code == 0
    specs = [first, passing_spec(tmp_path, "b.yaml", "out/b.onnx"), passing_spec(tmp_path, "c.yaml", "out/c.onnx")]
    result = run_cli("apply", *specs)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[-1] == "3 specs: 2 written, 1 up to date, 0 failed"
    assert run_cli("apply", first).stdout.count("specs:") == 0  # one spec: no summary
    assert run_cli("-q", "apply", *specs, "--force").output == ""


def test_a_failed_spec_is_counted_and_the_rest_not_run(tmp_path, run_cli):
    specs = [
        passing_spec(tmp_path, "a.yaml", "out/a.onnx"),
        failing_spec(tmp_path, "b.yaml", "out/b.onnx"),
        passing_spec(tmp_path, "c.yaml", "out/c.onnx"),
    ]
    result = run_cli("apply", *specs)
    assert result.exit_code == 1
    assert result.stdout.splitlines()[-1] == "3 specs: 1 written, 0 up to date, 1 failed, 1 not run"
    assert summary_line(["written", "unchanged"], 2) == "2 specs: 1 written, 0 up to date, 1 unchanged, 0 failed"


# -- plan -----------------------------------------------------------------------------------------------
def batch_one_model() -> onnx.ModelProto:
    shape = numpy_helper.from_array(np.array([1, -1], np.int64), "shape")
    return graph_model(
        [helper.make_node("Relu", ["input.1"], ["r"]), helper.make_node("Reshape", ["r", "shape"], ["y"])],
        [tensor_info("input.1", [1, 3, None, None])],
        [tensor_info("y", [1, None])],
        [shape],
    )


def test_plan_shows_each_input_and_output_before_and_after(tmp_path, run_cli):
    onnx.save(batch_one_model(), tmp_path / "m.onnx")
    spec = write_spec(
        tmp_path,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m32.onnx\npatches:\n  - set_batch: 32\n"
        "  - rename_dims: {tensor: input.1, axes: {2: height, 3: width}}\n",
    )
    result = run_cli("plan", spec)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "    input.1  [1, 3, ?, ?] -> [32, 3, height, width]" in lines
    assert lines.index("  inputs:") < lines.index("  outputs:")
    assert any(line.startswith("    y        [1, ?] -> [32, ") for line in lines)
    assert "constant 'shape' [1, -1] -> [32, -1]" not in result.stdout  # set_batch's details: only with -v
    for verbose in (("plan", spec, "-v"), ("-v", "plan", spec)):
        detailed = run_cli(*verbose)
        assert "      rewrote Reshape 'y': element 0 is the batch (1 -> 32)" in detailed.stdout
        assert "    input.1  [1, 3, ?, ?] -> [32, 3, height, width]" in detailed.stdout.splitlines()


# -- the terminal ---------------------------------------------------------------------------------------
def test_progress_and_colour_on_a_terminal_only(tmp_path, run_cli, monkeypatch, slow_runs):
    failing_spec(tmp_path)
    spec = "spec.yaml"
    monkeypatch.chdir(tmp_path)
    piped = run_cli("apply", spec)
    assert "\r" not in piped.output and "\x1b[" not in piped.output
    assert "run: " not in piped.output
    monkeypatch.setattr(reporter_module, "is_terminal", lambda stream: True)
    monkeypatch.setattr(reporter_module, "DELAY", 0.0)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("COLUMNS", "300")
    on_terminal = run_cli("apply", spec)
    assert on_terminal.exit_code == 1
    assert "\rrun: CPUExecutionProvider case 0 (1 of 1), optimizations all ... " in on_terminal.stderr
    assert "\rrun: CPUExecutionProvider case 0 (1 of 1), optimizations disabled ... " in on_terminal.stderr
    assert "failed" in on_terminal.stdout and click_red("failed") in on_terminal.stdout
    # the status line is cleared before the error: the error starts a line of its own
    assert any(
        line.startswith("spec.yaml:9:7: verify[1] (run): verification failed") for line in shown(on_terminal.stderr)
    )
    quiet = run_cli("-q", "apply", spec)
    assert "\r" not in quiet.output and quiet.stdout == ""


def click_red(word: str) -> str:
    import click

    return click.style(word, fg="red", bold=True)


def test_no_colour_with_no_color_set(tmp_path, run_cli, terminal, monkeypatch):
    spec = failing_spec(tmp_path)
    assert "\x1b[3" in run_cli("apply", spec).output
    monkeypatch.setenv("NO_COLOR", "1")
    result = run_cli("apply", spec)
    assert result.exit_code == 1 and not ANSI.search(result.output.replace("\x1b[K", ""))


def test_long_lines_wrap_at_words_on_a_terminal_and_not_in_a_pipe(tmp_path, run_cli, monkeypatch):
    failing_spec(tmp_path)
    spec = "spec.yaml"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "72")
    piped = run_cli("apply", spec)
    headline = piped.stderr.splitlines()[0]
    assert len(headline) > 200  # one line, whatever the width, for logs and grep
    monkeypatch.setattr(reporter_module, "is_terminal", lambda stream: True)
    monkeypatch.setenv("NO_COLOR", "1")
    wrapped = run_cli("apply", spec).stderr.splitlines()
    assert wrapped[0] == headline[: len(wrapped[0])] and len(wrapped[0]) <= 72
    continued = wrapped[1 : wrapped.index(next(line for line in wrapped if line.startswith("    CPU")))]
    assert continued and all(line.startswith("  ") and len(line) <= 72 for line in continued)
    assert " ".join(line.strip() for line in wrapped[: len(continued) + 1]) == headline  # words never split


def test_wrap_indents_continuations_under_the_text():
    text = "  check ........ failed    " + " ".join(["word"] * 30)
    lines = wrap(text, 60, hang=26).splitlines()
    assert all(len(line) <= 60 for line in lines) and all(line.startswith(" " * 26 + "word") for line in lines[1:])
    assert wrap("  hint: " + "x " * 40, 50).splitlines()[1].startswith(" " * 8 + "x")
    assert wrap("a/very/long/path/" * 8, 40) == "a/very/long/path/" * 8  # never broken


def test_hashing_and_copying_show_bytes_rate_and_eta(terminal, capsys):
    reporter = Reporter()
    try:
        with reporter.bytes("hashing m.onnx.data") as progress:
            assert progress is not None
            progress(3 * 2**20, 8 * 2**20)
            time.sleep(0.2)
    finally:
        reporter.close()
    err = capsys.readouterr().err
    assert "\rhashing m.onnx.data [" in err and " 37%  3.00 MiB/8.00 MiB  " in err and "/s  ETA " in err
    assert err.endswith("\r\x1b[K")  # cleared once done
    assert Reporter(-1).shows_progress is False  # -q


def test_apply_hashes_and_copies_through_the_reporter(tmp_path, run_cli, terminal, monkeypatch):
    """The input's data file is hashed and copied with bytes on the status line (slowed down here)."""
    import patchspec.run.statcache as statcache

    model = add_model()
    onnx.save(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.onnx.data", size_threshold=0)
    spec = write_spec(tmp_path, "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches: []\n")
    real = statcache.file_pieces  # a data file is hashed range by range

    def slow_pieces(path, cut, progress=None):
        def slowly(done, total):
            progress(done // 2, total)
            time.sleep(0.2)
            progress(done, total)

        return real(path, cut, None if progress is None else slowly)

    monkeypatch.setattr(statcache, "file_pieces", slow_pieces)
    result = run_cli("apply", spec)
    assert result.exit_code == 0, result.output
    assert re.search(r"\rhashing m\.onnx\.data \[#+-+\]  50%  8 B/16 B  .*/s  ETA ", result.stderr), result.stderr
    written = run_cli("apply", spec, "--force", "-q")
    assert written.exit_code == 0 and written.output == ""  # -q: no status line either


def test_a_real_terminal_gets_colour_and_a_pipe_none(tmp_path):
    """Under a pseudo-terminal (not a forced flag): colour unless NO_COLOR; a pipe gets plain text."""
    pty = pytest.importorskip("pty")
    fcntl, termios = pytest.importorskip("fcntl"), pytest.importorskip("termios")
    spec = failing_spec(tmp_path)

    def under_pty(env) -> str:
        leader, follower = pty.openpty()
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 300, 0, 0))  # 300 columns
        done = subprocess.Popen(
            [sys.executable, "-m", "patchspec", "apply", str(spec)],
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env=env,
            cwd=tmp_path,
        )
        os.close(follower)
        chunks = []
        while True:
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(leader)
        assert done.wait(timeout=120) == 1
        return b"".join(chunks).decode()

    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    coloured = under_pty(env)
    assert "\x1b[31m" in coloured and REASON in coloured
    plain = under_pty({**env, "NO_COLOR": "1"})
    assert not ANSI.search(plain.replace("\x1b[K", "")) and REASON in plain
    piped = subprocess.run(
        [sys.executable, "-m", "patchspec", "apply", str(spec)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert piped.returncode == 1 and "\x1b[" not in piped.stdout + piped.stderr and "\r" not in piped.stderr
