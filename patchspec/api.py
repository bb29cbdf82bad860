"""The helpers a plugin may use, besides the contract that ``patchspec`` itself exports.

Everything here is public: a name listed in ``__all__`` keeps its meaning within a major version
(new keyword arguments may be added; see docs/api.md). Every built-in plugin imports from
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
- ONNX Runtime: sessions (bounded in time), feeds (bounded in size) and output comparison for
  verifiers that run models, the run verifier's whole work (``run_verification``), and the shape
  lint (``lint_model``).
"""

from __future__ import annotations

import importlib
import warnings
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees; at run time each name is imported on first use (below)
    from patchspec.errors import UsageError, close_matches, did_you_mean
    from patchspec.limits import current_limits
    from patchspec.model.data_names import DIGEST_FIELD, ORT_MEMORY_MARKER
    from patchspec.model.data_writer import OUTPUT_LAYOUT, Layout, refuse_inline_overflow
    from patchspec.model.element_types import ELEMENT_TYPES
    from patchspec.model.external_data import is_external, iter_tensors, read_tensor
    from patchspec.model.graph import (
        Namer,
        NodeSite,
        ScopeIndex,
        all_graphs,
        all_names,
        bodies,
        constant_value,
        default_opset,
        fresh_name,
        subgraphs,
        use_counts,
    )
    from patchspec.model.selector_schema import SELECTOR_SCHEMA, check_selector
    from patchspec.model.selectors import select_nodes
    from patchspec.ort.case_fit import case_fit_problems, unlisted_input_problems
    from patchspec.ort.case_inputs import (
        CASE_INPUT_SCHEMA,
        DEFAULT_MAX_ELEMENTS,
        DTYPES,
        case_input_problems,
        value_shape,
    )
    from patchspec.ort.comparison import OutputComparison, compare_output, nonfinite_problems
    from patchspec.ort.feeds import feed_shape_problems, format_shape, make_feeds, shape_problems
    from patchspec.ort.inspection import lint_model
    from patchspec.ort.providers import provider_did_you_mean, provider_option_problems
    from patchspec.ort.run_cases import run_verification
    from patchspec.ort.sessions import (
        BatchSplit,
        ProviderUnusable,
        RunFailure,
        Session,
        TensorDecl,
        provider_skip_reasons,
    )
    from patchspec.ort.settings import (
        DEFAULT_ATOL,
        DEFAULT_PROVIDERS,
        DEFAULT_RTOL,
        DEFAULT_TIMEOUT,
        DTYPE_TOLERANCES,
        OPTIMIZATION_LEVELS,
        PRECISION,
    )
    from patchspec.shapes import expressions
    from patchspec.shapes.annotations import (
        PINNED_DIMS,
        all_annotations,
        apply_pins,
        dim_params,
        format_dims,
        has_shape,
        read_dim,
        read_dims,
        rederive_shapes,
        shape_dims,
        typed,
        write_dim,
    )
    from patchspec.shapes.batch_as_is import not_as_exported
    from patchspec.shapes.batch_axes import BatchAxes, BatchAxesError, batch_axes, fed_inputs
    from patchspec.shapes.batch_computed import compute_shapes
    from patchspec.shapes.batch_joins import tile_inputs
    from patchspec.shapes.batch_rewrite import declare_from_trace, explicit_squeezes, rewrite_batch_constants
    from patchspec.shapes.batch_trace import BatchTrace, Rewrite, Undecided
    from patchspec.shapes.batch_tracker import trace_batch
    from patchspec.shapes.compiler import ShapeCompileError, ShapeCompiler, TensorIndex
    from patchspec.shapes.evaluate import BROADCASTING, Known, ShapeEvaluator
    from patchspec.shapes.spec_lines import FlowValue, SpecFix, spec_lines
    from patchspec.shapes.values import input_values

