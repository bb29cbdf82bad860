"""What a type checker sees of :mod:`patchspec.api`, and the one list of its public names.

Each name is written here once, as ``NAME as NAME`` under the module that defines it (the form a stub
re-exports). ``patchspec/api.py`` reads this file when it is imported: ``__all__`` is these names in
this order, and each is imported from its module on first use. A name listed in ``DEPRECATED`` (in
``api.py``) is not here: it still imports, with a ``DeprecationWarning``, until 2.0.
"""

# messages
from patchspec.errors import UsageError as UsageError, close_matches as close_matches, did_you_mean as did_you_mean

# graphs
from patchspec.model.element_types import ELEMENT_TYPES as ELEMENT_TYPES
from patchspec.model.functions import inline_local_functions as inline_local_functions
from patchspec.model.graph import (
    Namer as Namer,
    all_graphs as all_graphs,
    all_names as all_names,
    bodies as bodies,
    constant_value as constant_value,
    default_opset as default_opset,
    fresh_name as fresh_name,
    sort_nodes as sort_nodes,
    subgraphs as subgraphs,
    use_counts as use_counts,
)

# node selection
from patchspec.model.selector_schema import SELECTOR_SCHEMA as SELECTOR_SCHEMA, check_selector as check_selector
from patchspec.model.selectors import select_nodes as select_nodes

# shape annotations
from patchspec.shapes.annotations import (
    PINNED_DIMS as PINNED_DIMS,
    all_annotations as all_annotations,
    apply_pins as apply_pins,
    dim_params as dim_params,
    format_dims as format_dims,
    has_shape as has_shape,
    read_dim as read_dim,
    read_dims as read_dims,
    rederive_shapes as rederive_shapes,
    shape_dims as shape_dims,
    write_dim as write_dim,
)

# the batch's axes
from patchspec.shapes.batch.axes import (
    BatchAxes as BatchAxes,
    BatchAxesError as BatchAxesError,
    batch_axes as batch_axes,
    fed_inputs as fed_inputs,
)

# following the batch (set_batch's core) and applying what it finds
from patchspec.shapes.batch.trace import BatchTrace as BatchTrace, Rewrite as Rewrite, Undecided as Undecided
from patchspec.shapes.batch.tracker import trace_batch as trace_batch
from patchspec.shapes.batch.as_is import not_as_exported as not_as_exported
from patchspec.shapes.batch.rewrite import (
    rewrite_batch_constants as rewrite_batch_constants,
    explicit_squeezes as explicit_squeezes,
    keep_flattened_batch as keep_flattened_batch,
    declare_from_trace as declare_from_trace,
)
from patchspec.shapes.batch.transposes import transpose_batch_reshapes as transpose_batch_reshapes
from patchspec.shapes.batch.joins import tile_inputs as tile_inputs
from patchspec.shapes.batch.computed import compute_shapes as compute_shapes
from patchspec.shapes.batch.counts import count_samples as count_samples

# patches to suggest, as data and as the lines to paste into a spec
from patchspec.shapes.spec_lines import FlowValue as FlowValue, SpecFix as SpecFix, spec_lines as spec_lines

# shape expressions and their compiler
from patchspec.shapes import expressions as expressions
from patchspec.shapes.compiler import (
    ShapeCompileError as ShapeCompileError,
    ShapeCompiler as ShapeCompiler,
    TensorIndex as TensorIndex,
)

# shape evaluation
from patchspec.shapes.evaluate import ShapeEvaluator as ShapeEvaluator
from patchspec.shapes.known import Known as Known

# external data
from patchspec.model.data_names import DIGEST_FIELD as DIGEST_FIELD, ORT_MEMORY_MARKER as ORT_MEMORY_MARKER
from patchspec.model.data_writer import (
    OUTPUT_LAYOUT as OUTPUT_LAYOUT,
    Layout as Layout,
    refuse_inline_overflow as refuse_inline_overflow,
)
from patchspec.model.external_data import (
    is_external as is_external,
    iter_tensors as iter_tensors,
    read_tensor as read_tensor,
)

# limits a spec cannot lift (the caller's --limit)
from patchspec.limits import current_limits as current_limits

# ONNX Runtime
from patchspec.ort.run.case_inputs import (
    CASE_INPUT_SCHEMA as CASE_INPUT_SCHEMA,
    DTYPES as DTYPES,
    case_input_problems as case_input_problems,
    value_shape as value_shape,
)
from patchspec.ort.settings import (
    DEFAULT_ATOL as DEFAULT_ATOL,
    DEFAULT_MAX_ELEMENTS as DEFAULT_MAX_ELEMENTS,
    DEFAULT_PROVIDERS as DEFAULT_PROVIDERS,
    DEFAULT_RTOL as DEFAULT_RTOL,
    DEFAULT_TIMEOUT as DEFAULT_TIMEOUT,
    DTYPE_TOLERANCES as DTYPE_TOLERANCES,
    OPTIMIZATION_LEVELS as OPTIMIZATION_LEVELS,
    PRECISION as PRECISION,
)
from patchspec.ort.sessions import Session as Session
from patchspec.ort.run_failure import RunFailure as RunFailure
from patchspec.ort.run.case_fit import (
    case_fit_problems as case_fit_problems,
    unlisted_input_problems as unlisted_input_problems,
)
from patchspec.ort.lint.probe import lint_model as lint_model
from patchspec.ort.providers import (
    provider_did_you_mean as provider_did_you_mean,
    provider_option_problems as provider_option_problems,
)
from patchspec.ort.run.cases import run_verification as run_verification

DEPRECATED: dict[str, tuple[str, str]]
