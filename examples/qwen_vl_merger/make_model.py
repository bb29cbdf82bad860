"""Build a small Qwen-VL-merger-like model whose Reshapes were traced at one image grid.

A TorchScript trace of Qwen-VL's patch merger bakes the grid it saw into its Reshape shapes:
``[1, 11, 2, 15, 2, -1]`` for ``grid_thw = [[1, 22, 30]]``, and ``grid_thw`` itself is dropped
from the exported graph. This script writes such a model (deterministic weights, built with
onnx.helper) plus, for several grids, the inputs (.npy) and the outputs a correct merger gives
(.npz, computed with numpy from the same weights)::

    python examples/qwen_vl_merger/make_model.py models/qwen_vl_merger
    python examples/qwen_vl_merger/make_model.py models/merger_16x16 --grid 1,16,16 --static  # another trace

``specs/qwen_vl_merger.yaml`` then makes the model work for any grid.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

CHANNELS = 8  # hidden size of one patch
OUT = 16  # hidden size after merging
MERGE = 2  # spatial merge size (2x2 patches -> 1 token)
TRACED_GRID = (1, 22, 30)  # the grid the trace saw
GRIDS = [(1, 22, 30), (1, 16, 16), (1, 8, 12), (1, 20, 14), (2, 6, 10)]  # square, non-square, t=2


def weights() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(20240917)
    return {
        "ln.weight": rng.uniform(0.5, 1.5, CHANNELS).astype(np.float32),
        "mlp.0.weight": (rng.standard_normal((MERGE * MERGE * CHANNELS, OUT)) * 0.2).astype(np.float32),
        "mlp.2.weight": (rng.standard_normal((OUT, OUT)) * 0.2).astype(np.float32),
    }


def traced_shapes(grid=TRACED_GRID) -> tuple[list[int], list[int]]:
    t, h, w = grid
    grid_shape = [t, h // MERGE, MERGE, w // MERGE, MERGE, -1]
    merged_shape = [t * (h // MERGE) * (w // MERGE), MERGE * MERGE * CHANNELS]
    return grid_shape, merged_shape


def build_model(grid=TRACED_GRID, static: bool = False) -> onnx.ModelProto:
    """``static``: the input and output declared at the traced sizes, as a plain trace declares them."""
    w = weights()
    grid_shape, merged_shape = traced_shapes(grid)
    t, h, wd = grid
    initializers = [numpy_helper.from_array(v, k) for k, v in w.items()]
    initializers.append(numpy_helper.from_array(np.array(grid_shape, np.int64), "onnx::Reshape_41"))
    merged_const = numpy_helper.from_array(np.array(merged_shape, np.int64), "merged_shape")
    nodes = [
        helper.make_node("Mul", ["hidden_states", "ln.weight"], ["/ln/Mul_output_0"], name="/ln/Mul"),
        helper.make_node("Reshape", ["/ln/Mul_output_0", "onnx::Reshape_41"], ["/Reshape_output_0"], name="/Reshape"),
        helper.make_node(
            "Transpose", ["/Reshape_output_0"], ["/Transpose_output_0"], name="/Transpose", perm=[0, 1, 3, 2, 4, 5]
        ),
        helper.make_node("Constant", [], ["/Constant_output_0"], name="/Constant", value=merged_const),
        helper.make_node(
            "Reshape", ["/Transpose_output_0", "/Constant_output_0"], ["/Reshape_1_output_0"], name="/Reshape_1"
        ),
        helper.make_node(
            "MatMul", ["/Reshape_1_output_0", "mlp.0.weight"], ["/mlp/0/MatMul_output_0"], name="/mlp/0/MatMul"
        ),
        helper.make_node("Relu", ["/mlp/0/MatMul_output_0"], ["/mlp/1/Relu_output_0"], name="/mlp/1/Relu"),
        helper.make_node("MatMul", ["/mlp/1/Relu_output_0", "mlp.2.weight"], ["merged"], name="/mlp/2/MatMul"),
    ]
    # what the trace annotated: every intermediate at the traced grid
    traced = [t, h // 2, 2, wd // 2, 2, CHANNELS]
    value_info = [
        helper.make_tensor_value_info("/Reshape_output_0", TensorProto.FLOAT, traced),
        helper.make_tensor_value_info(
            "/Transpose_output_0", TensorProto.FLOAT, [traced[i] for i in (0, 1, 3, 2, 4, 5)]
        ),
        helper.make_tensor_value_info("/Reshape_1_output_0", TensorProto.FLOAT, merged_shape),
    ]
    graph = helper.make_graph(
        nodes,
        "qwen_vl_merger",
        [
            helper.make_tensor_value_info(
                "hidden_states", TensorProto.FLOAT, [t * h * wd if static else "num_patches", CHANNELS]
            )
        ],
        [
            helper.make_tensor_value_info(
                "merged", TensorProto.FLOAT, [merged_shape[0] if static else "num_tokens", OUT]
            )
        ],
        initializers,
        value_info=value_info,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="pytorch-like")
    model.ir_version = 8  # onnxruntime 1.31 refuses helper.make_model's default IR version
    return model


def reference(hidden: np.ndarray, grid) -> np.ndarray:
    """What a correct merger computes, in numpy, for one image of ``grid`` = (t, h, w)."""
    w = weights()
    t, h, wd = grid
    x = hidden * w["ln.weight"]
    x = x.reshape(t, h // MERGE, MERGE, wd // MERGE, MERGE, CHANNELS).transpose(0, 1, 3, 2, 4, 5)
    x = x.reshape(-1, MERGE * MERGE * CHANNELS)
    return np.maximum(x @ w["mlp.0.weight"], 0) @ w["mlp.2.weight"]


def case_name(grid) -> str:
    return "grid_" + "x".join(str(g) for g in grid)


def write_cases(folder: Path) -> None:
    cases = folder / "cases"
    cases.mkdir(parents=True, exist_ok=True)
    for number, grid in enumerate(GRIDS):
        rng = np.random.default_rng(number)
        hidden = rng.standard_normal((int(np.prod(grid)), CHANNELS)).astype(np.float32)
        name = case_name(grid)
        np.save(cases / f"{name}_hidden_states.npy", hidden)
        np.save(cases / f"{name}_grid_thw.npy", np.array([grid], dtype=np.int64))
        np.savez(cases / f"{name}_expected.npz", merged=reference(hidden, grid).astype(np.float32))


def main(argv: list[str]) -> int:
    grid = TRACED_GRID
    if "--grid" in argv:  # trace at another grid: a second export for 'patchspec derive'
        at = argv.index("--grid")
        grid = tuple(int(v) for v in argv[at + 1].split(","))
        argv = argv[:at] + argv[at + 2 :]
    static = "--static" in argv  # the input declared at the traced size, as torch.jit.trace writes it
    argv = [a for a in argv if a != "--static"]
    folder = Path(argv[0] if argv else "models/qwen_vl_merger")
    folder.mkdir(parents=True, exist_ok=True)
    onnx.save(build_model(grid, static), folder / "merger.onnx")
    write_cases(folder)
    print(f"wrote {folder / 'merger.onnx'} and {len(GRIDS)} reference cases under {folder / 'cases'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
