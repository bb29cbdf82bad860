"""The corpus table and rates, from benchmarks/results/corpus.json into docs/corpus.md (between the markers).

.venv/bin/python benchmarks/corpus/report.py            # rewrites the section of docs/corpus.md
.venv/bin/python benchmarks/corpus/report.py --print    # prints it instead
.venv/bin/python benchmarks/corpus/report.py --findings FILE   # also each failure, with how to rerun it
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from manifest import REPO

RESULTS = REPO / "benchmarks" / "results" / "corpus.json"
DOC = REPO / "docs" / "corpus.md"
BEGIN = "<!-- corpus table: written by benchmarks/corpus/report.py -->"
END = "<!-- end of corpus table -->"
SET_BATCH = ("set_batch_4_noverify", "set_batch_4_verify", "set_batch_N_noverify", "set_batch_N_verify")
#: a model was written and the judge found it wrong
WRONG = {"wrong", "lies", "fails to load", "fails to run"}
BROKEN = {"crash", "timeout"}
#: the steps whose command verifies what it wrote: exit 0 there and the judge's "wrong" is a silent pass
#: (apply said passed, the model is wrong per sample)
VERIFIED = ("set_batch_4_verify", "set_batch_N_verify", "init_apply")


def silent(step_name: str, step: dict[str, Any] | None) -> bool:
    """A verified step that wrote a model the judge finds wrong. The harness's set_batch spec verifies
    with the checker alone (``compare: none``) where ONNX Runtime cannot run the original: a wrong model
    written there is written wrong, but nothing said it was compared."""
    if step_name not in VERIFIED or not step or step.get("verdict") not in WRONG:
        return False
    return step.get("compare") != "none"


def cell(step: dict[str, Any] | None, batchable: bool, name: str = "") -> str:
    """The step's verdict as the table shows it, with the runtime that judged it where not onnxruntime."""
    text = f"**SILENT PASS** ({step['verdict']})" if step and silent(name, step) else _verdict(step, batchable)
    return f"{text} ({step['runtime']})" if step and step.get("runtime") else text


def _verdict(step: dict[str, Any] | None, batchable: bool) -> str:
    if not step:
        return "-"
    verdict = str(step.get("verdict", "-"))
    if verdict == "refused":
        code = step.get("run", step.get("init", {})).get("exit")
        if "init" in step and "run" not in step:
            code = step["init"].get("exit")
            return f"refused by init (exit {code})" if not batchable else f"**missed**: init exit {code}"
        return f"refused (exit {code})" if not batchable else f"**missed**: exit {code}"
    if verdict in WRONG:
        return f"**WRONG** ({verdict})"
    if verdict in BROKEN:
        return f"**{verdict.upper()}**"
    if verdict == "right" and not batchable:
        return "right (judged not batchable!)"
    return verdict


def _original(step: dict[str, Any]) -> str:
    """The original fed at batch 4: the judge's verdict as it is (no model was written to be wrong)."""
    verdict = str(step.get("verdict", "-"))
    return f"{verdict} ({step['runtime']})" if step.get("runtime") else verdict


def rate(hits: int, total: int) -> str:
    return f"{hits}/{total} ({100 * hits / total:.0f}%)" if total else "0/0"


def _named(keys: list[str]) -> str:
    return f"{len(keys)}{' (' + ', '.join(keys) + ')' if keys else ''}"


def summarize(models: dict[str, Any]) -> list[str]:
    batchable = {k: m for k, m in models.items() if m.get("batchable") and "missing" not in m}
    other = {k: m for k, m in models.items() if not m.get("batchable") and "missing" not in m}
    packages = {m["package"]: bool(m.get("generated")) for m in models.values()}
    generated = sum(packages.values())
    lines = [
        f"- models: {len(models)} ({len(batchable)} batchable, {len(other)} not), from {len(packages)} packages "
        f"({len(packages) - generated} wheels, {generated} converters run by generate.py; "
        f"{sum(bool(m.get('generated')) for m in models.values())} models generated)"
    ]
    for step in (*SET_BATCH, "init_apply", "polygraphy"):
        right = sum(m.get(step, {}).get("verdict") == "right" for m in batchable.values())
        refused = sum(m.get(step, {}).get("verdict") == "refused" for m in other.values())
        wrong = [k for k, m in models.items() if m.get(step, {}).get("verdict") in WRONG]
        broken = [k for k, m in models.items() if m.get(step, {}).get("verdict") in BROKEN]
        quiet = [k for k, m in models.items() if silent(step, m.get(step))]
        lines.append(
            f"- `{step}`: right on batchable {rate(right, len(batchable))}; refused on not batchable "
            f"{rate(refused, len(other))}; written wrong {_named(wrong)}"
            + (f"; of them silent passes (apply passed, wrong per sample) {_named(quiet)}" if step in VERIFIED else "")
            + f"; exit 5, traceback or timeout {_named(broken)}"
        )
    crashes = [k for k, m in models.items() if m.get("suggest", {}).get("verdict") in BROKEN]
    lines.append(
        f"- `inspect --suggest`: exit 5, traceback or timeout {len(crashes)}"
        f"{' (' + ', '.join(crashes) + ')' if crashes else ''}"
    )
    return lines


