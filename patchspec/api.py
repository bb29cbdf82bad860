"""The helpers a plugin may use, besides the contract that ``patchspec`` itself exports.

Everything here is public: a name listed in ``__all__`` keeps its meaning within a major version
(new keyword arguments may be added; see docs/api.md). The names are written once, in ``api.pyi``
beside this module: type checkers read it, and this module builds ``__all__`` and the table of where
each name lives from it when it is imported. Every built-in plugin imports from
``patchspec`` and ``patchspec.api`` only (``tests/architecture/test_public_api.py`` checks it), so
any of them is an example a third party can copy. Any other ``patchspec.*`` module is internal and
may change in any release.

Grouped by what they work on:

- messages: ``did_you_mean``, ``close_matches``, ``UsageError``;
- graphs: walking graphs and bodies, scopes, constants, names (``walk_nodes``, ``ScopeIndex``,
  ``fresh_name``, ...);
- node selection: ``SELECTOR_SCHEMA`` (embed it in a params schema), ``check_selector``,
  ``select_nodes``;
- shape annotations: ``read_dims``, ``write_dim``, ``rederive_shapes`` and the ``PINNED_DIMS``
  state key that keeps dims named by an earlier patch;
- shape expressions and their compiler (computed shapes, as ``replace_initializer`` writes them);
- following the batch: ``trace_batch`` (set_batch's core) and the functions that apply its
  ``BatchTrace`` to a model; ``SpecFix``/``spec_lines`` for patches a plugin suggests;
- shape evaluation at concrete sizes (``ShapeEvaluator``), which never reads weights;
- external data: ``iter_tensors``, ``is_external``, ``read_tensor``, and ``OUTPUT_LAYOUT``, the
  state key that tells the writer where tensor bytes go;
- ONNX Runtime: sessions (bounded in time) and case inputs (bounded in size) for verifiers that run
  models, the run verifier's whole work (``run_verification``), and the shape lint (``lint_model``).
"""

from __future__ import annotations

import importlib
import re
import warnings
from pathlib import Path
from typing import Any

#: ``from MODULE import (A as A, b as b)`` in api.pyi: one statement per module a name lives in
_STATEMENT = re.compile(r"^from ([\w.]+) import (\([^)]*\)|[^\n]*)", re.MULTILINE)


def _public_names() -> dict[str, str]:
    """Each public name -> the module that defines it, in api.pyi's order (read as text: no ``ast``,
    nothing imported, so ``import patchspec.api`` stays free)."""
    stub = Path(__file__).with_suffix(".pyi").read_text(encoding="utf-8")
    homes: dict[str, str] = {}
    for module, names in _STATEMENT.findall(stub):
        for item in re.sub(r"#[^\n]*", "", names).strip("()").split(","):
            name, _, alias = (part.strip() for part in item.strip().partition(" as "))
            if name:
                homes[alias or name] = module
    return homes


#: each public name -> the module that defines it. ``import patchspec.api`` imports none of them (PEP 562):
#: a plugin that takes only light names at module level (schemas, their checks, defaults) imports
#: neither onnx nor numpy until it patches a model, so ``validate`` reads its schema cheaply
_HOME = _public_names()
__all__ = list(_HOME)  # built from api.pyi, which type checkers read

