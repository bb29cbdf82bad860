"""Spec file -> validated :class:`Spec`, in two phases, before any model is touched.

Phase 1 checks the envelope (format version first, then ``model``, ``output``, ``patches``,
``verify``, one key per item). Phase 2 checks each item against the JSON Schema of the plugin that
provides it, then the plugin's own static checks. Every problem is collected and reported sorted
by position: ``specs/x.yaml:8:10: patches[1] (rename_dims) > axes.2: 12.5 is not of type 'string'``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema

from patchspec.errors import SpecError, SpecProblem, did_you_mean
from patchspec.spec.catalog import Catalog, StepKind
from patchspec.spec.confine import ROOT_HINT, Root, control_characters, read_problem
from patchspec.spec.reader import YamlDocument, load_yaml
from patchspec.spec.requirements import SCHEMA as PLUGINS_SCHEMA
from patchspec.spec.requirements import check_requirements
from patchspec.spec.schema_errors import param_problems, schema_problem
from patchspec.spec.steps import Spec, Step, locate, location
from patchspec.spec.unknown_types import unknown_type

FORMAT_VERSION = 1
#: the combined schema's $id: stable for a spec format version (editors and caches key on it)
SCHEMA_ID = f"https://patchspec.github.io/schema/spec-{FORMAT_VERSION}.schema.json"

ENVELOPE_KEYS = ("patchspec", "plugins", "model", "output", "patches", "verify")

ENVELOPE_SCHEMA = {
    "type": "object",
    "properties": {
        "patchspec": {"description": "spec format version", "const": FORMAT_VERSION},
        "plugins": PLUGINS_SCHEMA,
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


@dataclass(frozen=True)
class SpecReading:
    """What reading a spec found, all of it at once: every problem, and the spec with the steps whose
    params passed their schema (``None`` when the envelope names no model or output), so that the
    checks that need the model still run on the parts that were valid. ``left_out``: the patches
    (index, label) that must not be applied: invalid, or of an unknown type; ``invalid``: the labels
    of every step in ``spec`` whose plugin's own static checks found a problem."""

    spec: Spec | None
    problems: tuple[SpecProblem, ...]
    left_out: tuple[tuple[int, str], ...] = ()
    invalid: frozenset[str] = frozenset()


def load_spec(path: Path | str, registry: Catalog, *, text: str | None = None, root: Path | None = None) -> Spec:
    """Read, parse and validate a spec file; raise :class:`SpecError` listing every problem.

    ``root``: the project root the files its steps read must lie in (``--root``); default: the
    nearest folder above the spec holding ``.git``, else the spec's folder (docs/security.md)."""
    reading = read_spec(path, registry, text=text, root=root)
    if reading.problems or reading.spec is None:
        raise SpecError(list(reading.problems))
    return reading.spec


def read_spec(path: Path | str, registry: Catalog, *, text: str | None = None, root: Path | None = None) -> SpecReading:
    """Read and validate a spec file in one pass, collecting every problem instead of stopping at the
    first kind; raise :class:`SpecError` only where nothing can be read (YAML, the format version, a
    ``patches`` that is not a list)."""
    path = Path(path)
    document = load_yaml(path, text)
    problems: list[SpecProblem] = _check_envelope(document)  # listed together with the steps' problems
    problems += _control_characters(document)
    required = check_requirements(document)  # the plugins it names are installed here
    problems += required.problems
    data: dict[str, Any] = document.data if isinstance(document.data, dict) else {}
    left_out: list[tuple[int, str]] = []
    patches = tuple(_steps(document, StepKind.PATCH_TYPE, registry, problems, left_out, required.unmet))
    invalid: list[tuple[int, str]] = []
    verify = tuple(_steps(document, StepKind.VERIFIER, registry, problems, invalid, required.unmet))
    if text is None:  # a spec on disk: the files its valid steps read must be there (a draft's not yet)
        folder = Path(os.path.abspath(path)).parent
        valid = [step for step in patches + verify if (step.index, step.label) not in left_out + invalid]
        problems += _missing_files(document, folder, registry, valid, Root.of(path, root))
    if "verify" not in data:
        check = registry.verifiers.get("check")
        verify = (Step(StepKind.VERIFIER, 0, "check", apply_defaults(check.params_schema, {}) if check else {}),)
    refused = frozenset(label for _, label in left_out + invalid)
    if not all(isinstance(data.get(key), str) and data[key] for key in ("model", "output")):
        return SpecReading(None, tuple(problems), tuple(left_out), refused)
    folder = Path(os.path.abspath(path)).parent  # as named, links not followed (a Bazel sandbox links the spec)
    # a symlink at the output is replaced, never written through
    output = Path(os.path.normpath(folder / data["output"]))
    # the model keeps the path the spec names (normalised, symlinks not followed): its data files are
    # found next to that name, as in a Hugging Face cache, where snapshots/<rev>/model.onnx and its
    # data are each a link into blobs/; the data policy then checks where the links lead
    model = Path(os.path.normpath(folder / data["model"]))
    spec = Spec(path, document, model, output, patches, verify)
    return SpecReading(spec, tuple(problems), tuple(left_out), refused)


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
        message = f"contains the control character {char}; no path or name in a spec may hold one"
        label, key = "", doc_path  # the spec's own keys: 'model'; inside a step: 'patches[0] (x) > name'
        if len(doc_path) >= 3 and doc_path[0] in ("patches", "verify") and isinstance(doc_path[1], int):
            label, key = f"{doc_path[0]}[{doc_path[1]}] ({doc_path[2]})", doc_path[3:]
        problems.append(document.problem(doc_path, message, label=label, key=key, of_key=in_key))
    return problems


