"""Spec file -> validated :class:`Spec`, in two phases, before any model is touched.

Phase 1 checks the envelope (format version first, then ``model``, ``output``, ``patches``,
``verify``, one key per item). Phase 2 checks each item against the JSON Schema of the plugin that
provides it, then the plugin's own static checks. Every problem is collected and reported sorted
by position: ``specs/x.yaml:8:10: patches[1] (rename_dims) > axes.2: 12.5 is not of type 'string'``.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import ValidationError, best_match

from patchspec.errors import SpecError, SpecProblem, did_you_mean, step_where
from patchspec.install_advice import install_hint
from patchspec.spec.catalog import DISABLE_ENV, Catalog, StepKind
from patchspec.spec.confine import ROOT_HINT, Root, control_characters, read_problem
from patchspec.spec.reader import YamlDocument, load_yaml
from patchspec.spec.steps import Spec, Step, locate

FORMAT_VERSION = 1
#: the combined schema's $id: stable for a spec format version (editors and caches key on it)
SCHEMA_ID = f"https://patchspec.github.io/schema/spec-{FORMAT_VERSION}.schema.json"

ENVELOPE_KEYS = ("patchspec", "model", "output", "patches", "verify")

ENVELOPE_SCHEMA = {
    "type": "object",
    "properties": {
        "patchspec": {"description": "spec format version", "const": FORMAT_VERSION},
        "model": {"description": "input model, relative to the spec file", "type": "string", "minLength": 1},
        "output": {"description": "output model, relative to the spec file", "type": "string", "minLength": 1},
        "patches": {
            "description": "patches, applied in order; each item has exactly one key: the patch type",
            "type": "array",
            "items": {"type": "object", "minProperties": 1, "maxProperties": 1},
        },
        "verify": {
            "description": "verifiers, run in order on the output; default: [check: {}]",
            "type": "array",
            "items": {"type": "object", "minProperties": 1, "maxProperties": 1},
        },
    },
    "required": ["patchspec", "model", "output", "patches"],
    "additionalProperties": False,
}


def load_spec(path: Path | str, registry: Catalog, *, text: str | None = None, root: Path | None = None) -> Spec:
    """Read, parse and validate a spec file; raise :class:`SpecError` listing every problem.

    ``root``: the project root the files its steps read must lie in (``--root``); default: the
    nearest folder above the spec holding ``.git``, else the spec's folder (docs/security.md)."""
    path = Path(path)
    document = load_yaml(path, text)
    problems: list[SpecProblem] = _check_envelope(document)  # listed together with the steps' problems
    problems += _control_characters(document)
    data: dict[str, Any] = document.data if isinstance(document.data, dict) else {}
    patches = tuple(_steps(document, "patches", registry, problems))
    verify = tuple(_steps(document, "verify", registry, problems))
    if text is None and not problems:  # a spec on disk: the files its steps read must be there (a draft's not yet)
        folder = Path(os.path.abspath(path)).parent
        problems += _missing_files(document, folder, registry, patches + verify, Root.of(path, root))
    if problems:
        raise SpecError(problems)
    if "verify" not in data:
        check = registry.verifiers.get("check")
        verify = (Step("verify", 0, "check", apply_defaults(check.params_schema, {}) if check else {}),)
    folder = Path(os.path.abspath(path)).parent  # as named, links not followed (a Bazel sandbox links the spec)
    output = folder / data["output"]
    output = Path(os.path.normpath(output))  # a symlink at the output is replaced, never written through
    # the model keeps the path the spec names (normalised, symlinks not followed): its data files are
    # found next to that name, as in a Hugging Face cache, where snapshots/<rev>/model.onnx and its
    # data are each a link into blobs/; the data policy then checks where the links lead
    model = Path(os.path.normpath(folder / data["model"]))
    return Spec(path, document, model, output, patches, verify)


