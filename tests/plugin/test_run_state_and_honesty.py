"""The contract's run state (shared by the patches of one run, typed by key) and the engine's check
that a patch's `modified` is the truth."""

from __future__ import annotations

import types

import pytest

from patchspec import PatchResult, PatchType, RunState, StateKey, hookimpl
from patchspec.testing import make_model, patch_context, run_spec

SEEN: StateKey[list] = StateKey("liar.seen", list)


class RecordPatch(PatchType):
    name = "liar.record"
    description = "Append the step index to a list shared by the run; change nothing."
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        seen = context.state.get(SEEN)
        seen.append(context.step.index)
        return PatchResult(False, f"seen {seen}")


class SaysUnchangedPatch(PatchType):
    name = "liar.says_unchanged"
    description = "Change the producer, and claim nothing changed."
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        model.producer_name = "changed behind your back"
        return PatchResult(False, "nothing to do")


class SaysModifiedPatch(PatchType):
    name = "liar.says_modified"
    description = "Change nothing, and claim a change."
    params_schema = {"type": "object", "properties": {}, "additionalProperties": False}

    def apply(self, model, params, context):
        return PatchResult(True, "did a lot")


@hookimpl
def register_patch_types(register):
    for cls in (RecordPatch, SaysUnchangedPatch, SaysModifiedPatch):
        register(cls)


PLUGIN = types.SimpleNamespace(register_patch_types=register_patch_types)


def model():
    return make_model({"x": [1, 4]})


def test_state_is_shared_by_the_patches_of_one_run_and_fresh_for_the_next(tmp_path):
    spec = "patches:\n  - liar.record: {}\n  - liar.record: {}\n"
    first = run_spec(tmp_path / "a", spec, model(), plugins=[("liar", PLUGIN)])
    assert first.exit_code == 0, first.stdout + first.stderr
    assert "seen [0]" in first.stdout and "seen [0, 1]" in first.stdout
    second = run_spec(tmp_path / "b", spec, model(), plugins=[("liar", PLUGIN)])
    assert "seen [0, 1]" in second.stdout and "seen [0, 1, 0" not in second.stdout


@pytest.mark.parametrize(
    "kind, said",
    [
        ("says_unchanged", "modified=False but changed the model"),
        ("says_modified", "modified=True but left the model as it was"),
    ],
)
def test_a_patch_whose_modified_lies_is_a_plugin_bug(tmp_path, kind, said):
    result = run_spec(tmp_path, f"patches:\n  - liar.{kind}: {{}}\n", model(), plugins=[("liar", PLUGIN)])
    assert result.exit_code == 5, result.stdout + result.stderr
    assert said in result.stderr and "liar" in result.stderr
    assert not (tmp_path / "out" / "model.onnx").exists()


def test_state_keys_are_typed_slots_with_an_initial_value():
    state = RunState()
    other = StateKey("liar.seen", list)  # same name, another key: another slot
    state.get(SEEN).append(1)
    assert state.get(SEEN) == [1] and state.get(other) == [] and SEEN in state
    state.set(SEEN, [7])
    assert state.get(SEEN) == [7]
    assert patch_context("x").state.get(SEEN) == []  # every context from the kit starts fresh
