"""The written-out table of element types against the installed onnx's."""

from __future__ import annotations

import onnx

from patchspec.model.element_types import ELEMENT_TYPES, STRING


def test_every_type_the_installed_onnx_knows_is_in_the_table_with_its_number():
    known = {name.lower(): value for name, value in onnx.TensorProto.DataType.items() if value}
    missing = {name: value for name, value in known.items() if ELEMENT_TYPES.get(name) != value}
    assert not missing, f"add these to patchspec/model/element_types.py: {missing}"


def test_the_table_adds_only_numpys_names_and_types_newer_than_the_installed_onnx():
    known = dict(onnx.TensorProto.DataType.items())
    newest = max(known.values())
    extra = {n: v for n, v in ELEMENT_TYPES.items() if n.upper() not in known}
    assert {n: v for n, v in extra.items() if v <= newest} == {"float32": 1, "float64": 11}
    assert onnx.TensorProto.STRING == STRING
