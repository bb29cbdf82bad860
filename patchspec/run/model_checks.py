"""A spec against its model's graph, in one pass, for ``patchspec validate``: each step's
``check_model``, each valid patch applied in memory so that the steps after it are checked on the
model as it leaves it, every problem collected (nothing is written, no verifier runs).

A patch that cannot apply (its params are invalid, its ``check_model`` found a problem, or it
failed) is left out, and the steps after it are still checked; a problem found on a model that a
left-out patch would have changed says so in its hint.
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from dataclasses import replace

import onnx

from patchspec.errors import FollowOnError, PatchspecError, PluginError, SpecError, SpecProblem
from patchspec.model.graph import sync_initializer_inputs
from patchspec.plugin.contract import PatchContext, RunState
from patchspec.run.engine import Engine
from patchspec.spec.steps import Spec, Step


def model_problems(
    engine: Engine, spec: Spec, left_out: Sequence[tuple[int, str]] = (), invalid: Set[str] = frozenset()
) -> list[PatchspecError]:
    """Every problem ``spec``'s steps have with its model, as errors of their kinds: the model unusable
    (exit 3), names the model lacks (spec errors, exit 2), a patch that cannot apply (exit 4), a
    plugin's fault (exit 5). ``left_out``: the patches (index, label) the loader found invalid,
    checked but not applied; ``invalid``: the labels of steps whose static checks failed (a fault of
    their ``check_model`` is not reported: the plugin was handed params it had refused)."""
    try:
        loaded = engine.load_input(spec)
    except PatchspecError as exc:
        return [exc]
    model = onnx.ModelProto()
    model.CopyFrom(loaded.model)
    state = RunState()  # one per run, as in apply: the patches of this spec share it
    not_applied = dict(left_out)
    skipped: list[str] = []  # the patches before the step checked that were not applied
    found: list[PatchspecError] = []
    problems: list[SpecProblem] = []
    for step in spec.patches:
        skipped += [
            label for index, label in sorted(not_applied.items()) if index < step.index and label not in skipped
        ]
        step_problems = _checked(engine, spec, step, model, skipped, invalid)
        if step_problems or step.index in not_applied:
            problems += step_problems
            skipped.append(step.label)
            continue
        trial = onnx.ModelProto()
        trial.CopyFrom(model)  # a patch that fails half-way leaves the model the next steps see as it was
        context = PatchContext(spec, step, model_dir=loaded.model_path.parent, state=state)
        try:
            _, before = engine.registry.guard(step.kind, step.type_name, spec.locate(step)).apply(
                trial, step.params, context
            )
        except PatchspecError as exc:
            if skipped:
                exc.hint = _after_left_out(exc.hint, skipped)
            found.append(exc)
            skipped.append(step.label)
            continue
        sync_initializer_inputs(trial, before)  # IR < 4: a new initializer must be a graph input too
        model = trial
    skipped += [label for _, label in sorted(not_applied.items()) if label not in skipped]
    for step in spec.verify:
        problems += _checked(engine, spec, step, model, skipped, invalid)
    return found + _as_errors(problems)


def _checked(
    engine: Engine, spec: Spec, step: Step, model: onnx.ModelProto, skipped: list[str], invalid: Set[str]
) -> list[SpecProblem]:
    """``step``'s problems with ``model``, each saying which left-out patches the model lacks."""
    guard = engine.registry.guard(step.kind, step.type_name, spec.locate(step))
    try:
        found = guard.check_model(step.params, model)
    except PluginError:
        if step.label in invalid:  # params its own checks refused: their problems are said already
            return []
        raise
    problems = [spec.problem(step, key, message) for key, message in found]
    if skipped:
        problems = [replace(problem, hint=_after_left_out(problem.hint, skipped)) for problem in problems]
    return problems


def _as_errors(problems: list[SpecProblem]) -> list[PatchspecError]:
    """Spec mistakes, and apart those found on a model a left-out patch did not change (their exit code is
    their cause's)."""
    follow_on = [problem for problem in problems if problem.hint and _LEFT_OUT in problem.hint]
    direct = [problem for problem in problems if problem not in follow_on]
    errors: list[PatchspecError] = [SpecError(direct)] if direct else []
    return errors + ([FollowOnError(follow_on)] if follow_on else [])


#: how a hint says its problem was found on a model without some patches
_LEFT_OUT = "checked on the model without"


def _after_left_out(hint: str | None, skipped: list[str]) -> str:
    """A hint that says the model checked lacks the patches left out before (fixing those may fix this)."""
    note = f"{_LEFT_OUT} {', '.join(skipped)}, which could not apply: this may go away once that is fixed"
    return f"{hint}; {note}" if hint else note


__all__ = ["model_problems"]
