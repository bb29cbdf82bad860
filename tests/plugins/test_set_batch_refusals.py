"""set_batch never writes a model that the evaluation shows cannot run at the new batch, or that drops
or mixes samples there: exit 4, nothing written, with ``--no-verify`` too, the cause on the first line.
An undecided point that is not such a proof stays a warning."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info, write_spec


def ints(name, values):
    return numpy_helper.from_array(np.array(values, np.int64), name)


def pitch_tracker():
    """An in-graph STFT's shape: the batch is flattened into one hop buffer (Reshape [-1, 256]) and
    frames are taken with Slices of constant bounds; at batch 4 every frame comes from sample 0."""
    nodes = [helper.make_node("Reshape", ["x", "hop"], ["buffer"], name="hops")]
    initializers = [ints("hop", [-1, 256]), ints("axis0", [0]), ints("axis1", [1])]
    for k in range(4):
        initializers += [ints(f"start{k}", [k]), ints(f"end{k}", [k + 1])]
        nodes += [
            helper.make_node("Slice", ["buffer", f"start{k}", f"end{k}", "axis0"], [f"frame{k}"], name=f"frame{k}"),
            helper.make_node("ReduceMean", [f"frame{k}", "axis1"], [f"mean{k}"], keepdims=1),
        ]
    nodes.append(helper.make_node("Concat", [f"mean{k}" for k in range(4)], ["pitch"], axis=1))
    return graph_model(
        nodes, [tensor_info("x", [1, 1024])], [tensor_info("pitch", [1, "frames"])], initializers, opset=18
    )


def loop_on_batch_input():
    """A Loop whose condition comes from the "batch" input: a [1] counter compared with a constant,
    squeezed to the scalar a Loop condition must be (from another tool's test suite)."""
    body = helper.make_graph(
        [
            helper.make_node("Identity", ["cond_in"], ["cond_out"]),
            helper.make_node("Add", ["acc_in", "one"], ["acc_out"]),
        ],
        "body",
        [
            tensor_info("i", [], TensorProto.INT64),
            tensor_info("cond_in", [], TensorProto.BOOL),
            tensor_info("acc_in", [3]),
        ],
        [tensor_info("cond_out", [], TensorProto.BOOL), tensor_info("acc_out", [3])],
        [numpy_helper.from_array(np.array(1, np.float32), "one")],
    )
    nodes = [
        helper.make_node("Less", ["counter", "limit"], ["below"]),
        helper.make_node("Squeeze", ["below"], ["cond"], name="to_scalar"),
        helper.make_node("Loop", ["trips", "cond", "start"], ["total"], body=body, name="count"),
    ]
    initializers = [ints("limit", [5]), ints("trips", 3), numpy_helper.from_array(np.zeros(3, np.float32), "start")]
    return graph_model(
        nodes, [tensor_info("counter", [1], TensorProto.INT64)], [tensor_info("total", [3])], initializers
    )


def split_of_the_batch():
    """A Split along axis 0 whose sizes sum to the old batch (from another tool's test suite)."""
    nodes = [
        helper.make_node("Split", ["x", "sizes"], ["a", "b"], axis=0, name="halves"),
        helper.make_node("Sub", ["a", "b"], ["y"]),
    ]
    return graph_model(nodes, [tensor_info("x", [2, 3])], [tensor_info("y", [1, 3])], [ints("sizes", [1, 1])])


CONTROLS = {
    "pitch_tracker": (pitch_tracker, "Slice 'frame0' drops samples at batch 4"),
    "loop_condition": (
        loop_on_batch_input,
        "Loop 'count' cannot run at batch 4: its condition 'cond' is computed from the batch",
    ),
    "split_sizes": (split_of_the_batch, "Split 'halves' cannot run at batch 4"),
}


def spec_for(tmp_path, model, size=4, verify=""):
    onnx.save(model, tmp_path / "m.onnx")
    return write_spec(
        tmp_path, f"patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches:\n  - set_batch: {size}\n{verify}"
    )


@pytest.mark.parametrize("no_verify", [False, True], ids=["verified", "no-verify"])
@pytest.mark.parametrize("name", sorted(CONTROLS))
def test_a_model_that_cannot_be_batched_is_refused_in_both_modes(name, no_verify, tmp_path, run_cli):
    build, cause = CONTROLS[name]
    before = build().SerializeToString()
    path = spec_for(tmp_path, build())
    result = run_cli("apply", path, *(["--no-verify"] if no_verify else []))
    assert result.exit_code == 4, result.output
    first = result.stderr.splitlines()[0]
    assert cause in first, first
    assert "nothing is written" in result.stderr
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())
    assert (tmp_path / "m.onnx").read_bytes() == before  # the input is never modified


def test_onnxruntime_loads_the_originals_the_refusals_protect(tmp_path):
    """The premise: the originals are valid models; only their batched versions would be wrong."""
    import onnxruntime

    for name, (build, _) in CONTROLS.items():
        onnx.save(build(), tmp_path / f"{name}.onnx")
        onnxruntime.InferenceSession(str(tmp_path / f"{name}.onnx"), providers=["CPUExecutionProvider"])