def _located(
    document: YamlDocument,
    path: tuple[Any, ...],
    where: str,
    message: str,
    hint: str | None = None,
    *,
    of_key: bool = False,
    key: tuple[Any, ...] = (),
) -> SpecProblem:
    """``document.problem``, typed: the problem at ``path`` (its key's position with ``of_key``);
    ``key``: the path inside the step's params that ``where`` ends with, kept as data."""
    problem: SpecProblem = document.problem(path, where, message, hint, of_key=of_key)
    return replace(problem, key=tuple(key)) if key else problem


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """A copy of ``value`` with every ``default`` its schema gives filled in where the key is absent, at
    any depth of ``properties`` and ``items`` (as cfgv's apply_defaults). ``anyOf``/``oneOf`` branches
    are left alone: which branch's default would apply is not for the loader to guess."""
    if isinstance(value, dict) and isinstance(schema.get("properties"), dict):
        filled = dict(value)
        for key, sub in schema["properties"].items():
            if key in filled:
                filled[key] = apply_defaults(sub, filled[key])
            elif isinstance(sub, dict) and "default" in sub:
                filled[key] = apply_defaults(sub, copy.deepcopy(sub["default"]))
        return filled
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def _control_characters(document: YamlDocument) -> list[SpecProblem]:
    """A control character in any key or string: refused in every path and name (a newline in a
    ``file:`` path would otherwise become a Make rule in the depfile)."""
    problems = []
    for doc_path, char, in_key in control_characters(document.data):
        where = ".".join(map(str, doc_path))
        message = f"contains the control character {char}; no path or name in a spec may hold one"
        problems.append(_located(document, doc_path, where, message, of_key=in_key))
    return problems


def _missing_files(
    document: YamlDocument, folder: Path, registry: Catalog, steps: tuple[Step, ...], root: Root
) -> list[SpecProblem]:
    """Files a step reads (``file:`` inputs, reference models, .npz outputs) that do not exist, lie
    outside the project root (links followed) or are not regular files."""
    problems = []
    for step in steps:
        kind = StepKind.of_section(step.section)
        for relative in registry.guard(kind, step.type_name, locate(document, step)).dependencies(step.params):
            key = _key_of(step.params, relative) or ()
            doc_path = step.path if step.shorthand_used else step.path + key
            where = step_where(step.label, key)
            hint = None
            target = Path(os.path.normpath(folder / relative))  # the path the step opens (StepContext.resolve)
            if not os.path.lexists(target) or not target.exists():
                message = (
                    f"{relative} does not exist (resolved to {target.resolve()}); paths in a spec are "
                    f"relative to the spec's folder"
                )
            else:
                refused = read_problem(root, target)  # checked as it is read: 'link/..' means one thing
                if refused is None:
                    continue
                message, hint = f"{relative} {refused}", ROOT_HINT if not root.holds(target) else None
            problems.append(_located(document, doc_path, where, message, hint, key=key))
    return problems


def _key_of(params: Any, value: str, key: tuple[Any, ...] = ()) -> tuple[Any, ...] | None:
    """The key path where ``value`` is written in ``params``."""
    if params == value:
        return key
    items = params.items() if isinstance(params, dict) else enumerate(params) if isinstance(params, list) else ()
    for name, item in items:
        found = _key_of(item, value, key + (name,))
        if found is not None:
            return found
    return None


def _check_envelope(document: YamlDocument) -> list[SpecProblem]:
    data = document.data
    if not isinstance(data, dict):
        raise SpecError(
            [_located(document, (), "", "a spec is a mapping with keys 'patchspec', 'model', 'output', 'patches'")]
        )
    version = data.get("patchspec")
    if type(version) is not int or version != FORMAT_VERSION:  # not True, not 1.0
        if "patchspec" not in data:
            message = f"missing 'patchspec: {FORMAT_VERSION}' (the spec format version)"
        elif isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
            message = (
                f"spec format {version} is newer than this patchspec supports ({FORMAT_VERSION}); upgrade patchspec"
            )
        else:
            message = f"'patchspec' must be the integer {FORMAT_VERSION}, got {version!r}"
        raise SpecError([_located(document, ("patchspec",), "patchspec", message)])
    problems = []
    structural = False
    for key in data:
        if key not in ENVELOPE_KEYS:
            problems.append(
                _located(
                    document, (key,), "", f"unknown key '{key}'" + did_you_mean(str(key), ENVELOPE_KEYS), of_key=True
                )
            )
    validator = jsonschema.Draft202012Validator(ENVELOPE_SCHEMA)
    for error in validator.iter_errors(data):
        if error.validator == "additionalProperties":
            continue  # reported above, with suggestions
        bare = _bare_step(document, error)
        problems.append(bare if bare is not None else _schema_problem(document, (), "", error))
        if error.absolute_path and error.absolute_path[0] in ("patches", "verify"):
            structural = True  # the steps cannot be read: report what was found so far
    if structural:
        raise SpecError(problems)
    return problems


