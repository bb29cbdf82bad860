"""Every command block of README.md and docs/*.md is run as written, or says why not; what a run
block's commands print is what the page shows (tests/docs/doc_blocks.py says how blocks are marked)."""

from __future__ import annotations

import importlib.util

import pytest
from doc_blocks import PAGES, REPO, blocks, matches, normal, problems, rewrite, run_page, scratch_project

RUN = [page for page in PAGES if any(block.runs for block in blocks(page))]
#: pages whose transcript runs a test that needs a tool of the lint extra (make test has it, the oldest
#: versions' environment has not): there the page is skipped, saying so
NEEDS = {"examples/plugin-acme/README.md": "mypy"}


def test_every_command_block_is_run_or_says_why_not():
    unmarked = [block.where for page in PAGES for block in blocks(page) if block.marker is None]
    assert not unmarked, (
        "mark each with <!-- run --> or <!-- not run: REASON --> on the line above (tests/docs/doc_blocks.py): "
        + ", ".join(unmarked)
    )


@pytest.mark.parametrize("page", RUN, ids=[page.relative_to(REPO).as_posix() for page in RUN])
def test_the_page_runs_as_written(page, tmp_path):
    needed = NEEDS.get(page.relative_to(REPO).as_posix())
    if needed and importlib.util.find_spec(needed) is None:
        pytest.skip(f"its transcript runs a test that needs {needed} (the lint extra), not installed here")
    outcomes = run_page(page, scratch_project(tmp_path / "project"))
    found = problems(outcomes)
    assert not found, "\n\n".join(found) + "\n\nafter a deliberate change: python tests/docs/doc_blocks.py --write PAGE"


def page(tmp_path, text: str):
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_transcript_that_differs_is_found_and_rewritten(tmp_path):
    written = page(
        tmp_path,
        "<!-- setup:\nprintf 'a\\nb\\n' > f.txt\n-->\n\n<!-- run -->\n```console\n$ cat f.txt\na\nc\n"
        "$ cat missing.txt\n$ echo done\ndone\n```\n",
    )
    folder = scratch_project(tmp_path / "project")
    outcomes = run_page(written, folder)
    found = problems(outcomes)
    assert len(found) == 3 and "  the doc shows:\na\nc\n  it printed:\na\nb" in found[0], found
    assert "exited 1, the doc says 0" in found[1]
    assert rewrite(written, outcomes, folder) == 2
    text = written.read_text(encoding="utf-8")
    assert "$ cat f.txt\na\nb\n$ cat missing.txt  # exits 1\ncat: missing.txt: No such file or directory\n" in text
    assert not problems(run_page(written, scratch_project(tmp_path / "again")))


def test_a_block_without_a_marker_or_reason_is_found(tmp_path):
    found = blocks(
        page(tmp_path, "```sh\nls\n```\n\n<!-- not run: needs the network -->\n```console\n$ pip download x\n```\n")
    )
    assert [block.marker for block in found] == [None, "not run: needs the network"]


def test_an_ellipsis_stands_for_any_lines_and_figures_are_compared_by_form():
    assert matches(["a", "...", "d"], ["a", "b", "c", "d"]) and matches(["a", "...", "d"], ["a", "d"])
    assert not matches(["a", "...", "d"], ["a", "b"]) and not matches(["a"], ["a", "b"])
    assert normal("onnx 1.23.2 checker, 0.013 s, max abs error 4.77e-07") == normal(
        "onnx 1.17.0 checker, 2 s, max abs error 0"
    )
    assert normal("exit 6") == "exit 6"


def test_a_script_block_that_fails_fails_the_page_wherever_it_stands(tmp_path):
    written = page(
        tmp_path,
        "<!-- run -->\n```console\n$ echo one\none\n```\n\n<!-- run -->\n```sh\ntrue\nfalse\necho never\n```\n",
    )
    with pytest.raises(AssertionError, match=r"a block or setup failed after page.md:2"):
        run_page(written, scratch_project(tmp_path / "project"))
