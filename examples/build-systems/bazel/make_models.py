"""Write the example's inputs, the same bytes on every run (Bazel's cache keys hash them):

- models/linear.onnx, y = x @ w (x [1, K]), its weight w [K, K] in models/linear.onnx.data;
- models/scale.onnx, y = x * 2 (x [1, 8]), one file;
- data/x_b2.npy and data/y_b2.npz, an input of scale at batch 2 and the output expected for it.

K is 8 (a 256-byte weight); `--weights-mib N` makes w N MiB (256: K = 8192), to time a build whose
action moves real weights."""

import argparse
import io
import zipfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--weights-mib", type=float, help="size of linear's weight in MiB (default: 256 bytes)")
mib = parser.parse_args().weights_mib
k = int((mib * 2**20 / 4) ** 0.5) if mib else 8
here = Path(__file__).resolve().parent
(here / "models").mkdir(exist_ok=True)
(here / "data").mkdir(exist_ok=True)


def save(node, name, size, initializer, **options):
    graph = helper.make_graph(
        [node],
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, size])],
        [initializer],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, here / "models" / f"{name}.onnx", **options)


weight = (np.arange(k * k, dtype=np.float32).reshape(k, k) % 7 - 3) / k
(here / "models" / "linear.onnx.data").unlink(missing_ok=True)  # onnx.save appends to an existing data file
save(
    helper.make_node("MatMul", ["x", "w"], ["y"]),
    "linear",
    k,
    numpy_helper.from_array(weight, "w"),
    save_as_external_data=True,
    location="linear.onnx.data",
    size_threshold=0,
)
save(helper.make_node("Mul", ["x", "k"], ["y"]), "scale", 8, numpy_helper.from_array(np.float32(2), "k"))

x = np.arange(16, dtype=np.float32).reshape(2, 8) / 4
np.save(here / "data" / "x_b2.npy", x)
# np.savez stamps each member with the current time: a fixed date keeps the bytes the same
with zipfile.ZipFile(here / "data" / "y_b2.npz", "w") as archive:
    member = io.BytesIO()
    np.save(member, x * 2)
    archive.writestr(zipfile.ZipInfo("y.npy", date_time=(1980, 1, 1, 0, 0, 0)), member.getvalue())
print(f"wrote {here / 'models'} (linear's weight: {k}x{k} floats) and {here / 'data'}")
