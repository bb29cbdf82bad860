"""Limits a spec cannot lift (issue 32, item 7): only the command line raises them, the spec is read
as boundedly as a model, and every such fault is exit 2, never 5 and never a hang."""

from __future__ import annotations

import os
import time

import pytest
from test_paths import spec_with

from patchspec.limits import Limits, parse


def test_align_past_the_limit_is_a_spec_error_the_caller_can_lift(repo, run_cli):
    """align: 1073741824 turned 96 bytes of weights into a 5.1 GiB file."""
    spec = spec_with(repo, "output: o.onnx\npatches:\n  - external_data: {align: 1073741824}\n")
    refused = run_cli("validate", spec)
    assert refused.exit_code == 2, refused.output
    assert "align 1,073,741,824 is over the limit of 65,536" in refused.stderr
    assert "--limit align=N" in refused.stderr
    spec.write_text(spec.read_text().replace("1073741824", "131072"))
    assert run_cli("validate", spec).exit_code == 2
    assert run_cli("validate", spec, "--limit", "align=131072").exit_code == 0
    assert run_cli("validate", spec).exit_code == 2  # one run's limit does not outlive it


@pytest.mark.parametrize("given", ["align", "speed=3", "timeout=x", "timeout=-1", "timeout=inf"])
def test_a_malformed_limit_is_a_usage_error(repo, run_cli, given):
    spec = spec_with(repo, "output: o.onnx\npatches: []\n")
    result = run_cli("validate", spec, "--limit", given)
    assert result.exit_code == 2 and "--limit" in result.stderr, result.output


def test_a_misspelt_limit_name_gets_the_closest_one():
    with pytest.raises(
        ValueError, match=r"one of align, case-bytes, max-elements, timeout \(did you mean 'timeout'\?\)"
    ):
        parse(("timout=5",))


def test_limits_parse_names_with_dashes():
    assert parse(("max-elements=10", "timeout=1.5")) == Limits(timeout=1.5, max_elements=10)


def test_an_integer_of_thousands_of_digits_is_a_spec_error(repo, run_cli):
    spec = spec_with(repo, "output: o.onnx\npatches:\n  - set_batch: " + "9" * 4300 + "\n")
    result = run_cli("validate", spec)
    assert result.exit_code == 2, result.output
    assert "digits" in result.stderr and "this is a bug" not in result.stderr


def test_a_spec_that_links_to_dev_zero_is_refused_at_once(repo, run_cli):
    (repo / "zero.yaml").symlink_to("/dev/zero")
    started = time.monotonic()
    result = run_cli("validate", repo / "zero.yaml")
    assert result.exit_code == 2 and "not a regular file" in result.stderr, result.output
    assert time.monotonic() - started < 10


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_a_fifo_spec_does_not_hang(repo, run_cli):
    os.mkfifo(repo / "pipe.yaml")
    started = time.monotonic()
    result = run_cli("validate", repo / "pipe.yaml")
    assert result.exit_code == 2 and "not a regular file" in result.stderr, result.output
    assert time.monotonic() - started < 10


def test_a_committed_lock_link_is_refused_and_its_target_untouched(repo, run_cli, tmp_path):
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    (repo / "build").mkdir()
    (repo / "build" / ".patchspec.lock").symlink_to(target)
    spec = spec_with(repo, "output: build/o.onnx\npatches: []\n")
    result = run_cli("apply", spec)
    assert result.exit_code == 3 and "lock file is a symbolic link" in result.stderr, result.output
    assert target.read_text() == "keep me"
    assert not (repo / "build" / "o.onnx").exists()


@pytest.mark.parametrize(
    ("run", "fragment", "raise_it"),
    [
        ("{timeout: 100000000}", "timeout 1e+08 s is over the limit of 600", "timeout=100000000"),
        ("{timeout: .inf}", "is not a finite number", None),
        (
            "{max_elements: 1073741824}",
            "max_elements 1,073,741,824 is over the limit of 134,217,728",
            "max-elements=1073741824",
        ),
        (
            "{cases: [{inputs: {" + ", ".join(f"x{i}: [1, 134217728]" for i in range(64)) + "}}]}",
            "over the limit of 2,147,483,648",
            "case-bytes=40000000000",
        ),
    ],
)
def test_the_run_verifier_cannot_lift_its_own_bounds(repo, run_cli, run, fragment, raise_it):
    """timeout: 100000000 lifted the time bound, .inf ended in exit 5, a raised max_elements or 64
    inputs at the default limit exhausted memory (exit 5)."""
    spec = spec_with(repo, f"output: o.onnx\npatches: []\nverify:\n  - run: {run}\n")
    refused = run_cli("validate", spec)
    assert refused.exit_code == 2 and fragment in refused.stderr, refused.output
    if raise_it:  # the bound alone: the spec's 64 inputs are not the model's (validate --no-model)
        assert run_cli("validate", "--no-model", spec, "--limit", raise_it).exit_code == 0


def test_an_npz_of_expected_outputs_is_held_to_the_limit_before_it_is_decompressed(repo, run_cli):
    """A 7.7 MB .npz once asked for 7.45 GiB: zeros compress to almost nothing."""
    import numpy as np

    np.savez_compressed(repo / "expected.npz", y=np.zeros((1, 256), np.float32), big=np.zeros((2**29,), np.float32))
    assert (repo / "expected.npz").stat().st_size < 5 * 2**20
    np.save(repo / "x.npy", np.ones((1, 256), np.float32))
    spec = spec_with(
        repo,
        "output: o.onnx\npatches: []\nverify:\n  - run: {cases: [{inputs: {x: {file: x.npy}}, against: expected.npz}]}\n",
    )
    result = run_cli("apply", spec)
    assert result.exit_code == 3 and "over the limit of 2,147,483,648" in result.stderr, result.output
    assert not (repo / "o.onnx").exists()
