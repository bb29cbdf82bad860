"""Runs of models with bfloat16 inputs or outputs.

onnxruntime's Python API takes no bfloat16 numpy array (ml_dtypes', which onnx uses: "Numpy_type 256
can't be converted to MLDataType") and gives none back ("No corresponding Numpy type for Tensor Type.
bfloat16"). Such a session runs through OrtValues instead: a bfloat16 feed is handed over as its bits
(uint16) with ONNX's element type, and a bfloat16 output's bits are copied out and viewed as
ml_dtypes' bfloat16, so the comparison sees the values.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
from onnx import TensorProto, helper

#: numpy's bfloat16 (ml_dtypes'); an onnx without ml_dtypes maps it to uint16, which feeds.py refuses
BFLOAT16 = helper.tensor_dtype_to_np_dtype(TensorProto.BFLOAT16)
_ORT_BFLOAT16 = "tensor(bfloat16)"


def uses_bfloat16(session: Any) -> bool:
    """Whether the session has a bfloat16 input or output (then ``run_ort_values`` runs it)."""
    declared = [*session.get_inputs(), *session.get_outputs()]
    return any(getattr(arg, "type", "") == _ORT_BFLOAT16 for arg in declared)


def run_ort_values(session: Any, names: list[str] | None, feeds: dict[str, np.ndarray], options: Any) -> list[Any]:
    """``session.run`` for a session with bfloat16 tensors: feeds and outputs through OrtValues."""
    values = {name: _to_ort(array) for name, array in feeds.items()}
    return [_from_ort(value) for value in session.run_with_ort_values(names, values, options)]


def _to_ort(array: np.ndarray) -> Any:
    from onnxruntime import OrtValue

    array = np.ascontiguousarray(array)
    if array.dtype == BFLOAT16:
        return OrtValue.ortvalue_from_numpy_with_onnx_type(array.view(np.uint16), TensorProto.BFLOAT16)
    return OrtValue.ortvalue_from_numpy(array)


def _from_ort(value: Any) -> Any:
    if not value.is_tensor() or value.data_type() != _ORT_BFLOAT16:
        return value.numpy()
    bits = np.empty(tuple(value.shape()), np.uint16)
    if bits.size:
        ctypes.memmove(bits.ctypes.data, value.data_ptr(), bits.nbytes)
    return bits.view(BFLOAT16)


__all__ = ["BFLOAT16", "run_ort_values", "uses_bfloat16"]
