"""Names with a meaning in an external data ``location``: plain strings, so that checking a spec's
location (``validate``) needs no onnx."""

from __future__ import annotations

#: in a layout's ``location``, replaced by the start of the output's digest (a content-addressed name)
DIGEST_FIELD = "{digest}"
#: onnxruntime reads a location holding this as an address in memory, never as a file
ORT_MEMORY_MARKER = "_ORT_MEM_ADDR_"

__all__ = ["DIGEST_FIELD", "ORT_MEMORY_MARKER"]
