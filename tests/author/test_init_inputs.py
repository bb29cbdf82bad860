"""``patchspec init`` on the input patterns of issue 24 (items 3 and 4) and on hostile input names."""

from __future__ import annotations

import numpy as np
import onnx
import yaml
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info

ROWS = 10


def _init(run_cli, model, folder, *options):
    onnx.save(model, folder / "m.onnx")
    spec = folder / "spec.yaml"
    made = run_cli("init", folder / "m.onnx", "--output", spec, *options)
    return spec, made


def _case(spec):
    return yaml.safe_load(spec.read_text())["verify"][1]["run"]


def _several_batch_names():
    """tf2onnx's way: feats, ids and length each name the batch apart; a run mixes them."""
    table = numpy_helper.from_array(np.arange(ROWS * 4, dtype=np.float32).reshape(ROWS, 4), "table")
    positions = numpy_helper.from_array(np.arange(8, dtype=np.int64), "positions")
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"]),
        helper.make_node("ReduceSum", ["emb", "last"], ["summed"], keepdims=0),
        helper.make_node("Add", ["feats", "summed"], ["mixed"]),
        helper.make_node("Unsqueeze", ["length", "one"], ["length2"]),
        helper.make_node("Less", ["positions", "length2"], ["valid"]),
        helper.make_node("Cast", ["valid"], ["validf"], to=TensorProto.FLOAT),
        helper.make_node("Mul", ["mixed", "validf"], ["y"]),
    ]
    constants = [
        table,
        positions,
        numpy_helper.from_array(np.array([2], np.int64), "last"),
        numpy_helper.from_array(np.array([1], np.int64), "one"),
    ]
    inputs = [
        tensor_info("feats", ["unk__6134", 8]),
        tensor_info("ids", ["unk__6135", 8], TensorProto.INT64),
        tensor_info("length", ["unk__6136"], TensorProto.INT64),
    ]
    return graph_model(nodes, inputs, [tensor_info("y", ["unk__6137", 8])], constants)


def test_every_input_that_names_the_batch_apart_is_tied_by_running_the_original(tmp_path, run_cli):
    spec, made = _init(run_cli, _several_batch_names(), tmp_path, "--batch", "4")
    assert made.exit_code == 0, made.output
    text = spec.read_text()
    assert yaml.safe_load(text)["patches"][0]["set_batch"]["inputs"] == {"feats": 0, "ids": 0, "length": 0}
    assert "'ids'[0]: another name for the batch" in text and "'length'[0]: another name" in text
    assert "fails with it at 2 while 'feats'[0]" not in text  # the names in the evidence are plain
    assert "fails with it at 2 while the batch (feats[0]) is 3" in text  # the evidence: the mismatched run
    inputs = _case(spec)["cases"][0]["inputs"]
    assert inputs["feats"] == [4, 8] and inputs["ids"]["shape"] == [4, 8] and inputs["ids"]["high"] == ROWS
    # a length: compared with the positions 0..7 (a constant arange: the padding mask), so 1..8
    assert inputs["length"] == {"shape": [4], "low": 1, "high": 9}
    assert "lengths (compared with positions 0..7: a padding mask): 1..8" in text
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, text + applied.output


def test_an_input_that_runs_at_another_size_is_not_tied(tmp_path, run_cli):
    """k's axis 0 is summed away: the original runs with it at any size, so it is not the batch."""
    nodes = [
        helper.make_node("ReduceSum", ["k", "zero_axis"], ["ks"], keepdims=1),
        helper.make_node("Add", ["x", "ks"], ["y"]),
    ]
    axis = numpy_helper.from_array(np.array([0], np.int64), "zero_axis")
    inputs = [tensor_info("x", ["N", 4]), tensor_info("k", ["M", 4])]
    spec, made = _init(run_cli, graph_model(nodes, inputs, [tensor_info("y", ["N", 4])], [axis]), tmp_path)
    assert made.exit_code == 0, made.output
    assert yaml.safe_load(spec.read_text())["patches"][0]["set_batch"]["inputs"] == {"x": 0}
    assert (
        "k      -           not tied to the batch: the original runs with its axis 0 at 2 while the batch is 3"
        in made.stdout
    )