def rates(models: dict[str, Any]) -> list[str]:
    """One row per step: right on the batchable models, refused on the others, written wrong, silent passes,
    exit 5 (or a traceback or timeout)."""
    batchable = {k: m for k, m in models.items() if m.get("batchable") and "missing" not in m}
    other = {k: m for k, m in models.items() if not m.get("batchable") and "missing" not in m}
    names = {
        "set_batch_4_noverify": "set_batch 4, --no-verify",
        "set_batch_4_verify": "set_batch 4 + verify",
        "set_batch_N_noverify": "set_batch N, --no-verify",
        "set_batch_N_verify": "set_batch N + verify",
        "init_apply": "init + apply (first time)",
        "polygraphy": "Polygraphy sanitize",
    }
    head = "| step | right (batchable) | refused (not batchable) | written wrong | silent passes | exit 5, traceback, timeout |"
    rows = [head, "| --- | --- | --- | --- | --- | --- |"]
    for step, name in names.items():
        right = sum(m.get(step, {}).get("verdict") == "right" for m in batchable.values())
        refused = sum(m.get(step, {}).get("verdict") in ("refused", "tool error") for m in other.values())
        wrong = sum(m.get(step, {}).get("verdict") in WRONG for m in models.values())
        quiet = sum(silent(step, m.get(step)) for m in models.values()) if step in VERIFIED else "-"
        broken = sum(m.get(step, {}).get("verdict") in BROKEN for m in models.values())
        cells = [name, rate(right, len(batchable)), rate(refused, len(other)), str(wrong), str(quiet), str(broken)]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def table(models: dict[str, Any]) -> list[str]:
    head = [
        "model",
        "package",
        "exporter",
        "batchable",
        "original at 4",
        "set_batch 4",
        "set_batch 4 + verify",
        "set_batch N",
        "set_batch N + verify",
        "init + apply",
        "suggest",
        "polygraphy",
        "silent pass",
    ]
    rows = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for key, m in sorted(models.items(), key=lambda item: (item[1]["package"], item[0])):
        if "missing" in m:
            rows.append(f"| {key} | {m['package']} | missing | | | | | | | | | | |")
            continue
        b = bool(m["batchable"])
        cells = [
            key,
            m["package"],
            m["exporter"],
            "yes" if b else f"no: {m['why']}",
            _original(m.get("original_b4") or {}),
            *(cell(m.get(s), b, s) for s in SET_BATCH),
            cell(m.get("init_apply"), b, "init_apply"),
            m.get("suggest", {}).get("verdict", "-"),
            cell(m.get("polygraphy"), b),
            ", ".join(s for s in VERIFIED if silent(s, m.get(s))) or "-",
        ]
        rows.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return rows


def _failed(step: str, outcome: dict[str, Any], batchable: bool) -> bool:
    verdict = outcome.get("verdict")
    if verdict in WRONG or verdict in BROKEN or verdict == "judge error":
        return True
    if step == "suggest":
        return False
    return (verdict == "refused") == batchable and verdict in ("refused", "right")


def findings(data: dict[str, Any]) -> str:
    """Every miss, wrong output and crash: the model, the step, the command to rerun it, and its first lines."""
    lines = [
        "# Corpus findings (benchmarks/corpus, helper `corpus`)",
        "",
        "Written by `benchmarks/corpus/report.py --findings` from `benchmarks/results/corpus.json`.",
        "Each model's folder holds `model.onnx` (the original), the generated specs and every output;",
        "rerun a step with the command shown, from that folder. Judge an output by hand with",
        "`python benchmarks/corpus/judge.py KEY model.onnx OUTPUT --batch 4` (from the repo, manifest keys).",
        "Rerun one model's every step: `CORPUS_MODELS=/work/wt/corpus-models .venv/bin/python "
        "benchmarks/corpus/run.py --only KEY`.",
        "",
    ]
    lines += summarize(data["models"]) + [""]
    for key, model in sorted(data["models"].items()):
        batchable = bool(model.get("batchable"))
        for step in (*SET_BATCH, "init_apply", "suggest", "polygraphy"):
            outcome = model.get(step) or {}
            if not _failed(step, outcome, batchable):
                continue
            run = outcome.get("run") or outcome.get("init") or {}
            if outcome.get("verdict") == "refused" and "init" in outcome and "run" not in outcome:
                run = outcome["init"]
            label = "not batchable" if not batchable else "batchable"
            lines += [
                f"## {key} / {step}: {outcome.get('verdict')} ({label}; {model['exporter']})",
                "",
                f"- folder: `{model.get('work')}` (original: {model['package']} `{model['path']}`)",
                f"- command: `cd {model.get('work')} && {run.get('command', '?')}`",
                f"- exit: {run.get('exit')}",
            ]
            if outcome.get("detail"):
                lines.append(f"- judge: {outcome['detail']}")
            lines += [f"- first lines: {run.get('first_lines', '')}", ""]
    return "\n".join(lines) + "\n"


def section(data: dict[str, Any]) -> str:
    models = data["models"]
    found = ", ".join(f"{k} {v}" for k, v in sorted(data.get("versions", {}).items()))
    parts = [BEGIN, "", f"Measured on {data.get('machine', '?')} ({found}) with `{data.get('command', '')}`.", ""]
    parts += rates(models) + [""] + summarize(models) + [""] + table(models) + ["", END]
    return "\n".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--print", action="store_true", help="print the section, write nothing")
    parser.add_argument("--findings", type=Path, help="also write every failure, with how to rerun it, here")
    args = parser.parse_args()
    data = json.loads(RESULTS.read_text())
    if args.findings:
        args.findings.write_text(findings(data))
        print(f"report: wrote {args.findings}")
    text = section(data)
    if args.print:
        print(text)
        return
    doc = DOC.read_text()
    if BEGIN not in doc or END not in doc:
        raise SystemExit(f"report: {DOC} has no corpus table markers ({BEGIN!r} ... {END!r})")
    before, rest = doc.split(BEGIN, 1)
    after = rest.split(END, 1)[1]
    DOC.write_text(before + text + after)
    print(f"report: wrote the corpus table into {DOC}")


if __name__ == "__main__":
    main()
