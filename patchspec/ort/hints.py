"""What to do about an onnxruntime failure: the node and op it names, and a hint for the common causes.

onnxruntime's messages are long and name the cause in their own words ("is not a registered
function/op", "Unsupported model IR version"). Each rule here reads one such cause and says what a
user can do: give patchspec the library that registers a custom op, re-export or patch an attribute
an older exporter wrote, upgrade onnxruntime, run on a provider with a kernel for the types, keep
external data inside the model's folder. Every rule is tested on a model that triggers it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Diagnosis:
    """The node and op a message names (when it does), and what to do."""

    cause: str  # custom_op | attribute | too_new | no_kernel | escapes
    node: str | None
    op: str | None
    hint: str

    @property
    def where(self) -> str:
        if self.node and self.op:
            return f"node '{self.node}' ({self.op})"
        return f"node '{self.node}'" if self.node else (self.op or "")


def _custom_op(match: re.Match[str]) -> Diagnosis:
    domain, op = match.group("domain"), match.group("op")
    what = f"'{op}' in the domain '{domain}'" if op else f"an op in the domain '{domain}'"
    return Diagnosis(
        "custom_op",
        None,
        f"{domain}:{op}" if op else domain,
        (
            f"{what} is a custom op this onnxruntime does not know: give the run verifier "
            f"the library that registers it (run: {{custom_op_libraries: [path/to/lib.so]}}, relative to the spec; "
            "onnxruntime's register_custom_ops_library), or run on the provider the model was exported for"
        ),
    )


def _attribute(match: re.Match[str]) -> Diagnosis:
    return Diagnosis(
        "attribute",
        None,
        None,
        (
            "an attribute value an older exporter wrote, which this onnxruntime no longer accepts: re-export with a "
            "newer exporter, or patch the attribute (for Resize, mode: linear replaces the old 'bilinear')"
        ),
    )


def _opset(match: re.Match[str]) -> Diagnosis:
    return Diagnosis(
        "too_new",
        None,
        None,
        (
            "the model's opset (or IR version) is newer than this onnxruntime supports: upgrade onnxruntime "
            "('patchspec env' shows the installed one), or export with an older opset"
        ),
    )


def _no_kernel(match: re.Match[str]) -> Diagnosis:
    node, op = match.group("node"), match.group("op")
    return Diagnosis(
        "no_kernel",
        node or None,
        op,
        (
            f"this provider has no kernel for {op} with the model's element types (bfloat16 and some float16 ops "
            "have none on the CPU): run on a provider that has one (providers: [...]), or cast the model"
        ),
    )


def _escapes(match: re.Match[str]) -> Diagnosis:
    return Diagnosis(
        "escapes",
        None,
        None,
        (
            "onnxruntime >= 1.24 refuses external data whose real path (links followed) lies outside the model's "
            "folder: copy or hard-link the data file next to the model, or keep the model and data in one folder"
        ),
    )


_RULES = [
    (re.compile(r"(?P<domain>[\w.]+):(?P<op>\w+)\(-?\d+\) is not a registered function/op"), _custom_op),
    (re.compile(r"No opset import for domain '?(?P<domain>[\w.]+)'?(?:\s+optype\s+(?P<op>\w+))?"), _custom_op),
    (re.compile(r"mode attribute is (?P<value>\w+)|Unrecognized attribute: (?P<attr>\w+)"), _attribute),
    (
        re.compile(
            r"only \*guarantees\* support for models stamped with official released onnx opset|"
            r"Unsupported model IR version|Opset \d+ is under development|is not supported by this version"
        ),
        _opset,
    ),
    (
        re.compile(r"Could not find an implementation for (?P<op>\w+)\(\d+\) node with name '(?P<node>[^']*)'"),
        _no_kernel,
    ),
    (re.compile(r"External data path .*escapes model directory|escapes the model directory"), _escapes),
]


def diagnose(message: str) -> Diagnosis | None:
    """The first rule that recognises onnxruntime's ``message``, or None."""
    for pattern, explain in _RULES:
        match = pattern.search(message)
        if match:
            return explain(match)
    return None


def node_of(message: str) -> str | None:
    """The node an onnxruntime message names, in any of its phrasings."""
    for pattern in (r"node\. Name:'([^']*)'", r"node with name '([^']*)'", r"Node \(([^)]*)\)"):
        found = re.search(pattern, message)
        if found and found.group(1):
            return found.group(1)
    return None


__all__ = ["Diagnosis", "diagnose", "node_of"]
