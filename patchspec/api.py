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
- shape evaluation at concrete sizes (``ShapeEvaluator``), which never reads weights;
- external data: ``iter_tensors``, ``is_external``, ``read_tensor``, and ``OUTPUT_LAYOUT``, the
  state key that tells the writer where tensor bytes go;
- ONNX Runtime: sessions (bounded in time), feeds (bounded in size) and output comparison for
  verifiers that run models, the run verifier's whole work (``run_verification``), and the shape
  lint (``lint_model``).
"""

from __future__ import annotations

from patchspec.errors import UsageError, close_matches, did_you_mean
from patchspec.model.data_writer import DIGEST_FIELD, OUTPUT_LAYOUT, Layout, refuse_inline_overflow
from patchspec.model.external_data import ORT_MEMORY_MARKER, is_external, iter_tensors, read_tensor
from patchspec.model.graph import (
    ELEMENT_TYPES,
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
    uses_of,
    walk_nodes,
)
from patchspec.model.selectors import SELECTOR_SCHEMA, check_selector, select_nodes
from patchspec.ort.comparison import (
    DEFAULT_ATOL,
    DEFAULT_RTOL,
    DTYPE_TOLERANCES,
    PRECISION,
    OutputComparison,
    compare_output,
    nonfinite_problems,
)
from patchspec.ort.feeds import (
    CASE_INPUT_SCHEMA,
    DEFAULT_MAX_ELEMENTS,
    DTYPES,
    FILLS,
    case_fit_problems,
    case_input_problems,
    feed_shape_problems,
    format_shape,
    make_feeds,
    shape_problems,
    unlisted_input_problems,
)
from patchspec.ort.inspection import lint_model
from patchspec.ort.run_cases import run_verification
from patchspec.ort.sessions import (
    DEFAULT_PROVIDERS,
    DEFAULT_TIMEOUT,
    OPTIMIZATION_LEVELS,
    BatchSplit,
    ProviderUnusable,
    RunFailure,
    Session,
    TensorDecl,
    provider_skip_reasons,
)
from patchspec.shapes import expressions
from patchspec.shapes.annotations import (
    PINNED_DIMS,
    Dim,
    Pins,
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
from patchspec.shapes.batch_axes import BatchAxes, BatchAxesError, batch_axes, fed_inputs
from patchspec.shapes.compiler import ShapeCompileError, ShapeCompiler, TensorIndex
from patchspec.shapes.evaluate import BROADCASTING, Known, ShapeEvaluator
from patchspec.shapes.values import InputValues, input_values

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
    "uses_of",
    "walk_nodes",
    # node selection
    "SELECTOR_SCHEMA",
    "check_selector",
    "select_nodes",
    # shape annotations
    "PINNED_DIMS",
    "Dim",
    "Pins",
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
    # what values an integer input needs, where the graph says
    "InputValues",
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
    # ONNX Runtime
    "CASE_INPUT_SCHEMA",
    "DEFAULT_ATOL",
    "DEFAULT_MAX_ELEMENTS",
    "DEFAULT_PROVIDERS",
    "DEFAULT_RTOL",
    "DEFAULT_TIMEOUT",
    "DTYPE_TOLERANCES",
    "DTYPES",
    "FILLS",
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
    "provider_skip_reasons",
    "run_verification",
    "shape_problems",
    "unlisted_input_problems",
]
