"""The ``external_data`` patch type: how the output stores its weights.

It changes nothing in the graph; it tells the writer where tensor bytes go (``OUTPUT_LAYOUT`` in the run's ``context.state``).
The writer copies them from the input's data files in bounded chunks, aligned, into a new file.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath, PureWindowsPath
from typing import Annotated, Any, TypedDict

from patchspec import Param, ParamProblem, PatchContext, PatchResult, PatchType, api, hookimpl

if sys.version_info >= (3, 11):
    from typing import NotRequired
else:  # Python 3.10
    from typing_extensions import NotRequired

MAX_ALIGN = 1 << 30


class ExternalDataParams(TypedDict):
    location: NotRequired[
        Annotated[
            str,
            Param(
                "Data file name, next to the output model (default: '<output file name>.data'); "
                "'{digest}' in it becomes the start of the output's digest (e.g. '{digest}.weights'), "
                "so a new build never shares a data file name with an old one",
                minLength=1,
            ),
        ]
    ]
    size_threshold: Annotated[
        int,
        Param("Tensors smaller than this many bytes stay inline in the .onnx (default 1024).", default=1024, minimum=0),
    ]
    align: Annotated[
        int,
        Param(
            "Byte alignment of each tensor in the data file, a power of two (default 4096; "
            "65536 for memory mapping on Windows).",
            default=4096,
            minimum=1,
            maximum=MAX_ALIGN,
        ),
    ]
    inline: NotRequired[
        Annotated[bool, Param("Store every tensor inside the .onnx (refused past protobuf's 2 GiB limit).")]
    ]
    checksum: Annotated[
        bool, Param("Write ONNX's per-tensor 'checksum' entries (sha1 of each tensor's bytes).", default=False)
    ]


class ExternalDataPatch(PatchType[ExternalDataParams]):
    name = "external_data"
    description = "How the output stores its weights: a data file next to it (aligned), or everything inline."

    def check_params(self, params: ExternalDataParams) -> Iterator[ParamProblem]:
        limits = api.current_limits()
        align = params.get("align")
        if isinstance(align, int) and align >= 1 and align & (align - 1):
            yield ("align",), f"align must be a power of two (4096, 65536, ...), got {align}"
        elif isinstance(align, int) and align > limits.align:  # a spec cannot pad weights into gigabytes
            yield ("align",), f"align {align:,} is over {limits.describe('align')}"
        location = params.get("location")
        if isinstance(location, str):
            problem = location_problem(location)
            if problem:
                yield ("location",), problem
        if params.get("inline") and ({"location", "size_threshold", "align", "checksum"} & set(params)):
            keys = sorted({"location", "size_threshold", "align", "checksum"} & set(params))
            yield ("inline",), f"'inline: true' stores no data file; remove {', '.join(keys)} or 'inline'"

    def apply(self, model: Any, params: ExternalDataParams, context: PatchContext) -> PatchResult:
        if params.get("inline"):
            api.refuse_inline_overflow(model, context.where(("inline",)))
            context.state.set(api.OUTPUT_LAYOUT, api.Layout(location=None))
            moved = sum(1 for t in api.iter_tensors(model.graph) if api.is_external(t))
            return PatchResult(False, f"output layout: every tensor inline ({moved} read from data files)")
        layout = api.Layout(
            location=params.get("location", ""),  # no default: the output's name decides it
            size_threshold=params["size_threshold"],
            align=params["align"],
            checksum=params["checksum"],
        )
        context.state.set(api.OUTPUT_LAYOUT, layout)
        name = layout.location or "<output file name>.data"
        extra = ", with sha1 checksums" if layout.checksum else ""
        summary = f"output layout: tensors of {layout.size_threshold} bytes or more in {name}, aligned to {layout.align}{extra}"
        return PatchResult(False, summary)


def location_problem(location: str) -> str | None:
    """Why ``location`` cannot name a data file next to the output, or None."""
    if "\x00" in location or api.ORT_MEMORY_MARKER in location:
        return f"location {location!r} is not a usable file name"
    if "/" in location or "\\" in location or PureWindowsPath(location).drive:
        return f"location '{location}' must be a plain file name next to the output model, without folders"
    if PurePosixPath(location).name in (".", "..") or location.strip() != location:
        return f"location '{location}' is not a usable file name"
    if location.lower().endswith(".onnx"):
        return f"location '{location}' ends in .onnx; a data file must not look like a model (use e.g. '.data')"
    if ("{" in location or "}" in location) and location.replace(api.DIGEST_FIELD, "").count("{") + location.replace(
        api.DIGEST_FIELD, ""
    ).count("}"):
        return f"location '{location}': the only field a data file name takes is {api.DIGEST_FIELD}"
    return None


@hookimpl
def register_patch_types(register: Callable[[type], None]) -> None:
    register(ExternalDataPatch)


__all__ = ["ExternalDataPatch"]