def test_without_runs_the_other_batch_names_are_said_to_be_unproved(tmp_path, run_cli, monkeypatch):
    monkeypatch.setattr("patchspec.author.original_runs.RUN_LIMIT_BYTES", 0)  # the table's 160 bytes are over it
    spec, made = _init(run_cli, _several_batch_names(), tmp_path, "--batch", "4")
    assert made.exit_code == 0, made.output
    assert yaml.safe_load(spec.read_text())["patches"][0]["set_batch"]["inputs"] == {"feats": 0}
    assert "not tied to the batch: the original was not run (its weights" in made.stdout


def test_a_boolean_mask_is_a_mask_and_is_filled(tmp_path, run_cli):
    nodes = [helper.make_node("Where", ["m", "x", "zero"], ["y"])]
    zero = numpy_helper.from_array(np.zeros((), np.float32), "zero")
    model = graph_model(
        nodes,
        [tensor_info("x", ["N", 4]), tensor_info("m", ["N", 4], TensorProto.BOOL)],
        [tensor_info("y", ["N", 4])],
        [zero],
    )
    spec, made = _init(run_cli, model, tmp_path)
    assert made.exit_code == 0, made.output
    assert "integer" not in spec.read_text() and "flagged" not in made.stdout
    assert "a boolean input (a mask), read by Where" in made.stdout
    assert _case(spec)["cases"][0]["inputs"]["m"] == {"shape": [3, 4], "low": 0, "high": 2}
    assert run_cli("apply", spec).exit_code == 0


def test_an_input_the_graph_never_reads_is_said_to_be_unread_and_fed_anything(tmp_path, run_cli):
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    inputs = [tensor_info("x", ["N", 4]), tensor_info("spare", ["N", 2], TensorProto.INT64)]
    spec, made = _init(run_cli, graph_model(nodes, inputs, [tensor_info("y", ["N", 4])]), tmp_path)
    assert made.exit_code == 0, made.output
    assert "spare" in made.stdout and "unread: no node reads it" in made.stdout and "flagged" not in made.stdout
    assert _case(spec)["cases"][0]["inputs"]["spare"] == [3, 2]
    assert run_cli("apply", spec).exit_code == 0


def test_ids_that_index_two_tables_take_the_smaller(tmp_path, run_cli):
    rng = np.random.default_rng(0)
    tables = [
        numpy_helper.from_array(rng.standard_normal((rows, 4)).astype(np.float32), f"t{rows}") for rows in (100, 7)
    ]
    nodes = [
        helper.make_node("Gather", ["t100", "ids"], ["a"]),
        helper.make_node("Gather", ["t7", "ids"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["y"]),
    ]
    model = graph_model(
        nodes, [tensor_info("ids", ["N", 5], TensorProto.INT64)], [tensor_info("y", ["N", 5, 4])], tables
    )
    spec, made = _init(run_cli, model, tmp_path)
    assert made.exit_code == 0, made.output
    assert _case(spec)["cases"][0]["inputs"]["ids"] == {"shape": [3, 5], "low": 0, "high": 7}
    assert "also indexes tables of 100 rows" in spec.read_text()
    assert run_cli("apply", spec).exit_code == 0


def test_split_batch_when_the_original_cannot_run_at_the_batch(tmp_path, run_cli):
    """The batch is symbolic, but the export baked 1 into a Reshape: the original runs at batch 1 only."""
    shape = numpy_helper.from_array(np.array([1, 8], np.int64), "shape")
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"])]
    model = graph_model(nodes, [tensor_info("x", ["N", 4, 2])], [tensor_info("y", ["N", 8])], [shape])
    spec, made = _init(run_cli, model, tmp_path, "--batch", "4")
    assert made.exit_code == 0, made.output
    run = _case(spec)
    assert run["compare"]["split_batch"] is True, spec.read_text()
    assert "the original runs at batch 1 but not at batch 4" in spec.read_text()
    # apply is set_batch's to pass: it must rewrite the baked 1 (its tests cover that), not init's


def test_a_refusal_names_the_batch_asked_for(tmp_path, run_cli):
    """A Split of the batch into fixed sizes: set_batch refuses; the message says batch 4, not the probe's."""
    sizes = numpy_helper.from_array(np.array([1, 1], np.int64), "sizes")
    nodes = [
        helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=0, name="halves"),
        helper.make_node("Sub", ["a", "b"], ["y"]),
    ]
    model = graph_model(nodes, [tensor_info("x", [2, 3])], [tensor_info("y", [1, 3])], [sizes])
    spec, made = _init(run_cli, model, tmp_path, "--batch", "4")
    assert made.exit_code == 4, made.output
    assert "Split 'halves' cannot run at batch 4" in made.stderr, made.stderr
    assert "batch 8" not in made.stderr  # the probe's own batch (the old 2, plus 6) is not the user's
    assert not spec.exists()