_RUN_INSTEAD = "run_verification(params, context), the run verifier's whole work, or a 'run' step in the spec"
#: names no plugin and no example used, with what to use instead; they still import, with a
#: DeprecationWarning, until 2.0 (docs/api.md, "Deprecated in 1.2" and "Deprecated in 1.5")
_DEPRECATED_IN_1_2 = {
    "uses_of": ("patchspec.model.graph", "use_counts(model)[name], counted once for every tensor"),
    "walk_nodes": ("patchspec.model.graph", "select_nodes(model, selector), or all_graphs(graph) and each .node"),
    "Dim": ("patchspec.shapes.annotations", "int | str | None in your annotations"),
    "Pins": ("patchspec.shapes.annotations", "dict[str, dict[int, int | str]] in your annotations"),
    "InputValues": ("patchspec.shapes.values", "the attributes of what input_values returns (item, why, flag)"),
    "FILLS": ("patchspec.ort.run.case_inputs", "case_input_problems(item), which checks a case's fill"),
}
_DEPRECATED_IN_1_5 = {
    "input_values": ("patchspec.shapes.values", "patchspec init, which writes these values into its run case"),
    "BatchSplit": ("patchspec.ort.sessions", _RUN_INSTEAD + " with compare: {split_batch: ...}"),
    "OutputComparison": ("patchspec.ort.run.comparison", _RUN_INSTEAD),
    "compare_output": ("patchspec.ort.run.comparison", _RUN_INSTEAD),
    "feed_shape_problems": ("patchspec.ort.run.feeds", _RUN_INSTEAD),
    "shape_problems": ("patchspec.ort.run.feeds", _RUN_INSTEAD),
    "nonfinite_problems": ("patchspec.ort.run.comparison", _RUN_INSTEAD),
    "make_feeds": ("patchspec.ort.run.feeds", _RUN_INSTEAD + " with cases: [{inputs: {...}}]"),
    "provider_skip_reasons": ("patchspec.ort.sessions", _RUN_INSTEAD + ", which skips a provider with the reason"),
    "ProviderUnusable": ("patchspec.ort.sessions", "RunFailure, which a provider that cannot be used raises too"),
    "TensorDecl": ("patchspec.ort.sessions", "the .name, .shape and .dtype of Session(...).inputs and .outputs"),
    "format_shape": ("patchspec.ort.run.feeds", "format_dims(dims) for an annotation, or str(list(shape))"),
    "NodeSite": ("patchspec.model.graph", "select_nodes(model, selector), whose results carry .node"),
    "ScopeIndex": ("patchspec.model.graph", "constant_value(graph, name) on the graph that holds the constant"),
    "typed": ("patchspec.shapes.annotations", "has_shape(info), or info.type.tensor_type.elem_type != 0"),
    "BROADCASTING": ("patchspec.shapes.evaluate", "a set of the elementwise op types your plugin follows"),
}
DEPRECATED = {**_DEPRECATED_IN_1_2, **_DEPRECATED_IN_1_5}
#: names that 1.0 had under another name: they still work, with a DeprecationWarning, until 2.0
RENAMED = {"annotations": "all_annotations"}  # it shadowed `from __future__ import annotations`
# the __future__ feature's name, which `from patchspec.api import annotations` found instead
del annotations


def __getattr__(name: str) -> Any:
    """``patchspec.api.X``: the public name imported from its module on first use, then kept here; a
    deprecated name still imports, with a warning that says what replaces it."""
    if name in _HOME:
        value = _imported(_HOME[name], name)
        globals()[name] = value
        return value
    if name in RENAMED:
        warnings.warn(
            f"patchspec.api.{name} was renamed {RENAMED[name]} (its plugin API 1.0 name goes in 2.0); use {RENAMED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return __getattr__(RENAMED[name])
    if name not in DEPRECATED:
        raise AttributeError(f"module 'patchspec.api' has no attribute {name!r}")
    module_name, instead = DEPRECATED[name]
    since = "1.2" if name in _DEPRECATED_IN_1_2 else "1.5"
    warnings.warn(
        f"patchspec.api.{name} is deprecated since plugin API {since} and goes in 2.0; use {instead}",
        DeprecationWarning,
        stacklevel=2,
    )
    return _imported(module_name, name)


def _imported(module_name: str, name: str) -> Any:
    """``name`` from ``module_name``: an attribute, or a submodule (``expressions``)."""
    module = importlib.import_module(module_name)
    if hasattr(module, name):
        return getattr(module, name)
    return importlib.import_module(f"{module_name}.{name}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