def _missing_files(
    document: YamlDocument, folder: Path, registry: Catalog, steps: list[Step], root: Root
) -> list[SpecProblem]:
    """Files a step reads (``file:`` inputs, reference models, .npz outputs) that do not exist, lie
    outside the project root (links followed) or are not regular files."""
    problems = []
    for step in steps:
        for relative in registry.guard(step.kind, step.type_name, locate(document, step)).dependencies(step.params):
            key = _key_of(step.params, relative) or ()
            hint = None
            target = Path(os.path.normpath(folder / relative))  # the path the step opens (StepContext.resolve)
            if not os.path.lexists(target) or not target.exists():
                message = (
                    f"{relative} does not exist (resolved to {target.resolve()}){_files_like(target)}; paths in a "
                    f"spec are relative to the spec's folder"
                )
            else:
                refused = read_problem(root, target)  # checked as it is read: 'link/..' means one thing
                if refused is None:
                    continue
                message, hint = f"{relative} {refused}", ROOT_HINT if not root.holds(target) else None
            problems.append(SpecProblem(location(document, step, key), message, hint))
    return problems


def _files_like(target: Path) -> str:
    """`` (did you mean 'x.npy'?)``: the files beside ``target`` named most like it."""
    try:
        names = [entry.name for entry in os.scandir(target.parent)] if target.parent.is_dir() else []
    except OSError:
        return ""
    return did_you_mean(target.name, names)


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
            [document.problem((), "a spec is a mapping with keys 'patchspec', 'model', 'output', 'patches'")]
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
        raise SpecError([document.problem(("patchspec",), message)])
    problems = []
    structural = False
    for key in data:
        if key not in ENVELOPE_KEYS:
            message = f"unknown key '{key}'" + did_you_mean(str(key), ENVELOPE_KEYS)
            problems.append(document.problem((key,), message, key=(), of_key=True))
    validator = jsonschema.Draft202012Validator(ENVELOPE_SCHEMA)
    for error in validator.iter_errors(data):
        if error.validator == "additionalProperties":
            continue  # reported above, with suggestions
        bare = _bare_step(document, error)
        problems.append(bare if bare is not None else schema_problem(document, (), "", error))
        if len(error.absolute_path) == 1 and error.absolute_path[0] in ("patches", "verify"):
            structural = True  # not a list: no step can be read; report what was found so far
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
        return document.problem(path, message, key=(section, index))
    example = f"{value}: {{}}" if isinstance(value, str) else "TYPE: {...}"
    message = (
        f"{value!r} is not a step: each item is a mapping with one key, the type "
        f"(write '- {example}', or '- TYPE: VALUE' for a type with a shorthand)"
    )
    return document.problem(path, message, key=(section, index))


def _steps(
    document: YamlDocument,
    kind: StepKind,
    registry: Catalog,
    problems: list[SpecProblem],
    left_out: list[tuple[int, str]],
    unmet: tuple[str, ...] = (),
) -> Iterator[Step]:
    """The steps of ``kind``'s section whose params pass their schema (a plugin's own static checks may
    still fail: such a step is still checked against the model); every problem goes to ``problems``,
    each step with one to ``left_out``."""
    table = registry.patch_types if kind is StepKind.PATCH_TYPE else registry.verifiers
    data = document.data if isinstance(document.data, dict) else {}
    for index, item in enumerate(data.get(kind.section) or []):
        if not (isinstance(item, dict) and len(item) == 1):  # reported with the envelope; the others go on
            left_out.append((index, f"{kind.section}[{index}]"))
            continue
        ((type_name, raw),) = item.items()
        if type_name not in table:
            problems.append(unknown_type(document, registry, kind, index, str(type_name), table, unmet))
            left_out.append((index, f"{kind.section}[{index}] ({type_name})"))
            continue
        cls_ = table[type_name]
        params, shorthand_used = _normalize(cls_, raw)
        step = Step(kind, index, type_name, params, shorthand_used)
        before = len(problems)
        guard = registry.guard(kind, type_name, locate(document, step))  # a fault in its code is the plugin's
        for error in guard.schema_errors(params):
            problems.extend(param_problems(document, step, error, cls_.params_schema, cls_.shorthand))
        if len(problems) > before or any(control_characters(params)):  # refused: nothing more can be checked
            left_out.append((index, step.label))  # (a control character was reported with the spec's own)
            continue
        problems.extend(SpecProblem(location(document, step, tuple(key)), m) for key, m in guard.check_params(params))
        if len(problems) > before:
            left_out.append((index, step.label))
        # the schema's defaults, once, here: the plugin gets its params filled in
        yield Step(kind, index, type_name, apply_defaults(cls_.params_schema, params), shorthand_used)


def _normalize(cls_: Any, raw: Any) -> tuple[dict[str, Any], bool]:
    if raw is None:
        return {}, False
    if cls_.shorthand and not isinstance(raw, dict):
        return {cls_.shorthand: raw}, True
    return raw, False


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
