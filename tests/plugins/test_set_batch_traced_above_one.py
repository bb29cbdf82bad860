"""An export with a dynamic batch traced above batch 1 (hummingbird: a Squeeze without axes that
drops the batch at 1 only). It runs from batch 2 up as it is: set_batch writes it and says where
batch 1 fails; before, it refused ("mixes samples") what runs right at every batch above 1."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from helpers import traced_above_one_model, write_spec


def _run(path, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize(("size", "batch"), [("4", 4), ("N", 3)])
def test_a_model_that_runs_from_batch_2_is_batched_as_it_is(tmp_path, run_cli, size: str, batch: int) -> None:
    onnx.save(traced_above_one_model(), tmp_path / "m.onnx")
    spec = write_spec(tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: out/m.onnx\npatches:\n  - set_batch: {size}\n")
    result = run_cli("apply", spec, "--no-verify", "-v")
    assert result.exit_code == 0, result.output
    assert "as exported, the model does not run at batch 1: " in result.output, result.output
    assert ("like the original, it does not run at batch 1" in result.output) == (size == "N"), result.output
    x = np.random.default_rng(0).normal(size=(batch, 5)).astype(np.float32)
    np.testing.assert_allclose(_run(tmp_path / "out" / "m.onnx", x), x.sum(axis=1), rtol=1e-6)


def test_a_per_sample_compare_runs_each_sample_twice_where_one_fails(tmp_path, run_cli) -> None:
    """init writes split_batch and says why; the run verifier gives the original each sample twice
    (before: init compared batch against batch, as the original fails at one sample)."""
    onnx.save(traced_above_one_model(), tmp_path / "m.onnx")
    init = run_cli("init", str(tmp_path / "m.onnx"), "--batch", "4", "--output", str(tmp_path / "spec.yaml"))
    assert init.exit_code == 0, init.output
    written = (tmp_path / "spec.yaml").read_text()
    assert "split_batch: true" in written and "so each sample runs twice" in written, written
    applied = run_cli("apply", str(tmp_path / "spec.yaml"))
    assert applied.exit_code == 0, applied.output
    assert "run ..................... passed" in applied.output, applied.output