#: each public name -> the module that defines it. ``import patchspec.api`` imports none of them (PEP 562):
#: a plugin that takes only light names at module level (schemas, their checks, defaults) imports
#: neither onnx nor numpy until it patches a model, so ``validate`` reads its schema cheaply
_HOME = {
    **dict.fromkeys(["UsageError", "close_matches", "did_you_mean"], "patchspec.errors"),
    **dict.fromkeys(["Layout", "OUTPUT_LAYOUT", "refuse_inline_overflow"], "patchspec.model.data_writer"),
    **dict.fromkeys(["DIGEST_FIELD", "ORT_MEMORY_MARKER"], "patchspec.model.data_names"),
    **dict.fromkeys(["ELEMENT_TYPES"], "patchspec.model.element_types"),
    **dict.fromkeys(["is_external", "iter_tensors", "read_tensor"], "patchspec.model.external_data"),
    **dict.fromkeys(
        [
            "Namer",
            "NodeSite",
            "ScopeIndex",
            "all_graphs",
            "all_names",
            "bodies",
            "constant_value",
            "default_opset",
            "fresh_name",
            "subgraphs",
            "use_counts",
        ],
        "patchspec.model.graph",
    ),
    **dict.fromkeys(["current_limits"], "patchspec.limits"),
    **dict.fromkeys(["SELECTOR_SCHEMA", "check_selector"], "patchspec.model.selector_schema"),
    **dict.fromkeys(["select_nodes"], "patchspec.model.selectors"),
    **dict.fromkeys(["case_fit_problems", "unlisted_input_problems"], "patchspec.ort.case_fit"),
    **dict.fromkeys(
        ["CASE_INPUT_SCHEMA", "DEFAULT_MAX_ELEMENTS", "DTYPES", "case_input_problems", "value_shape"],
        "patchspec.ort.case_inputs",
    ),
    **dict.fromkeys(["OutputComparison", "compare_output", "nonfinite_problems"], "patchspec.ort.comparison"),
    **dict.fromkeys(["feed_shape_problems", "format_shape", "make_feeds", "shape_problems"], "patchspec.ort.feeds"),
    **dict.fromkeys(["lint_model"], "patchspec.ort.inspection"),
    **dict.fromkeys(["provider_did_you_mean", "provider_option_problems"], "patchspec.ort.providers"),
    **dict.fromkeys(["run_verification"], "patchspec.ort.run_cases"),
    **dict.fromkeys(
        ["BatchSplit", "ProviderUnusable", "RunFailure", "Session", "TensorDecl", "provider_skip_reasons"],
        "patchspec.ort.sessions",
    ),
    **dict.fromkeys(
        [
            "DEFAULT_ATOL",
            "DEFAULT_PROVIDERS",
            "DEFAULT_RTOL",
            "DEFAULT_TIMEOUT",
            "DTYPE_TOLERANCES",
            "OPTIMIZATION_LEVELS",
            "PRECISION",
        ],
        "patchspec.ort.settings",
    ),
    **dict.fromkeys(
        [
            "PINNED_DIMS",
            "all_annotations",
            "apply_pins",
            "dim_params",
            "format_dims",
            "has_shape",
            "read_dim",
            "read_dims",
            "rederive_shapes",
            "shape_dims",
            "typed",
            "write_dim",
        ],
        "patchspec.shapes.annotations",
    ),
    **dict.fromkeys(["BatchAxes", "BatchAxesError", "batch_axes", "fed_inputs"], "patchspec.shapes.batch_axes"),
    **dict.fromkeys(
        ["declare_from_trace", "explicit_squeezes", "rewrite_batch_constants"], "patchspec.shapes.batch_rewrite"
    ),
    **dict.fromkeys(["BatchTrace", "Rewrite", "Undecided"], "patchspec.shapes.batch_trace"),
    **dict.fromkeys(["trace_batch"], "patchspec.shapes.batch_tracker"),
    **dict.fromkeys(["not_as_exported"], "patchspec.shapes.batch_as_is"),
    **dict.fromkeys(["tile_inputs"], "patchspec.shapes.batch_joins"),
    **dict.fromkeys(["compute_shapes"], "patchspec.shapes.batch_computed"),
    **dict.fromkeys(["ShapeCompileError", "ShapeCompiler", "TensorIndex"], "patchspec.shapes.compiler"),
    **dict.fromkeys(["BROADCASTING", "Known", "ShapeEvaluator"], "patchspec.shapes.evaluate"),
    **dict.fromkeys(["FlowValue", "SpecFix", "spec_lines"], "patchspec.shapes.spec_lines"),
    **dict.fromkeys(["input_values"], "patchspec.shapes.values"),
    "expressions": "patchspec.shapes.expressions",
}
#: the public names that are modules themselves
_MODULES = {"expressions"}

