"""The element types a spec may name (``dtype: int64``): onnx's ``TensorProto.DataType`` names in lower
case, and numpy's ``float32``/``float64`` for FLOAT/DOUBLE.

Written out rather than read from onnx at import, for two reasons: ``validate`` checks a spec's
``dtype`` without importing onnx, and the schema a spec is checked against (and the one
``patchspec schema`` writes) does not change with the onnx version installed. The numbers are the
ONNX standard's, which only ever adds types; ``tests/model/test_element_types.py`` fails when the
installed onnx knows a type this table lacks, or numbers one differently.
"""

from __future__ import annotations

ELEMENT_TYPES: dict[str, int] = {
    "float": 1,
    "uint8": 2,
    "int8": 3,
    "uint16": 4,
    "int16": 5,
    "int32": 6,
    "int64": 7,
    "string": 8,
    "bool": 9,
    "float16": 10,
    "double": 11,
    "uint32": 12,
    "uint64": 13,
    "complex64": 14,
    "complex128": 15,
    "bfloat16": 16,
    "float8e4m3fn": 17,
    "float8e4m3fnuz": 18,
    "float8e5m2": 19,
    "float8e5m2fnuz": 20,
    "uint4": 21,
    "int4": 22,
    "float4e2m1": 23,
    "float8e8m0": 24,
    "uint2": 25,
    "int2": 26,
    "float6e2m3": 27,
    "float6e3m2": 28,
    # numpy's names for FLOAT and DOUBLE
    "float32": 1,
    "float64": 11,
}
#: the one type a numeric value (a shape, a weight) cannot have
STRING = ELEMENT_TYPES["string"]

__all__ = ["ELEMENT_TYPES", "STRING"]
