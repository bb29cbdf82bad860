"""Write models/add.onnx (+ models/add.onnx.data): y = x + w, x [1, 64], w a 64-float weight kept as external data."""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

folder = Path(__file__).resolve().parent / "models"
folder.mkdir(exist_ok=True)
weight = numpy_helper.from_array(np.arange(64, dtype=np.float32), "w")
graph = helper.make_graph(
    [helper.make_node("Add", ["x", "w"], ["y"])],
    "add",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
    [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])],
    [weight],
)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8
onnx.save(model, folder / "add.onnx", save_as_external_data=True, location="add.onnx.data", size_threshold=0)
print(f"wrote {folder / 'add.onnx'}")
