"""init's batch axes where set_batch refuses the contract's detection (``author/batch_retry``).

torch's attention with a key padding mask, exported sequence first at a static batch 1: ``x [5, 1, 8]``
(time, batch, features) beside ``key_padding_mask [1, 5]``. The contract takes x's axis 0, the time,
and set_batch refuses it; adding another input's axis does not help. Every input's axis of size 1 does,
and init now chooses it; before, it stopped with set_batch's refusal."""

from __future__ import annotations

import shutil

import yaml

from helpers import REPO

MODEL = REPO / "benchmarks" / "corpus" / "generated" / "torch-families" / "mha_kpm_seqfirst_ts_b1.onnx"


def test_a_sequence_first_export_at_batch_1_gets_each_inputs_axis_of_1(tmp_path, run_cli) -> None:
    shutil.copy(MODEL, tmp_path / "model.onnx")
    init = run_cli("init", "model.onnx", "--batch", "4", "--output", "spec.yaml", cwd=tmp_path)
    assert init.exit_code == 0, init.output
    assert "its axis of size 1 (axis 0 of the first input is refused: " in init.output, init.output
    spec = yaml.safe_load((tmp_path / "spec.yaml").read_text())
    assert spec["patches"][0]["set_batch"]["inputs"] == {"x": 1, "key_padding_mask": 0}, spec["patches"]
    applied = run_cli("apply", "spec.yaml", cwd=tmp_path)
    assert applied.exit_code == 0, applied.output


def test_an_input_with_no_axis_of_1_leaves_the_refusal_standing(tmp_path, run_cli) -> None:
    """A model that cannot run batched on any axis is refused as before (the batch-mixing control)."""
    shutil.copy(
        REPO / "benchmarks" / "corpus" / "generated" / "torch-families" / "first_sample_ref_ts_b1.onnx",
        tmp_path / "model.onnx",
    )
    init = run_cli("init", "model.onnx", "--batch", "4", "--output", "spec.yaml", cwd=tmp_path)
    assert init.exit_code == 4, init.output
    assert not (tmp_path / "spec.yaml").exists()