def test_a_crafted_input_name_stays_a_name(tmp_path, run_cli):
    """issue 25: a newline in an input name must not end a comment and add a patch step."""
    evil = "x\n  - strip_metadata: {}\n#"
    nodes = [helper.make_node("Relu", [evil], ["y"])]
    model = graph_model(nodes, [tensor_info(evil, ["N", 4])], [tensor_info("y", ["N", 4])])
    spec, made = _init(run_cli, model, tmp_path)
    if made.exit_code != 0:  # refusing the name is fine too, as long as nothing is written
        assert made.exit_code == 2 and not spec.exists(), made.output
        return
    loaded = yaml.safe_load(spec.read_text())
    assert [next(iter(step)) for step in loaded["patches"]] == ["set_batch"]
    assert loaded["patches"][0]["set_batch"]["inputs"] == {evil: 0}
    assert list(loaded["verify"][1]["run"]["cases"][0]["inputs"]) == [evil]
    assert all(line.lstrip().startswith(("#", "-")) or ":" in line for line in spec.read_text().splitlines())
    assert "x\\n  - strip_metadata: {}\\n#  0" in made.stdout  # the terminal table escapes it too


def test_ids_picked_before_the_table_still_index_it(tmp_path, run_cli):
    """A decoder reads the last token of its prefix (Gather on axis 1), then the embedding."""
    table = numpy_helper.from_array(np.ones((ROWS, 4), np.float32), "emb")
    last = numpy_helper.from_array(np.array(-1, np.int64), "last")
    nodes = [
        helper.make_node("Gather", ["prefix", "last"], ["token"], axis=1),
        helper.make_node("Gather", ["emb", "token"], ["y"]),
    ]
    inputs = [tensor_info("prefix", ["N", 6], TensorProto.INT64)]
    spec, made = _init(run_cli, graph_model(nodes, inputs, [tensor_info("y", ["N", 4])], [table, last]), tmp_path)
    assert made.exit_code == 0, made.output
    assert _case(spec)["cases"][0]["inputs"]["prefix"] == {"shape": [3, 6], "low": 0, "high": ROWS}


def test_an_input_only_multiplied_by_zero_takes_any_values(tmp_path, run_cli):
    """silero's op15 export keeps `sr` as sr * 0: the graph reads it, but its value never matters."""
    zero = numpy_helper.from_array(np.array(0, np.int64), "zero")
    nodes = [
        helper.make_node("Mul", ["sr", "zero"], ["gone"]),
        helper.make_node("Cast", ["gone"], ["gonef"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "gonef"], ["y"]),
    ]
    inputs = [tensor_info("x", ["N", 4]), tensor_info("sr", [], TensorProto.INT64)]
    spec, made = _init(run_cli, graph_model(nodes, inputs, [tensor_info("y", ["N", 4])], [zero]), tmp_path)
    assert made.exit_code == 0, made.output
    assert "only multiplied by 0 (Mul" in made.stdout and "flagged" not in made.stdout
    assert run_cli("apply", spec).exit_code == 0


def test_a_fixed_batch_above_1_is_compared_per_sample(tmp_path, run_cli):
    """Exported at batch 3 and asked for 4: the case runs at 4 (the output only takes 4), and the
    original, which runs only at 3, gets each sample repeated 3 times (split_batch)."""
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    model = graph_model(nodes, [tensor_info("x", [3, 2])], [tensor_info("y", [3, 2])])
    spec, made = _init(run_cli, model, tmp_path, "--batch", "4")
    assert made.exit_code == 0, made.output
    run = _case(spec)
    assert run["cases"][0]["inputs"]["x"] == [4, 2]
    assert run["compare"] == {"against": "original", "split_batch": True}
    assert "fixed batch of 3: compare per sample" in spec.read_text()
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0 and "against original" in applied.stdout, applied.output