def test_a_symbolic_batch_is_refused_too(tmp_path, run_cli):
    result = run_cli("apply", spec_for(tmp_path, split_of_the_batch(), size="N"), "--no-verify")
    assert result.exit_code == 4, result.output
    assert "Split 'halves' cannot run" in result.stderr.splitlines()[0]


def test_an_undecided_point_that_is_not_a_proof_stays_a_warning(tmp_path, run_cli):
    """Exported at batch 2, a Reshape [3, -1] still runs at batch 4, and no element of its shape can be
    proved to be the batch: a warning with the spec lines that settle it, and the model is written."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="regroup")]
    model = graph_model(nodes, [tensor_info("x", [2, 3])], [tensor_info("y", [3, 2])], [ints("shape", [3, -1])])
    result = run_cli("apply", spec_for(tmp_path, model), "--no-verify", "--allow-undecided", "-v")
    assert result.exit_code == 0, result.output
    assert "undecided: Reshape 'regroup'" in result.stdout
    assert "replace_initializer:" in result.stdout
    assert (tmp_path / "out" / "m2.onnx").exists()


def test_an_undecided_point_without_verification_is_written_only_when_allowed(tmp_path, run_cli):
    """Nothing judges an undecided point under --no-verify: exit 4, naming the point and the flag."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="regroup")]
    model = graph_model(nodes, [tensor_info("x", [2, 3])], [tensor_info("y", [3, 2])], [ints("shape", [3, -1])])
    result = run_cli("apply", spec_for(tmp_path, model), "--no-verify")
    assert result.exit_code == 4, result.output
    assert "left 1 point undecided" in result.stderr and "Reshape 'regroup'" in result.stderr
    assert "--allow-undecided" in result.stderr
    assert not (tmp_path / "out" / "m2.onnx").exists()


def test_an_output_written_with_undecided_points_is_no_build_of_a_plain_no_verify(tmp_path, run_cli):
    """--allow-undecided is part of the build: a later plain --no-verify refuses again (exit 4) instead
    of calling the model it would not have written "up to date", and --check says it is stale."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="regroup")]
    model = graph_model(nodes, [tensor_info("x", [2, 3])], [tensor_info("y", [3, 2])], [ints("shape", [3, -1])])
    spec = spec_for(tmp_path, model)
    assert run_cli("apply", spec, "--no-verify", "--allow-undecided").exit_code == 0
    assert "up to date" in run_cli("apply", spec, "--no-verify", "--allow-undecided").stdout
    assert run_cli("apply", spec, "--check", "--no-verify", "--allow-undecided").exit_code == 0
    assert run_cli("apply", spec, "--check", "--no-verify").exit_code == 6
    assert run_cli("apply", spec, "--no-verify").exit_code == 4


def test_a_model_onnx_inference_gives_up_on_is_a_located_refusal_not_a_bug(tmp_path, run_cli):
    """A custom-op node whose domain has no opset import (Polygraphy's custom_op_node.onnx): onnx's
    inference raises even when lenient. That is the model's problem (exit 4), never patchspec's (5)."""
    node = helper.make_node("NegPos", ["x"], ["y"], domain="ai.onnx.contrib")
    model = graph_model([node], [tensor_info("x", ["N", 3])], [tensor_info("y", ["N", 3])])
    result = run_cli("apply", spec_for(tmp_path, model), "--no-verify")
    assert result.exit_code == 4, result.output
    first = result.stderr.splitlines()[0]
    assert "patches[0] (set_batch): ONNX shape inference" in first and "No opset import for domain" in first
    assert "'ai.onnx.contrib' without an opset import" in result.stderr


def test_the_suggested_lines_applied_settle_the_undecided_point(tmp_path, run_cli):
    """Every hint is applied: the replace_initializer lines set_batch prints, pasted after it, give a spec
    that applies with nothing undecided and runs at the new batch."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="regroup")]
    model = graph_model(nodes, [tensor_info("x", [2, 3])], [tensor_info("y", [3, 2])], [ints("shape", [3, -1])])
    first = run_cli("apply", spec_for(tmp_path, model), "--no-verify", "--allow-undecided", "-v")
    lines = first.stdout[first.stdout.index("  - replace_initializer:") :].splitlines()[:4]
    folder = tmp_path / "fixed"
    folder.mkdir()
    onnx.save(model, folder / "m.onnx")
    spec = write_spec(
        folder,
        "patchspec: 1\nmodel: m.onnx\noutput: out/m2.onnx\npatches:\n  - set_batch: 4\n"
        + "\n".join(line.strip("\n") for line in lines)
        + "\nverify:\n  - check: {}\n"
        "  - run: {cases: [{inputs: {x: [4, 3]}}], compare: {against: none}}\n",
    )
    fixed = run_cli("apply", spec, "-v")
    assert fixed.exit_code == 0, spec.read_text() + fixed.output
    assert "undecided" not in fixed.stdout.split("replace_initializer")[-1]
