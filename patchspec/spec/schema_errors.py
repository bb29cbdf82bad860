"""jsonschema's errors as located problems a user can act on.

One problem per error, at the key the user wrote: an unknown key with the closest known names, a
value of the wrong type in every branch of an ``anyOf`` said once, a missing comma in a flow list,
an enum value with the closest allowed one.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from jsonschema.exceptions import ValidationError, best_match

from patchspec.errors import SpecProblem, did_you_mean
from patchspec.spec.reader import YamlDocument
from patchspec.spec.steps import Step


def param_problems(
    document: YamlDocument, step: Step, error: ValidationError, schema: dict[str, Any], shorthand: str | None = None
) -> list[SpecProblem]:
    """The problems one schema error of a step's params stands for (an unknown key each)."""
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = _schema_at(schema, error.schema_path).get("properties", {})
        return [
            document.problem(
                step.path + path + (key,),
                f"unknown key '{key}'" + did_you_mean(str(key), known),
                label=step.label,
                key=path,
                of_key=True,
            )
            for key in error.instance
            if key not in known
        ]
    if step.shorthand_used:  # located at the value the user wrote; named by the key it stands for
        note = f" ({step.type_name}: VALUE is short for {step.type_name}: {{{shorthand}: VALUE}})"
        return [schema_problem(document, step.path, step.label, error, shorthand_note=note)]
    return [schema_problem(document, step.path + path, step.label, error)]


def _schema_at(schema: dict[str, Any], schema_path: Iterable[Any]) -> dict[str, Any]:
    node = schema
    for part in list(schema_path)[:-1]:
        node = node[part]
    return node


def schema_problem(
    document: YamlDocument, doc_path: tuple[Any, ...], label: str, error: ValidationError, shorthand_note: str = ""
) -> SpecProblem:
    """One schema error of a step (``label``) or, without a label, of the spec's own keys."""
    message = _wrong_type_in_every_branch(error)
    if message is None:
        if error.context:
            error = best_match(_branches_of_the_right_type(error.context))
        message = _short_message(error)
    rel = tuple(error.absolute_path)
    full_path = doc_path if label else doc_path + rel
    return document.problem(full_path, message + shorthand_note, _missing_comma(error.instance), label=label, key=rel)


#: "4 3" or "N 3 640": numbers (or names and numbers) separated by spaces, as a flow list without commas reads
_SPACED_ITEMS = re.compile(r"[\w.+-]+(?:\s+[\w.+-]+)+")


def _missing_comma(instance: Any) -> str | None:
    """YAML reads ``[4 3]`` as a list of one string, '4 3': say that a comma is missing."""
    if isinstance(instance, str) and _SPACED_ITEMS.fullmatch(instance.strip()) and any(c.isdigit() for c in instance):
        fixed = ", ".join(instance.split())
        return f"'{instance}' is one item: YAML separates the items of [...] with commas: [{fixed}]"
    if isinstance(instance, list) and len(instance) == 1:
        return _missing_comma(instance[0])
    return None


def _wrong_type_in_every_branch(error: ValidationError) -> str | None:
    """``[1] is not of type 'integer' or 'string'`` when every branch of an anyOf/oneOf wants another type.

    (jsonschema's best match names one branch only, which reads as if the other were not allowed.)
    """
    if error.validator not in ("anyOf", "oneOf") or not error.context:
        return None
    types: dict[int, list[str]] = {}
    for sub in error.context:
        if not sub.relative_path and sub.validator == "type":
            wanted = sub.validator_value
            types[sub.relative_schema_path[0]] = wanted if isinstance(wanted, list) else [wanted]
    if len(types) != len(error.validator_value):
        return None
    names = list(dict.fromkeys(name for index in sorted(types) for name in types[index]))
    return f"{error.instance!r} is not of type " + " or ".join(repr(name) for name in names)


def _branches_of_the_right_type(errors: Iterable[ValidationError]) -> list[ValidationError]:
    """The errors of the anyOf/oneOf branches whose type the value has (``0`` breaks the integer branch's
    minimum: say that, not that it is not a string); all of them when no branch has its type."""
    errors = list(errors)
    wrong = {e.relative_schema_path[0] for e in errors if not e.relative_path and _of_another_type(e)}
    right = [e for e in errors if e.relative_schema_path[0] not in wrong]
    return right or errors


def _of_another_type(error: ValidationError) -> bool:
    """The branch wants another type: by ``type``, or by a ``const``/``enum`` of other types only
    (``{rtol: 1, atoll: 2}`` against ``skip | {rtol, atol}``: the object branch is the one meant)."""
    if error.validator == "type":
        return True
    allowed = [error.validator_value] if error.validator == "const" else error.validator_value
    if error.validator not in ("const", "enum") or not isinstance(allowed, list):
        return False
    return not any(type(value) is type(error.instance) for value in allowed)


def _short_message(error: ValidationError) -> str:
    text = str(error.message)
    if error.validator == "const":
        return f"expected {error.validator_value!r}, got {error.instance!r}"
    if error.validator == "required":
        return text.replace("is a required property", "is required")
    if error.validator == "enum" and isinstance(error.instance, str):
        return text + did_you_mean(error.instance, [v for v in error.validator_value if isinstance(v, str)])
    if (
        error.validator == "additionalProperties"
        and isinstance(error.instance, dict)
        and isinstance(error.schema, dict)
    ):
        known = error.schema.get("properties", {})  # an object inside an anyOf branch: name each key, as above
        unknown = [key for key in error.instance if key not in known]
        return "; ".join(f"unknown key '{key}'" + did_you_mean(str(key), known) for key in unknown) or text
    if error.validator in ("minProperties", "maxProperties") and isinstance(error.instance, dict):
        keys = f": {', '.join(map(str, error.instance))}" if error.instance else " (write '- TYPE: {}')"
        return f"each item has exactly one key (the type), got {len(error.instance)}{keys}"
    return text


__all__ = ["param_problems", "schema_problem"]