__all__ = [
    # messages
    "UsageError",
    "close_matches",
    "did_you_mean",
    # graphs
    "ELEMENT_TYPES",
    "Namer",
    "NodeSite",
    "ScopeIndex",
    "all_graphs",
    "all_names",
    "bodies",
    "constant_value",
    "default_opset",
    "fresh_name",
    "subgraphs",
    "use_counts",
    # node selection
    "SELECTOR_SCHEMA",
    "check_selector",
    "select_nodes",
    # shape annotations
    "PINNED_DIMS",
    "all_annotations",
    "apply_pins",
    "dim_params",
    "format_dims",
    "has_shape",
    "read_dim",
    "read_dims",
    "rederive_shapes",
    "shape_dims",
    "typed",
    "write_dim",
    # the batch's axes
    "BatchAxes",
    "BatchAxesError",
    "batch_axes",
    "fed_inputs",
    # following the batch (set_batch's core) and applying what it finds
    "BatchTrace",
    "Rewrite",
    "Undecided",
    "trace_batch",
    "not_as_exported",
    "rewrite_batch_constants",
    "tile_inputs",
    "compute_shapes",
    "explicit_squeezes",
    "declare_from_trace",
    # patches to suggest, as data and as the lines to paste into a spec
    "FlowValue",
    "SpecFix",
    "spec_lines",
    # what values an integer input needs, where the graph says
    "input_values",
    # shape expressions and their compiler
    "expressions",
    "ShapeCompileError",
    "ShapeCompiler",
    "TensorIndex",
    # shape evaluation
    "BROADCASTING",
    "Known",
    "ShapeEvaluator",
    # external data
    "DIGEST_FIELD",
    "ORT_MEMORY_MARKER",
    "OUTPUT_LAYOUT",
    "Layout",
    "is_external",
    "iter_tensors",
    "read_tensor",
    "refuse_inline_overflow",
    # limits a spec cannot lift (the caller's --limit)
    "current_limits",
    # ONNX Runtime
    "CASE_INPUT_SCHEMA",
    "DEFAULT_ATOL",
    "DEFAULT_MAX_ELEMENTS",
    "DEFAULT_PROVIDERS",
    "DEFAULT_RTOL",
    "DEFAULT_TIMEOUT",
    "DTYPE_TOLERANCES",
    "DTYPES",
    "OPTIMIZATION_LEVELS",
    "PRECISION",
    "BatchSplit",
    "OutputComparison",
    "ProviderUnusable",
    "RunFailure",
    "Session",
    "TensorDecl",
    "case_fit_problems",
    "case_input_problems",
    "compare_output",
    "feed_shape_problems",
    "format_shape",
    "lint_model",
    "make_feeds",
    "nonfinite_problems",
    "provider_did_you_mean",
    "provider_option_problems",
    "provider_skip_reasons",
    "run_verification",
    "shape_problems",
    "unlisted_input_problems",
    "value_shape",
]

#: names 1.2 removes from the API (no plugin used them), with what to use instead; they still import,
#: with a DeprecationWarning, until 2.0 (docs/api.md, "Deprecated in 1.2")
DEPRECATED = {
    "uses_of": ("patchspec.model.graph", "use_counts(model)[name], counted once for every tensor"),
    "walk_nodes": ("patchspec.model.graph", "select_nodes(model, selector), or all_graphs(graph) and each .node"),
    "Dim": ("patchspec.shapes.annotations", "int | str | None in your annotations"),
    "Pins": ("patchspec.shapes.annotations", "dict[str, dict[int, int | str]] in your annotations"),
    "InputValues": ("patchspec.shapes.values", "the attributes of what input_values returns (item, why, flag)"),
    "FILLS": ("patchspec.ort.feeds", "case_input_problems(item), which checks a case's fill"),
}


def __getattr__(name: str) -> Any:
    """``patchspec.api.X``: the public name imported from its module on first use, then kept here; a
    deprecated name still imports, with a warning that says what replaces it."""
    if name in _HOME:
        module = importlib.import_module(_HOME[name])
        value = module if name in _MODULES else getattr(module, name)
        globals()[name] = value
        return value
    if name not in DEPRECATED:
        raise AttributeError(f"module 'patchspec.api' has no attribute {name!r}")
    module_name, instead = DEPRECATED[name]
    warnings.warn(
        f"patchspec.api.{name} is deprecated since plugin API 1.2 and goes in 2.0; use {instead}",
        DeprecationWarning,
        stacklevel=2,
    )
    return getattr(importlib.import_module(module_name), name)


def __dir__() -> list[str]:
    return sorted({*globals(), *_HOME})