def _bare_step(document: YamlDocument, error: jsonschema.ValidationError) -> SpecProblem | None:
    """A step written as a bare name (``- check``) or a bare value: say how to write it."""
    path = tuple(error.absolute_path)
    if len(path) != 2 or path[0] not in ("patches", "verify") or error.validator != "type":
        return None
    section, index = path
    value = error.instance
    words = value.split(None, 1) if isinstance(value, str) else []
    if len(words) == 2:  # `- set_batch 8`: a type and its shorthand value, the colon left out
        message = f"{value!r} is not a step: write '- {words[0]}: {words[1]}' (a colon after the type)"
        return _located(document, path, f"{section}[{index}]", message)
    example = f"{value}: {{}}" if isinstance(value, str) else "TYPE: {...}"
    message = (
        f"{value!r} is not a step: each item is a mapping with one key, the type "
        f"(write '- {example}', or '- TYPE: VALUE' for a type with a shorthand)"
    )
    return _located(document, path, f"{section}[{index}]", message)


def _steps(document: YamlDocument, section: str, registry: Catalog, problems: list[SpecProblem]) -> Iterator[Step]:
    kind = StepKind.of_section(section)
    table = registry.patch_types if section == "patches" else registry.verifiers
    data = document.data if isinstance(document.data, dict) else {}
    for index, item in enumerate(data.get(section) or []):
        ((type_name, raw),) = item.items()
        step_path = (section, index, type_name)
        if type_name not in table:
            problems.append(_unknown_type(document, registry, section, index, kind, str(type_name), table))
            continue
        cls_ = table[type_name]
        params, shorthand_used = _normalize(cls_, raw)
        step = Step(section, index, type_name, params, shorthand_used)
        before = len(problems)
        guard = registry.guard(kind, type_name, locate(document, step))  # a fault in its code is the plugin's
        for error in guard.schema_errors(params):
            problems.extend(_param_problems(document, step, error, cls_.params_schema, cls_.shorthand))
        if len(problems) == before:
            for key, message in guard.check_params(params):
                doc_path = step_path if shorthand_used else step_path + tuple(key)
                problems.append(_located(document, doc_path, step_where(step.label, key), message, key=tuple(key)))
        if len(problems) == before:  # the schema's defaults, once, here: the plugin gets its params filled in
            step = Step(section, index, type_name, apply_defaults(cls_.params_schema, params), shorthand_used)
        yield step


def _normalize(cls_: Any, raw: Any) -> tuple[dict[str, Any], bool]:
    if raw is None:
        return {}, False
    if cls_.shorthand and not isinstance(raw, dict):
        return {cls_.shorthand: raw}, True
    return raw, False


def _unknown_type(
    document: YamlDocument,
    registry: Catalog,
    section: str,
    index: int,
    kind: str,
    type_name: str,
    table: Mapping[str, Any],
) -> SpecProblem:
    doc_path, where = (section, index, type_name), f"{section}[{index}]"
    missing = registry.why_missing(type_name)  # its plugin is installed, but disabled or broken
    if missing is not None and missing.disabled:
        message = f"unknown {kind} '{type_name}': plugin '{missing.name}' is disabled by {DISABLE_ENV}"
        hint = (
            f"{missing.label} is installed but not loaded; to use it, remove '{missing.name}' from "
            f"{DISABLE_ENV} (now '{os.environ.get(DISABLE_ENV, '')}')"
        )
        return _located(document, doc_path, where, message, hint, of_key=True)
    if missing is not None:  # no 'did you mean' from other plugins: the type is the broken plugin's
        message = f"unknown {kind} '{type_name}': plugin '{missing.name}' is installed but failed to load"
        hint = (
            f"{missing.label} failed to load: {missing.error}; it provides nothing until it is fixed: upgrade "
            f"or reinstall {missing.distribution}, or report it to its author"
        )
        if missing.traceback:
            hint += "; -v shows its traceback"
        problem = _located(document, doc_path, where, message, hint, of_key=True)
        return replace(problem, plugin_traceback=missing.traceback)
    plugin = type_name.split(".")[0]
    if "." in type_name and not any(name.startswith(f"{plugin}.") for name in table):
        # a third party's type whose plugin is not installed where patchspec runs
        message = f"unknown {kind} '{type_name}': no installed plugin is named '{plugin}'"
        return _located(document, doc_path, where, message, install_hint(plugin), of_key=True)
    suggestion = did_you_mean(type_name, table)
    known = None
    if not suggestion:
        known = f"known {kind}s: {', '.join(sorted(table))}; 'patchspec plugins' lists where they come from"
    return _located(document, doc_path, where, f"unknown {kind} '{type_name}'" + suggestion, known, of_key=True)