def test_a_recurrent_state_the_runs_refute_is_not_the_batch(tmp_path, run_cli):
    """A streaming GRU over chunks: axis 0 of x is the GRU's sequence, its batch is 1, and the original
    runs at any number of chunks with h0 [1, 1, 8]: the chunks are not samples, so no spec."""
    rng = np.random.default_rng(0)
    weights = [
        numpy_helper.from_array(rng.standard_normal(s).astype(np.float32), n)
        for n, s in (("W", (1, 24, 4)), ("R", (1, 24, 8)))
    ]
    one = numpy_helper.from_array(np.array([1], np.int64), "one")
    nodes = [
        helper.make_node("Unsqueeze", ["x", "one"], ["seq"]),
        helper.make_node("GRU", ["seq", "W", "R", "", "", "h0"], ["all", "last"], hidden_size=8, name="gru"),
    ]
    inputs = [tensor_info("x", ["T", 4]), tensor_info("h0", [1, 1, 8])]
    model = graph_model(nodes, inputs, [tensor_info("last", [1, 1, 8])], [*weights, one])
    spec, made = _init(run_cli, model, tmp_path)
    assert made.exit_code == 4, made.output
    assert "GRU 'gru' keeps a batch of 1 in its initial state 'h0' while 'x'[0] varies" in made.stderr
    assert "samples are not independent" in made.stderr and not spec.exists()


def test_a_map_output_at_a_fixed_batch_is_compared_per_sample(tmp_path, run_cli):
    """A classifier's ZipMap output (onnxruntime's logreg_iris) at a fixed batch 3, asked for 4: its
    list of dicts comes as rows, and the original runs each sample repeated 3 times."""
    nodes = [
        helper.make_node("Relu", ["x"], ["y"]),
        helper.make_node("ZipMap", ["y"], ["probabilities"], domain="ai.onnx.ml", classlabels_int64s=[0, 1]),
    ]
    zipped = helper.make_value_info(
        "probabilities",
        helper.make_sequence_type_proto(
            helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
        ),
    )
    model = graph_model(nodes, [tensor_info("x", [3, 2])], [tensor_info("y", [3, 2]), zipped])
    model.opset_import.append(helper.make_opsetid("ai.onnx.ml", 1))
    spec, made = _init(run_cli, model, tmp_path, "--batch", "4")
    assert made.exit_code == 0, made.output
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, spec.read_text() + applied.output
    assert "against original" in applied.stdout


def test_a_model_outside_the_project_root_gets_the_root_to_apply_with(tmp_path, run_cli):
    (tmp_path / "models").mkdir()
    (tmp_path / "specs").mkdir()
    nodes = [helper.make_node("Relu", ["x"], ["y"])]
    onnx.save(
        graph_model(nodes, [tensor_info("x", ["N", 4])], [tensor_info("y", ["N", 4])]), tmp_path / "models/m.onnx"
    )
    spec = tmp_path / "specs/spec.yaml"
    made = run_cli("init", tmp_path / "models/m.onnx", "--output", spec)
    assert made.exit_code == 0, made.output
    assert made.stdout.rstrip().endswith(f"next: patchspec apply {spec} --root {tmp_path}")
    assert f"apply with --root {tmp_path}" in spec.read_text()
    assert run_cli("apply", spec).exit_code == 2  # outside the root, as the header says
    assert run_cli("apply", spec, "--root", tmp_path).exit_code == 0


def test_an_unbatched_shape_input_is_given_whole_per_sample(tmp_path, run_cli):
    """onnx's test_expand_shape_model1: Expand(X [1, 3, 1], shape int64[2]) declared [1, 3, 1]. The shape
    gets the output's dims, [3, 1], and per sample it is given whole, not cut on its axis 0."""
    nodes = [helper.make_node("Expand", ["X", "shape"], ["Y"])]
    inputs = [tensor_info("X", [1, 3, 1]), tensor_info("shape", [2], TensorProto.INT64)]
    spec, made = _init(run_cli, graph_model(nodes, inputs, [tensor_info("Y", [1, 3, 1])]), tmp_path, "--batch", "4")
    assert made.exit_code == 0, made.output
    run = _case(spec)
    assert run["cases"][0]["inputs"]["shape"] == {"value": [3, 1]}
    assert run["compare"]["split_batch"] == {"inputs": {"shape": None}}
    applied = run_cli("apply", spec)
    assert applied.exit_code == 0, applied.output
