"""Helpers for patchspec's own tests (imported as ``helpers``; conftest.py holds fixtures only)."""

from __future__ import annotations

import glob
import importlib.util
from pathlib import Path

import onnx
from onnx import TensorProto, helper

from patchspec.spec.catalog import DISABLE_ENV

REPO = Path(__file__).resolve().parents[1]


def ppocr_model_paths() -> dict[str, Path]:
    """det/rec/cls models shipped in the rapidocr-onnxruntime wheel (found without importing it)."""
    spec = importlib.util.find_spec("rapidocr_onnxruntime")
    if spec is None or not spec.submodule_search_locations:
        return {}
    folder = Path(list(spec.submodule_search_locations)[0]) / "models"
    found = {}
    for path in glob.glob(str(folder / "*.onnx")):
        for kind in ("det", "rec", "cls"):
            if f"_{kind}_" in Path(path).name:
                found[kind] = Path(path)
    return found


def graph_model(nodes, inputs, outputs, initializers=(), opset=17, value_info=(), ir_version=8) -> onnx.ModelProto:
    """A model from explicit nodes and value infos (``patchspec.testing.make_model`` builds Relu chains
    from shapes); IR version pinned (helper.make_model's default is too new for onnxruntime)."""
    graph = helper.make_graph(
        list(nodes), "g", list(inputs), list(outputs), list(initializers), value_info=list(value_info)
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = ir_version
    return model


def tensor_info(name: str, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def write_spec(folder: Path, text: str, name: str = "spec.yaml") -> Path:
    path = folder / name
    path.write_text(text)
    return path


class PluginSite:
    """A folder on sys.path where a test 'pip installs' a plugin for real: a ``*.dist-info`` folder with
    an ``entry_points.txt``, which ``importlib.metadata`` finds as it finds pip's."""

    def __init__(self, root: Path, monkeypatch, dist: str = "fric-tools", version: str = "1.2.3") -> None:
        self.root, self.dist, self.version = root, dist, version
        root.mkdir()
        monkeypatch.syspath_prepend(str(root))
        monkeypatch.delenv(DISABLE_ENV, raising=False)

    def install(self, source: str, module: str = "fric_plugin", name: str = "fric") -> Path:
        """Install ``source`` as ``module``, entry point ``name``; returns the module's file."""
        info = self.root / f"{self.dist.replace('-', '_')}-{self.version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {self.dist}\nVersion: {self.version}\n")
        (info / "entry_points.txt").write_text(f"[patchspec]\n{name} = {module}\n")
        path = self.root / f"{module}.py"
        path.write_text(source)
        return path


def traced_above_one_model() -> onnx.ModelProto:
    """hummingbird's gradient boosting head, exported at batch 2 with a dynamic batch: x [sym, 5] is
    turned to [5, sym, 1], squeezed without axes and turned back. At batch 1 the Squeeze drops the
    batch too and the Transpose fails; from batch 2 up it runs, one output row per sample."""
    nodes = [
        helper.make_node("Transpose", ["x"], ["t"], perm=[1, 0]),
        helper.make_node("Unsqueeze", ["t", "last"], ["u"]),
        helper.make_node("Squeeze", ["u"], ["s"], name="squeeze"),
        helper.make_node("Transpose", ["s"], ["back"], perm=[1, 0], name="back"),
        helper.make_node("ReduceSum", ["back", "last_but_one"], ["y"], keepdims=0),
    ]
    constants = [
        helper.make_tensor("last", TensorProto.INT64, [1], [2]),
        helper.make_tensor("last_but_one", TensorProto.INT64, [1], [1]),
    ]
    return graph_model(nodes, [tensor_info("x", ["sym", 5])], [tensor_info("y", ["sym"])], constants, opset=13)
