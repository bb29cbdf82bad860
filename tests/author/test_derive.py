"""`patchspec derive A B`: one network traced at two sizes -> a spec that makes A work at any size.

Each scenario is a generator that writes the model the way a tracer does: the sizes it was given are
baked into the constants. The spec derive writes is applied (with its own verify block), and the
patched model then runs at a third size, compared with numpy.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import yaml
from onnx import TensorProto, helper, numpy_helper

from helpers import graph_model, tensor_info
from patchspec.author.fit import Atom, fit, folded_into
from patchspec.testing import run_cli

RNG = np.random.default_rng(17)
CHANNELS, OUT = 8, 16
MERGER = {
    "ln": RNG.uniform(0.5, 1.5, CHANNELS).astype(np.float32),
    "mlp": (RNG.standard_normal((4 * CHANNELS, OUT)) * 0.2).astype(np.float32),
}
CONV = (RNG.standard_normal((6, 3, 8, 8)) * 0.1).astype(np.float32)
WEIGHTS = {n: (RNG.standard_normal((64, 64)) * 0.1).astype(np.float32) for n in ("wq", "wk", "wv")}
MAX_T = 32
MASK = np.triu(np.full((MAX_T, MAX_T), -1.0e4, np.float32), 1)[None, None]


def ints(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(values, np.int64), name)


# -- scenario 1: a merger whose grid only the data knows ---------------------------------------------------
def merger(h: int, w: int) -> onnx.ModelProto:
    """Qwen-VL-like: patches arrive flattened, [h*2 * w*2, C]; the trace baked the merged grid h x w."""
    grid_shape = ints("onnx::Reshape_41", [1, h, 2, w, 2, -1])
    merged = helper.make_node(
        "Constant", [], ["/Constant_output_0"], name="/Constant", value=ints("merged", [h * w, 4 * CHANNELS])
    )
    nodes = [
        helper.make_node("Mul", ["hidden_states", "ln.weight"], ["/ln/Mul_output_0"], name="/ln/Mul"),
        helper.make_node("Reshape", ["/ln/Mul_output_0", "onnx::Reshape_41"], ["/Reshape_output_0"], name="/Reshape"),
        helper.make_node(
            "Transpose", ["/Reshape_output_0"], ["/Transpose_output_0"], name="/Transpose", perm=[0, 1, 3, 2, 4, 5]
        ),
        merged,
        helper.make_node(
            "Reshape", ["/Transpose_output_0", "/Constant_output_0"], ["/Reshape_1_output_0"], name="/Reshape_1"
        ),
        helper.make_node("MatMul", ["/Reshape_1_output_0", "mlp.weight"], ["merged"], name="/mlp/MatMul"),
    ]
    return graph_model(
        nodes,
        [tensor_info("hidden_states", [4 * h * w, CHANNELS])],
        [tensor_info("merged", [h * w, OUT])],
        [
            numpy_helper.from_array(MERGER["ln"], "ln.weight"),
            grid_shape,
            numpy_helper.from_array(MERGER["mlp"], "mlp.weight"),
        ],
    )


def merger_reference(hidden: np.ndarray, h: int, w: int) -> np.ndarray:
    x = (hidden * MERGER["ln"]).reshape(1, h, 2, w, 2, CHANNELS).transpose(0, 1, 3, 2, 4, 5)
    return x.reshape(h * w, 4 * CHANNELS) @ MERGER["mlp"]


# -- scenario 2: a detector head that flattens H*W -------------------------------------------------------
def detector(height: int, width: int) -> onnx.ModelProto:
    """Conv stride 8 -> [1, 6, H/8, W/8] -> [1, 2, 3, H/8, W/8] -> [1, 2*H*W/64, 3], and a prior column
    made by ConstantOfShape([1, 2*H*W/64, 1]): the trace baked H/8, W/8 and 2*H*W/64."""
    h, w = height // 8, width // 8
    nodes = [
        helper.make_node(
            "Conv", ["images", "conv.weight"], ["feat"], name="/head/Conv", kernel_shape=[8, 8], strides=[8, 8]
        ),
        helper.make_node("Reshape", ["feat", "shape_anchors"], ["anchors"], name="/head/Reshape"),
        helper.make_node("Transpose", ["anchors"], ["anchors_t"], name="/head/Transpose", perm=[0, 1, 3, 4, 2]),
        helper.make_node("Reshape", ["anchors_t", "shape_boxes"], ["boxes"], name="/head/Reshape_1"),
        helper.make_node(
            "ConstantOfShape",
            ["shape_prior"],
            ["prior"],
            name="/head/ConstantOfShape",
            value=helper.make_tensor("value", TensorProto.FLOAT, [1], [0.5]),
        ),
        helper.make_node("Concat", ["boxes", "prior"], ["pred"], name="/head/Concat", axis=2),
    ]
    initializers = [
        numpy_helper.from_array(CONV, "conv.weight"),
        ints("shape_anchors", [1, 2, 3, h, w]),
        ints("shape_boxes", [1, 2 * h * w, 3]),
        ints("shape_prior", [1, 2 * h * w, 1]),
    ]
    return graph_model(
        nodes, [tensor_info("images", [1, 3, height, width])], [tensor_info("pred", [1, 2 * h * w, 4])], initializers
    )


def detector_reference(images: np.ndarray) -> np.ndarray:
    _, _, height, width = images.shape
    h, w = height // 8, width // 8
    feat = np.einsum("chkwl,ockl->ohw", images[0].reshape(3, h, 8, w, 8), CONV)
    boxes = feat.reshape(2, 3, h, w).transpose(0, 2, 3, 1).reshape(1, 2 * h * w, 3)
    return np.concatenate([boxes, np.full((1, 2 * h * w, 1), 0.5, np.float32)], axis=2)


# -- scenario 3: a sequence model reshaping to [1, T, heads, d] -------------------------------------------
def attention(t: int) -> onnx.ModelProto:
    """Self-attention with 4 heads of 16: q and k share one traced shape [1, T, 4, 16], v has its own,
    the causal mask is sliced to [T, T] with traced ends, and the result goes back to [1, T, 64]."""
    nodes = [helper.make_node("MatMul", ["x", n], [f"{n}_out"], name=f"/attn/{n}/MatMul") for n in ("wq", "wk", "wv")]
    nodes += [
        helper.make_node("Reshape", ["wq_out", "shape_heads"], ["q4"], name="/attn/q/Reshape"),
        helper.make_node("Reshape", ["wk_out", "shape_heads"], ["k4"], name="/attn/k/Reshape"),
        helper.make_node("Reshape", ["wv_out", "shape_heads_v"], ["v4"], name="/attn/v/Reshape"),
        helper.make_node("Transpose", ["q4"], ["q"], name="/attn/q/Transpose", perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k4"], ["kt"], name="/attn/k/Transpose", perm=[0, 2, 3, 1]),
        helper.make_node("Transpose", ["v4"], ["v"], name="/attn/v/Transpose", perm=[0, 2, 1, 3]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="/attn/MatMul"),
        helper.make_node("Mul", ["scores", "scale"], ["scaled"], name="/attn/Mul"),
        helper.make_node("Slice", ["mask", "mask_starts", "mask_ends", "mask_axes"], ["mask_t"], name="/attn/Slice"),
        helper.make_node("Add", ["scaled", "mask_t"], ["masked"], name="/attn/Add"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="/attn/Softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "v"], ["context"], name="/attn/MatMul_1"),
        helper.make_node("Transpose", ["context"], ["context_t"], name="/attn/Transpose", perm=[0, 2, 1, 3]),
        helper.make_node("Reshape", ["context_t", "shape_out"], ["y"], name="/attn/Reshape"),
    ]
    initializers = [numpy_helper.from_array(v, k) for k, v in WEIGHTS.items()]
    initializers += [
        ints("shape_heads", [1, t, 4, 16]),
        ints("shape_heads_v", [1, t, 4, 16]),
        numpy_helper.from_array(np.array(0.25, np.float32), "scale"),
        numpy_helper.from_array(MASK, "mask"),
        ints("mask_starts", [0, 0]),
        ints("mask_ends", [t, t]),
        ints("mask_axes", [2, 3]),
        ints("shape_out", [1, t, 64]),
    ]
    return graph_model(nodes, [tensor_info("x", [1, t, 64])], [tensor_info("y", [1, t, 64])], initializers)


def attention_reference(x: np.ndarray) -> np.ndarray:
    t = x.shape[1]
    q, k, v = ((x[0] @ WEIGHTS[n]).reshape(t, 4, 16).transpose(1, 0, 2) for n in ("wq", "wk", "wv"))
    scores = q @ k.transpose(0, 2, 1) * 0.25 + MASK[0, 0, :t, :t]
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return (probs @ v).transpose(1, 0, 2).reshape(1, t, 64)


# -- the round trip ---------------------------------------------------------------------------------------
def derive_and_apply(tmp_path: Path, model_a: onnx.ModelProto, model_b: onnx.ModelProto) -> tuple[dict, str, Path]:
    """Save A and B under models/, derive specs/spec.yaml, apply it; (spec, derive's stdout, output)."""
    (tmp_path / ".git").mkdir()  # a repository: specs/ and models/ are inside its root
    (tmp_path / "models").mkdir()
    onnx.save(model_a, str(tmp_path / "models" / "a.onnx"))
    onnx.save(model_b, str(tmp_path / "models" / "b.onnx"))
    code, out, err = run_cli(["derive", "models/a.onnx", "models/b.onnx", "--output", "specs/spec.yaml"], cwd=tmp_path)
    assert code == 0, out + err
    assert "next: patchspec apply specs/spec.yaml\n" in out  # models/ is inside the repository: no --root
    spec = yaml.safe_load((tmp_path / "specs" / "spec.yaml").read_text())
    assert (spec["model"], spec["output"]) == ("../models/a.onnx", "../build/a.dynamic.onnx")  # one place for outputs
    code, applied, err = run_cli(["apply", "specs/spec.yaml"], cwd=tmp_path)
    assert code == 0, applied + err
    assert "passed    2 case(s)" in applied, applied
    assert not [p.name for p in (tmp_path / "models").iterdir() if p.name not in ("a.onnx", "b.onnx")]  # no bookkeeping
    return spec, out, tmp_path / "build" / "a.dynamic.onnx"


def shapes_of(spec: dict) -> dict[str, list]:
    return {
        step["replace_initializer"]["initializer"]: step["replace_initializer"]["shape"]
        for step in spec["patches"]
        if "replace_initializer" in step
    }


def run_at(path: Path, feeds: dict) -> np.ndarray:
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


def test_merger_grid_comes_from_an_added_input(tmp_path):
    spec, out, output = derive_and_apply(tmp_path, merger(11, 15), merger(8, 8))
    assert spec["patches"][0] == {"add_input": {"name": "sizes", "dtype": "int64", "shape": [2]}}
    assert shapes_of(spec) == {
        "onnx::Reshape_41": [1, "value(sizes, 0)", 2, "value(sizes, 1)", 2, -1],
        "/Constant_output_0": [-1, 32],
    }
    assert {"rename_dims": {"tensor": "hidden_states", "axes": {0: "hidden_states_dim0"}}} in spec["patches"]
    cases = spec["verify"][1]["run"]["cases"]
    assert cases[1]["against"] == "../models/b.onnx"
    assert cases[0]["inputs"] == {"hidden_states": [660, CHANNELS], "sizes": {"file": "spec.sizes.a.npy"}}
    assert np.load(tmp_path / "specs" / "spec.sizes.b.npy").tolist() == [8, 8]
    assert "onnx::Reshape_41[1] 11 -> 8 value(sizes, 0)" in " ".join(out.split())
    hidden = RNG.standard_normal((4 * 5 * 9, CHANNELS)).astype(np.float32)
    got = run_at(output, {"hidden_states": hidden, "sizes": np.array([5, 9], np.int64)})
    error = float(np.abs(got - merger_reference(hidden, 5, 9)).max())
    print(f"merger at grid 5x9: max abs error {error:.3g}")
    assert got.shape == (45, OUT) and error < 1e-4


def test_detector_head_flattening_h_times_w(tmp_path):
    spec, _, output = derive_and_apply(tmp_path, detector(320, 480), detector(256, 256))
    assert shapes_of(spec) == {
        "shape_anchors": [1, 2, 3, "dim(images, 2) // 8", -1],
        "shape_boxes": [1, -1, 3],
        "shape_prior": [1, "dim(images, 2) * dim(images, 3) // 32", 1],
    }
    assert {"rename_dims": {"tensor": "images", "axes": {2: "images_dim2", 3: "images_dim3"}}} in spec["patches"]
    assert "add_input" not in str(spec["patches"])
    images = RNG.standard_normal((1, 3, 192, 384)).astype(np.float32)
    got = run_at(output, {"images": images})
    error = float(np.abs(got - detector_reference(images)).max())
    print(f"detector at 192x384: max abs error {error:.3g}")
    assert got.shape == (1, 2 * 24 * 48, 4) and error < 1e-4


def test_sequence_model_reshaping_to_heads(tmp_path):
    spec, out, output = derive_and_apply(tmp_path, attention(12), attention(20))
    assert shapes_of(spec) == {
        "shape_heads": [1, -1, 4, 16],
        "shape_heads_v": [1, -1, 4, 16],
        "mask_ends": ["dim(x, 1)", "dim(x, 1)"],
        "shape_out": [1, -1, 64],
    }
    assert "mask_ends[0] 12 -> 20 dim(x, 1)" in " ".join(out.split())
    x = RNG.standard_normal((1, 7, 64)).astype(np.float32)
    got = run_at(output, {"x": x})
    error = float(np.abs(got - attention_reference(x)).max())
    print(f"attention at T=7: max abs error {error:.3g}")
    assert got.shape == (1, 7, 64) and error < 1e-4


# -- refusals ---------------------------------------------------------------------------------------------
def tiny(n: int, op: str = "Relu", reps: int = 1, weight: float = 1.0) -> onnx.ModelProto:
    """x [1, n] -> op -> Mul by a weight -> Tile by [1, reps] -> y [1, n * reps]."""
    nodes = [
        helper.make_node(op, ["x"], ["a"], name="act"),
        helper.make_node("Mul", ["a", "w"], ["b"], name="scale"),
        helper.make_node("Tile", ["b", "reps"], ["y"], name="tile"),
    ]
    return graph_model(
        nodes,
        [tensor_info("x", [1, n])],
        [tensor_info("y", [1, n * reps])],
        [numpy_helper.from_array(np.array([weight], np.float32), "w"), ints("reps", [1, reps])],
    )


def derive_fails(tmp_path: Path, model_a, model_b, *args) -> tuple[int, str]:
    for name, model in (("a.onnx", model_a), ("b.onnx", model_b)):
        if model is not None:
            onnx.save(model, str(tmp_path / name))
    code, out, err = run_cli(["derive", "a.onnx", "b.onnx", *args], cwd=tmp_path)
    return code, out + err


def test_refuses_graphs_that_differ_in_structure(tmp_path):
    code, text = derive_fails(tmp_path, tiny(8, "Relu"), tiny(12, "Sigmoid"))
    assert code == 4, text
    assert "differ in structure" in text and "node 0: Relu 'act' in A, Sigmoid 'act' in B" in text


def test_refuses_an_entry_no_expression_fits(tmp_path):
    code, text = derive_fails(tmp_path, tiny(8, reps=7), tiny(12, reps=5))
    assert code == 4, text
    assert "Tile 'tile' input 1: constant 'reps' is [1, 7] in A and [1, 5] in B; entry 1: 7 in A, 5 in B" in text
    assert "dim(x, 1) is 8 in A, 12 in B" in text
    assert not (tmp_path / "a.patchspec.yaml").exists()


def test_refuses_a_weight_that_differs(tmp_path):
    code, text = derive_fails(tmp_path, tiny(8), tiny(12, weight=2.0))
    assert code == 4, text
    assert "Mul 'scale' input 1: the weight 'w' (float32 [1]) differs between A and B" in text


def test_missing_model_is_exit_3(tmp_path):
    code, text = derive_fails(tmp_path, tiny(8), None)
    assert code == 3 and "b.onnx: No such file or directory" in text


def test_existing_spec_needs_force(tmp_path):
    (tmp_path / "spec.yaml").write_text("keep me\n")
    code, text = derive_fails(tmp_path, tiny(8, reps=2), tiny(12, reps=2), "--output", "spec.yaml")
    assert code == 2 and "spec.yaml exists; nothing was written" in text
    assert (tmp_path / "spec.yaml").read_text() == "keep me\n"
    code, text = derive_fails(tmp_path, tiny(8, reps=2), tiny(12, reps=2), "--output", "spec.yaml", "--force")
    assert code == 0, text
    assert "rename_dims" in (tmp_path / "spec.yaml").read_text()


def test_output_that_is_a_folder_is_a_usage_error(tmp_path):
    (tmp_path / "specs").mkdir()
    code, text = derive_fails(tmp_path, tiny(8, reps=2), tiny(12, reps=2), "--output", "specs", "--force")
    assert code == 2 and "is a folder" in text


def test_square_exports_are_flagged(tmp_path):
    onnx.save(detector(320, 320), str(tmp_path / "a.onnx"))
    onnx.save(detector(256, 256), str(tmp_path / "b.onnx"))
    code, out, err = run_cli(["derive", "a.onnx", "b.onnx"], cwd=tmp_path)
    assert code == 0, err
    assert "note: dim(images, 2) and dim(images, 3) are both 320 in A and 256 in B" in out


def test_same_model_twice_is_a_usage_error(tmp_path):
    onnx.save(tiny(8), str(tmp_path / "a.onnx"))
    code, _, err = run_cli(["derive", "a.onnx", "./a.onnx"], cwd=tmp_path)
    assert code == 2 and "A and B are the same file" in err


def test_help_teaches_the_command():
    code, out, _ = run_cli(["derive", "--help"])
    assert code == 0
    for words in ("two input sizes", "Example:", "replace_initializer", "Exit codes: 0 written", "4 the graphs differ"):
        assert words in " ".join(out.split()), words


# -- the fitter -------------------------------------------------------------------------------------------
H, W = Atom("dim(x, 2)", 320, 256), Atom("dim(x, 3)", 480, 256)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (320, 256, "dim(x, 2)"),
        (40, 32, "dim(x, 2) // 8"),
        (60, 32, "dim(x, 3) // 8"),
        (960, 512, "dim(x, 3) * 2"),
        (321, 257, "dim(x, 2) + 1"),
        (2400, 1024, "dim(x, 2) * dim(x, 3) // 64"),
        (7, 5, None),  # decreases where every size grows
        (6, 4, None),  # no size, product or offset gives both
    ],
)
def test_fit_picks_the_simplest_expression(a, b, expected):
    found = fit(a, b, [H, W])
    assert (found.text if found else None) == expected


def test_sizes_folded_into_a_flattened_dim():
    patches = Atom("dim(p, 0)", 660, 256)
    assert folded_into([(11, 8), (15, 8)], [patches]) == (patches, 4)
    assert folded_into([(7, 5)], [Atom("dim(x, 1)", 8, 12)]) is None
