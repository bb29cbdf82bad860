"""When ``init`` runs the original, and how often it builds the session that runs it (issue 26: init at
LLM-graph size). A session costs more than set_batch's evaluation on a large graph, so it is built only
for a run that can change the spec, and once."""

from __future__ import annotations

import gc

import numpy as np
import onnx
import yaml
from onnx import helper, numpy_helper

import patchspec.author.init as init_module
import patchspec.author.original_runs as original_runs
from helpers import graph_model, tensor_info
from patchspec.author.batch_ties import CaseLayout, tie_batch
from patchspec.author.original_runs import OriginalRuns
from patchspec.shapes.annotations import collector_paused


class _CountedSession(original_runs.Session):
    built: list[str] = []

    def __init__(self, *args, **kwargs):
        _CountedSession.built.append(str(args[0]))
        super().__init__(*args, **kwargs)


def _counting(monkeypatch) -> list[str]:
    _CountedSession.built = []
    monkeypatch.setattr(original_runs, "Session", _CountedSession)
    return _CountedSession.built


def _baked_reshape(batch):
    """x [batch, 4, 2] -> Reshape to a constant [1, 8]: the export baked batch 1."""
    shape = numpy_helper.from_array(np.array([1, 8], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    return graph_model(nodes, [tensor_info("x", [batch, 4, 2])], [tensor_info("y", [batch, 8])], [shape])


def _init(run_cli, model, folder):
    onnx.save(model, folder / "m.onnx")
    made = run_cli("init", folder / "m.onnx", "--output", folder / "spec.yaml", "--batch", "4")
    assert made.exit_code == 0, made.output
    return yaml.safe_load((folder / "spec.yaml").read_text())


def test_a_fixed_batch_with_one_input_never_builds_a_session(tmp_path, run_cli, monkeypatch):
    """One input, its batch fixed at 1 (an LLM export's input_ids [1, 32]): no other input to tie, and
    the case compares per sample whatever a run says, so nothing is run. (A graph this small is asked
    whether onnxruntime loads it at all; an LLM's, over LOAD_CHECK_NODES, is not: the threshold is set
    to 0 here to stand for one.)"""
    monkeypatch.setattr(init_module, "LOAD_CHECK_NODES", 0)
    built = _counting(monkeypatch)
    spec = _init(run_cli, _baked_reshape(1), tmp_path)
    assert built == []
    assert spec["verify"][1]["run"]["compare"]["split_batch"] is True


def test_a_symbolic_batch_builds_one_session_for_every_run(tmp_path, run_cli, monkeypatch):
    """The batch is symbolic: whether the original runs at the batch decides split_batch, so it is run
    (at the batch, then at 1), on one session."""
    built = _counting(monkeypatch)
    spec = _init(run_cli, _baked_reshape("N"), tmp_path)
    assert built == [str(tmp_path / "m.onnx")]
    assert spec["verify"][1]["run"]["compare"]["split_batch"] is True


def test_no_candidate_and_one_layout_ties_without_running(tmp_path):
    onnx.save(_baked_reshape("N"), tmp_path / "m.onnx")
    runs = OriginalRuns(tmp_path / "m.onnx")
    evidence = tie_batch(runs, [CaseLayout({"x": [1, 4, 2]}, {})], [("x", 0)], [])
    assert (evidence.ties, evidence.untied, evidence.shapes, evidence.batched) == ([], {}, {"x": [1, 4, 2]}, None)
    assert runs.done == {} and runs._built is False


def test_the_session_is_built_on_the_first_run_and_kept(tmp_path, monkeypatch):
    built = _counting(monkeypatch)
    onnx.save(_baked_reshape("N"), tmp_path / "m.onnx")
    runs = OriginalRuns(tmp_path / "m.onnx")
    assert built == []
    at_one, at_two = runs.run({"x": [1, 4, 2]}), runs.run({"x": [2, 4, 2]})
    assert at_one is not None and at_one.shapes == {"y": (1, 8)}
    assert at_two is not None and not at_two.ok and runs.why_not == ""
    assert len(built) == 1


def test_weights_over_the_limit_build_no_session_and_say_why(tmp_path, monkeypatch):
    built = _counting(monkeypatch)
    monkeypatch.setattr(original_runs, "RUN_LIMIT_BYTES", 0)
    model = _baked_reshape("N")
    onnx.save(model, tmp_path / "m.onnx")
    runs = OriginalRuns(tmp_path / "m.onnx", model)
    assert runs.run({"x": [1, 4, 2]}) is None and runs.session is None
    assert runs.why_not.startswith("its weights (0.0 GiB) are over the 0 GiB") and built == []


def test_the_collector_is_paused_in_the_block_and_restored_after():
    assert gc.isenabled()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # it was off before: it stays off
    finally:
        gc.enable()


def test_a_model_onnxruntime_cannot_load_gets_no_run_step_and_applies(tmp_path, run_cli):
    """AveragePool at opset 6 (PyTorch 0.3's exports): onnxruntime has no kernel for it, so a run step
    could only fail; the spec says why instead, and applies as written."""
    nodes = [helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])]
    model = graph_model(
        nodes, [tensor_info("x", [1, 3, 4, 4])], [tensor_info("y", [1, 3, 2, 2])], opset=6, ir_version=3
    )
    spec = _init(run_cli, model, tmp_path)
    assert [next(iter(step)) for step in spec["verify"]] == ["check"]
    text = (tmp_path / "spec.yaml").read_text()
    assert "no 'run' step: onnxruntime here cannot load the original" in text and "AveragePool" in text
    assert run_cli("apply", tmp_path / "spec.yaml").exit_code == 0