def _param_problems(
    document: YamlDocument, step: Step, error: ValidationError, schema: dict[str, Any], shorthand: str | None = None
) -> list[SpecProblem]:
    path = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = _schema_at(schema, error.schema_path).get("properties", {})
        problems = []
        for key in error.instance:
            if key in known:
                continue
            message = f"unknown key '{key}'" + did_you_mean(str(key), known)
            where = step_where(step.label, path)
            problems.append(_located(document, step.path + path + (key,), where, message, of_key=True, key=path))
        return problems
    if step.shorthand_used:  # located at the value the user wrote; named by the key it stands for
        note = f" ({step.type_name}: VALUE is short for {step.type_name}: {{{shorthand}: VALUE}})"
        return [_schema_problem(document, step.path, step.label, error, shorthand_note=note)]
    return [_schema_problem(document, step.path + path, step.label, error)]


def _schema_at(schema: dict[str, Any], schema_path: Iterable[Any]) -> dict[str, Any]:
    node = schema
    for part in list(schema_path)[:-1]:
        node = node[part]
    return node


def _schema_problem(
    document: YamlDocument, doc_path: tuple[Any, ...], label: str, error: ValidationError, shorthand_note: str = ""
) -> SpecProblem:
    message = _wrong_type_in_every_branch(error)
    if message is None:
        if error.context:
            error = best_match(_branches_of_the_right_type(error.context))
        message = _short_message(error)
    rel = tuple(error.absolute_path)
    where = step_where(label, rel) if label else ""
    if not label:  # the envelope: patches[0], as steps are named everywhere else
        where = "".join(f"[{k}]" if isinstance(k, int) else (f".{k}" if i else str(k)) for i, k in enumerate(rel))
    full_path = doc_path if label else doc_path + rel
    key = rel if label else ()
    return _located(document, full_path, where, message + shorthand_note, _missing_comma(error.instance), key=key)


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
    wrong = {e.relative_schema_path[0] for e in errors if not e.relative_path and e.validator == "type"}
    right = [e for e in errors if e.relative_schema_path[0] not in wrong]
    return right or errors


def _short_message(error: ValidationError) -> str:
    text = str(error.message)
    if error.validator == "const":
        return f"expected {error.validator_value!r}, got {error.instance!r}"
    if error.validator == "required":
        return text.replace("is a required property", "is required")
    if error.validator == "enum" and isinstance(error.instance, str):
        return text + did_you_mean(error.instance, [v for v in error.validator_value if isinstance(v, str)])
    if error.validator in ("minProperties", "maxProperties") and isinstance(error.instance, dict):
        return f"each item has exactly one key (the type), got {len(error.instance)}: {', '.join(map(str, error.instance))}"
    return text


def combined_schema(registry: Catalog) -> dict[str, Any]:
    """One JSON Schema for specs: the envelope plus every installed plugin's fragment (for editors)."""

    def items(table: Mapping[str, Any], section: str) -> dict[str, Any]:
        branches = []
        for name in sorted(table):
            cls_ = table[name]
            value = cls_.params_schema
            if cls_.shorthand:
                short = cls_.params_schema.get("properties", {}).get(cls_.shorthand, {})
                value = {"anyOf": [value, short]}
            if "$defs" in cls_.params_schema:  # a fragment's '#/$defs/...' must resolve inside the fragment
                value = {"$id": f"urn:patchspec:{section}:{name}", "$defs": cls_.params_schema["$defs"], **value}
            branches.append(
                {
                    "type": "object",
                    "description": cls_.description,
                    "properties": {name: value},
                    "required": [name],
                    "additionalProperties": False,
                }
            )
        return {"oneOf": branches}

    schema: dict[str, Any] = dict(ENVELOPE_SCHEMA)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = SCHEMA_ID
    schema["title"] = "patchspec spec (format 1)"
    props = dict(schema["properties"])
    props["patches"] = dict(props["patches"], items=items(registry.patch_types, "patches"))
    props["verify"] = dict(props["verify"], items=items(registry.verifiers, "verify"))
    schema["properties"] = props
    return schema
