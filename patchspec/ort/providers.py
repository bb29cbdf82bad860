"""Execution providers' arithmetic: the exact-math settings each one is verified with, and its options.

The ``run`` verifier measures the patch, not a provider's arithmetic (like with like): every
session on an accelerator gets that provider's exact-math settings (:data:`PROVIDERS`, the table
docs/providers.md shows with the source of each setting), then the spec's ``provider_options`` on
top, which may turn fast math back on (``use_tf32: 1``). :func:`provider_setup` says what a session
gets and whether its math is exact; :func:`provider_option_problems` checks a spec's options before
anything runs. Plain data: neither onnxruntime nor numpy is imported here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from patchspec.errors import close_matches, did_you_mean

CPU = "CPUExecutionProvider"
_SUFFIX = "ExecutionProvider"
_ORT_DOCS = "https://onnxruntime.ai/docs/execution-providers/"


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


@dataclass(frozen=True)
class ProviderMath:
    """What one provider's arithmetic is, and the settings that make it exact.

    ``exact``: options that turn its fast math off, as onnxruntime names them (empty: none known);
    ``has_exact_mode``: whether those settings give float32 arithmetic throughout; ``fast``: what
    the provider does by default or without them (said in the report); ``options``: every option
    onnxruntime documents for it (a misspelt one gets "did you mean"); ``source``: where the
    settings are documented.
    """

    exact: Mapping[str, str]
    has_exact_mode: bool
    fast: str
    options: tuple[str, ...]
    source: str


PROVIDERS: dict[str, ProviderMath] = {
    CPU: ProviderMath({}, True, "", (), _ORT_DOCS + "CPU-ExecutionProvider.html"),
    "CUDAExecutionProvider": ProviderMath(
        {"use_tf32": "0"},
        True,
        "TF32 matrix math (use_tf32 defaults to 1 on Ampere and later)",
        _names(
            "device_id has_user_compute_stream user_compute_stream gpu_mem_limit arena_extend_strategy "
            "cudnn_conv_algo_search do_copy_in_default_stream gpu_external_alloc gpu_external_free "
            "gpu_external_empty_cache cudnn_conv_use_max_workspace enable_cuda_graph "
            "cudnn_conv1d_pad_to_nc1d tunable_op_enable tunable_op_tuning_enable "
            "tunable_op_max_tuning_duration_ms enable_skip_layer_norm_strict_mode prefer_nhwc "
            "use_ep_level_unified_stream use_tf32"
        ),
        "onnxruntime/core/providers/cuda/cuda_execution_provider_info.cc; " + _ORT_DOCS + "CUDA-ExecutionProvider.html",
    ),
    "TensorrtExecutionProvider": ProviderMath(
        {"trt_fp16_enable": "0", "trt_int8_enable": "0"},
        False,
        "TF32 inner products (TensorRT's BuilderFlag.TF32, on by default; onnxruntime has no option to turn it off)",
        _names(
            "device_id has_user_compute_stream user_compute_stream trt_max_partition_iterations "
            "trt_min_subgraph_size trt_max_workspace_size trt_fp16_enable trt_bf16_enable trt_int8_enable "
            "trt_int8_calibration_table_name trt_int8_use_native_calibration_table trt_dla_enable "
            "trt_dla_core trt_dump_subgraphs trt_engine_cache_enable trt_engine_cache_path "
            "trt_engine_cache_prefix trt_engine_decryption_enable trt_engine_decryption_lib_path "
            "trt_force_sequential_engine_build trt_context_memory_sharing_enable "
            "trt_layer_norm_fp32_fallback trt_timing_cache_enable trt_timing_cache_path "
            "trt_force_timing_cache trt_detailed_build_log trt_build_heuristics_enable "
            "trt_sparsity_enable trt_builder_optimization_level trt_auxiliary_streams trt_tactic_sources "
            "trt_extra_plugin_lib_paths trt_profile_min_shapes trt_profile_max_shapes "
            "trt_profile_opt_shapes trt_cuda_graph_enable trt_dump_ep_context_model "
            "trt_ep_context_file_path trt_ep_context_embed_mode trt_weight_stripped_engine_enable "
            "trt_onnx_model_folder_path trt_engine_hw_compatible trt_op_types_to_exclude"
        ),
        "onnxruntime/core/providers/tensorrt/tensorrt_execution_provider_info.cc; "
        + _ORT_DOCS
        + "TensorRT-ExecutionProvider.html",
    ),
    "MIGraphXExecutionProvider": ProviderMath(
        {"migraphx_fp16_enable": "0", "migraphx_int8_enable": "0"},
        False,
        "the precision MIGraphX compiles float32 to (no option says it stays float32)",
        _names(
            "device_id migraphx_fp16_enable migraphx_fp8_enable migraphx_int8_enable "
            "migraphx_use_native_calibration_table migraphx_int8_calibration_table_name "
            "migraphx_save_compiled_model migraphx_save_model_path migraphx_load_compiled_model "
            "migraphx_load_model_path migraphx_exhaustive_tune migraphx_mem_limit "
            "migraphx_arena_extend_strategy"
        ),
        "onnxruntime_c_api.h OrtMIGraphXProviderOptions; " + _ORT_DOCS + "MIGraphX-ExecutionProvider.html",
    ),
    "ROCMExecutionProvider": ProviderMath(
        {},
        False,
        "MIOpen's and rocBLAS's own algorithm choice (no exact-math option)",
        _names(
            "device_id gpu_mem_limit arena_extend_strategy miopen_conv_exhaustive_search "
            "do_copy_in_default_stream tunable_op_enable tunable_op_tuning_enable "
            "tunable_op_max_tuning_duration_ms"
        ),
        "onnxruntime_c_api.h OrtROCMProviderOptions; " + _ORT_DOCS + "ROCm-ExecutionProvider.html",
    ),
    "OpenVINOExecutionProvider": ProviderMath(
        {"precision": "ACCURACY"},
        True,
        "FP16 inference on GPU and NPU (precision defaults to FP16 there; NPU has no FP32)",
        _names(
            "device_type precision num_of_threads cache_dir context load_config model_priority "
            "num_streams enable_opencl_throttling enable_qdq_optimizer disable_dynamic_shapes device_id "
            "enable_npu_fast_compile reshape_input layout"
        ),
        "onnxruntime/core/providers/openvino/openvino_provider_factory.cc (ParsePrecision); "
        + _ORT_DOCS
        + "OpenVINO-ExecutionProvider.html",
    ),
    "DmlExecutionProvider": ProviderMath(
        {},
        False,
        "DirectML's own kernels and metacommands (no exact-math option)",
        ("device_id", "performance_preference", "device_filter"),
        _ORT_DOCS + "DirectML-ExecutionProvider.html",
    ),
    "CoreMLExecutionProvider": ProviderMath(
        {"AllowLowPrecisionAccumulationOnGPU": "0"},
        False,
        "float16 on the Neural Engine, whatever the options",
        _names(
            "ModelFormat MLComputeUnits RequireStaticInputShapes EnableOnSubgraphs SpecializationStrategy "
            "ProfileComputePlan AllowLowPrecisionAccumulationOnGPU ModelCacheDirectory"
        ),
        _ORT_DOCS + "CoreML-ExecutionProvider.html",
    ),
    "QNNExecutionProvider": ProviderMath(
        {},
        False,
        "float16 (or quantized) arithmetic on the HTP",
        _names(
            "backend_type backend_path profiling_level profiling_file_path rpc_control_latency vtcm_mb "
            "htp_performance_mode qnn_saver_path qnn_context_priority "
            "htp_graph_finalization_optimization_mode soc_model htp_arch device_id "
            "enable_htp_fp16_precision offload_graph_io_quantization enable_htp_spill_fill_buffer "
            "enable_htp_shared_memory_allocator"
        ),
        _ORT_DOCS + "QNN-ExecutionProvider.html",
    ),
}
#: a provider the table does not know (a plugin execution provider, say): no exact mode is assumed
UNKNOWN = ProviderMath({}, False, "its own arithmetic (patchspec knows no exact-math setting for it)", (), "")


@dataclass(frozen=True)
class ProviderSetup:
    """What one provider's sessions get: its exact-math settings, then the spec's options on top.

    ``exact``: the provider has an exact mode and every one of its settings is in force (a spec that
    gives ``use_tf32: 1`` keeps fast math on). Every provider but the CPU has its floor measured
    and the tolerance widened by it (:mod:`patchspec.ort.run.floors`), exact or not.
    """

    provider: str
    options: dict[str, str] = field(default_factory=dict)
    given: dict[str, str] = field(default_factory=dict)
    exact: bool = True
    math: str = "float32"
    #: the spec's options that keep fast math on (``{"use_tf32": "1"}``)
    fast_options: dict[str, str] = field(default_factory=dict)

    @property
    def measures_floor(self) -> bool:
        return self.provider != CPU

    def options_text(self) -> str:
        """``use_tf32=0, device_id=1`` or ``no options``."""
        return ", ".join(f"{k}={v}" for k, v in self.options.items()) or "no options"

    def to_json(self) -> dict[str, Any]:
        return {"provider_options": dict(self.options), "given_options": dict(self.given), "exact_math": self.exact}


def provider_setup(provider: str, given: Mapping[str, Any] | None = None) -> ProviderSetup:
    """The options a session on ``provider`` gets and what its arithmetic is, from the spec's
    ``provider_options`` for it (``given``; values as YAML gives them)."""
    table = PROVIDERS.get(provider, UNKNOWN)
    spec = {str(k): option_value(v) for k, v in (given or {}).items() if v is not None}
    dropped = [str(k) for k, v in (given or {}).items() if v is None]  # null: not given to onnxruntime at all
    options = {k: v for k, v in {**table.exact, **spec}.items() if k not in dropped}
    fast = {k: v for k, v in spec.items() if k in table.exact and v != table.exact[k]}
    fast.update({k: "null" for k in dropped if k in table.exact})
    kept = [f"{k} {v}" for k, v in fast.items()]
    exact = table.has_exact_mode and not kept
    if provider == CPU:
        math = "float32"
    elif exact:
        settings = ", ".join(f"{k} {v}" for k, v in table.exact.items())
        math = f"float32, exact math ({settings})"
    elif kept:
        math = f"fast math kept on ({', '.join(kept)}): {table.fast}"
    else:
        math = f"no exact mode: {table.fast}"
    return ProviderSetup(provider, options, spec, exact, math, fast)


def option_value(value: Any) -> str:
    """A YAML value as onnxruntime's provider options take it: true/false are 1/0, the rest as written."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def provider_did_you_mean(name: str, known: list[str]) -> str:
    """`` (did you mean 'CUDAExecutionProvider'?)`` for a misspelt provider name, else an empty string.
    Names in onnxruntime's form are told apart by what comes before ``ExecutionProvider``, so a plugin
    execution provider's own name (``MyNpuExecutionProvider``) is no misspelling of a built-in one."""
    if not name.endswith(_SUFFIX):
        return did_you_mean(name, known)
    stems = {provider.removesuffix(_SUFFIX).lower(): provider for provider in known}
    found = close_matches(name.removesuffix(_SUFFIX).lower(), stems)
    return " (did you mean " + " or ".join(repr(stems[f]) for f in found) + "?)" if found else ""


def provider_option_problems(
    provider_options: Mapping[str, Mapping[str, Any]], providers: list[str]
) -> Iterator[tuple[tuple[Any, ...], str]]:
    """(key path, message) for each provider not listed in ``providers`` and each option that looks
    like a misspelling of one onnxruntime documents for that provider. An option that looks like
    none (a newer onnxruntime's, a plugin provider's) is passed on: onnxruntime judges it."""
    for provider, options in provider_options.items():
        key: tuple[Any, ...] = ("provider_options", provider)
        if provider not in providers:
            yield (
                key,
                (
                    f"provider_options names '{provider}', which is not in providers "
                    f"({', '.join(providers)}){provider_did_you_mean(provider, providers)}"
                ),
            )
            continue
        known = PROVIDERS.get(provider, UNKNOWN).options
        for option in options:
            if option not in known and close_matches(option, known):
                yield (*key, option), f"unknown {provider} option '{option}'{did_you_mean(option, known)}"


__all__ = [
    "CPU",
    "PROVIDERS",
    "UNKNOWN",
    "ProviderMath",
    "ProviderSetup",
    "provider_did_you_mean",
    "provider_option_problems",
    "provider_setup",
]
