"""set_batch on torch-exported attention models, checked by the `run` verifier against the original.

The models are committed fixtures (tests/fixtures/torch, made by its export.py with `make
torch-fixtures`; this test needs no torch). Each is re-batched to a static 4 and to a symbolic N,
with its batch inputs and axes named from the manifest, then run at batch 4 (and 3 for N) and
compared per sample with the original at both of the verifier's default optimization levels.

The detector is the issue's: a dynamo export whose attention out-projection reshapes to [-1, 32],
which set_batch once rewrote to [-1, 128] as if the -1 stood for the batch.
"""

from __future__ import annotations

import json
import re
import shutil

import pytest

from helpers import REPO, write_spec

FIXTURES = REPO / "tests" / "fixtures" / "torch"
MANIFEST = json.loads((FIXTURES / "manifest.json").read_text())
# the QDQ encoder and the near-tied TopK head are for the run verifier's own tests
NOT_HERE = {"qdq_encoder", "yolo_topk"}
MODELS = [m for m in MANIFEST["models"] if m["family"] not in NOT_HERE and m["batch"] is not None]
KINDS = {"static4": (4, [4]), "symbolicN": ("N", [4, 3])}


def _shape(model, name, batch):
    return [batch if dim == "B" else dim for dim in model["input_shapes"][name]]


def _spec(tmp_path, model, size, batches):
    stem = model["file"].removesuffix(".onnx")
    batch_inputs = {name: axis for name, axis in model["inputs"].items() if axis is not None}
    cases = [{"inputs": {name: _shape(model, name, b) for name in model["inputs"]}} for b in batches]
    split = {"inputs": model["inputs"], "outputs": model["outputs"]}
    text = (
        f"patchspec: 1\nmodel: {model['file']}\noutput: out/{stem}.onnx\n"
        f"patches:\n  - set_batch: {json.dumps({'size': size, 'inputs': batch_inputs})}\n"
        f"verify:\n  - run:\n      cases: {json.dumps(cases)}\n"
        f"      compare: {json.dumps({'against': 'original', 'split_batch': split})}\n"
    )
    return write_spec(tmp_path, text)


def test_manifest_describes_every_fixture_and_marks_the_verifier_models():
    files = sorted(p.name for p in FIXTURES.glob("*.onnx"))
    assert files == sorted(m["file"] for m in MANIFEST["models"])
    families = {m["family"] for m in MANIFEST["models"]}
    assert {"detector", "qdq_encoder", "yolo_topk"} <= families
    assert len(MODELS) >= 12
    for model in MODELS:
        assert set(model["outputs"]) and set(model["inputs"]) == set(model["input_shapes"]), model["file"]


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("model", MODELS, ids=lambda m: m["file"].removesuffix(".onnx"))
def test_rebatched_attention_model_matches_the_original_per_sample(model, kind, tmp_path, run_cli):
    size, batches = KINDS[kind]
    shutil.copy(FIXTURES / model["file"], tmp_path / model["file"])
    result = run_cli("apply", _spec(tmp_path, model, size, batches))
    assert result.exit_code == 0, f"exit {result.exit_code}: {result.stderr.strip()}\n{result.stdout}"
    assert re.search(r"^\s*run \.+ passed\b", result.stdout, re.M), result.output
    assert "undecided" not in result.stdout, result.stdout  # attention needs no hand-written fix
    assert (tmp_path / "out" / model["file"]).is_file()
