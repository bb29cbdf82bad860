"""Output shapes of the classical-ML ops (``ai.onnx.ml``), where ONNX's inference gives none.

skl2onnx, onnxmltools (LightGBM, XGBoost) and CatBoost write graphs of TreeEnsembleClassifier,
LinearClassifier, LabelEncoder, Scaler, ...; ONNX infers the shapes of few of them, so the batch was
lost at the first one (an output ``[?, 3]`` became ``[?, ?]``). Their rows are the input's rows:
what is known here is the row count (the input's axis 0) and, where the attributes say it, the
columns. ZipMap and the map ops give no tensor: nothing is said of them.
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
from onnx import TensorProto

from patchspec.shapes.known import UNKNOWN, Known

_SAME_SHAPE = frozenset({"LabelEncoder", "Scaler", "Normalizer", "Binarizer", "Imputer", "CategoryMapper"})
_CLASSIFIERS = frozenset({"LinearClassifier", "SVMClassifier", "TreeEnsembleClassifier"})
#: regressors, with the attribute that counts their targets (None: one target)
_REGRESSORS = {"LinearRegressor": "targets", "TreeEnsembleRegressor": "n_targets", "TreeEnsemble": "n_targets"}
ML_OPS = frozenset(
    {*_SAME_SHAPE, *_CLASSIFIERS, *_REGRESSORS, "SVMRegressor", "ArrayFeatureExtractor", "OneHotEncoder"}
    | {"FeatureVectorizer"}
)


def ml_outputs(node: onnx.NodeProto, inputs: Sequence[Known]) -> list[Known] | None:
    """The outputs of one ``ai.onnx.ml`` node, or None where this module says nothing of it."""
    if node.op_type not in ML_OPS or not inputs or inputs[0].shape is None:
        return None
    x = inputs[0]
    assert x.shape is not None
    attrs = {attr.name: onnx.helper.get_attribute_value(attr) for attr in node.attribute}
    rows = x.shape[0] if len(x.shape) == 2 else (1 if len(x.shape) == 1 else None)
    op = node.op_type
    if op in _SAME_SHAPE:
        return [Known(_same_shape_type(op, x.dtype, attrs), x.shape)]
    if op in _CLASSIFIERS:
        label = TensorProto.INT64 if attrs.get("classlabels_ints") else TensorProto.STRING
        return [Known(label, (rows,)), Known(TensorProto.FLOAT, (rows, None))]
    if op in _REGRESSORS or op == "SVMRegressor":
        targets = attrs.get(_REGRESSORS.get(op, ""), 1)
        return [Known(TensorProto.FLOAT, (rows, int(targets)))]
    if op == "ArrayFeatureExtractor":
        indices = inputs[1] if len(inputs) > 1 else UNKNOWN
        count = None if indices.shape is None else _product(indices.shape)
        shape = (1, count) if len(x.shape) == 1 else (*x.shape[:-1], count)
        return [Known(x.dtype, shape)]
    if op == "OneHotEncoder":
        categories = attrs.get("cats_int64s") or attrs.get("cats_strings") or []
        return [Known(TensorProto.FLOAT, (*x.shape, len(categories) or None))]
    dims = attrs.get("inputdimensions")  # FeatureVectorizer: its inputs' columns side by side
    return [Known(TensorProto.FLOAT, (rows, int(sum(dims)) if dims else None))]


def _same_shape_type(op: str, dtype: int, attrs: dict[str, object]) -> int:
    if op == "LabelEncoder":
        if attrs.get("classes_strings"):  # LabelEncoder-1: a string to its index in the classes, or back
            return TensorProto.STRING if dtype == TensorProto.INT64 else TensorProto.INT64
        for key, element in (
            ("values_strings", TensorProto.STRING),
            ("values_int64s", TensorProto.INT64),
            ("values_floats", TensorProto.FLOAT),
        ):
            if attrs.get(key):
                return element
        tensor = attrs.get("values_tensor")
        return int(tensor.data_type) if isinstance(tensor, TensorProto) else 0
    if op == "CategoryMapper":
        return TensorProto.INT64 if dtype == TensorProto.STRING else TensorProto.STRING
    if op in ("Scaler", "Normalizer"):
        return TensorProto.FLOAT
    return dtype


def _product(shape: tuple[int | None, ...]) -> int | None:
    total = 1
    for dim in shape:
        if dim is None:
            return None
        total *= dim
    return total


__all__ = ["ML_OPS", "ml_outputs"]
