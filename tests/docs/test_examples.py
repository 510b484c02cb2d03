"""Every example in README.md and docs/**/*.md runs as written, from a fresh directory, as a reader would run
it.

One test per page. The conventions are in tests/docs/blocks.py (which blocks run, `<!-- skip: REASON -->`);
how a page runs is in tests/docs/pages.py: a fresh temporary directory per page, where the examples may read
`tests/fixtures/...` (a link to the repository's bundled files, as at a clone's root) and write anything else;
bash blocks under `bash -euo pipefail`, python blocks in one namespace per page; `foxhunt` on PATH is this
checkout's; one thread per library; at most PAGE_TIMEOUT_S per page. A failure shows the first failing block,
its text and the tails of its stdout and stderr.

The tests below the page tests check the machinery itself, on inline pages and on
tests/docs/data/sample_page.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.docs.blocks import Block, PageError, blocks
from tests.docs.pages import PAGE_TIMEOUT_S, REPO, report, run_page

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
SAMPLE = Path(__file__).with_name("data") / "sample_page.md"


@pytest.mark.parametrize("page", [pytest.param(p, id=str(p.relative_to(REPO))) for p in PAGES])
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    found = blocks(page.read_text(encoding="utf-8"), str(page.relative_to(REPO)))  # a bad skip fails here
    if not any(b.skip is None for b in found):
        pytest.skip(f"no bash, sh or python block to run ({len(found)} skipped)")
    run = run_page(page, tmp_path, timeout=PAGE_TIMEOUT_S)
    if not run.ok:
        pytest.fail(report(run), pytrace=False)


def page(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text, encoding="utf-8")
    return path


def fence(lang: str, code: str) -> str:
    return f"```{lang}\n{code}\n```\n"


# The extractor


def test_only_bash_sh_and_python_blocks_run_in_document_order() -> None:
    text = "\n".join([fence("python", "a = 1"), fence("console", "$ exit 1"), fence("text", "exit 1"),
                      fence("", "exit 1"), fence("toml", "x = 1"), fence("sh", "echo sh"),
                      fence('python title="b.py"', "b = 2"), fence("bash", "echo bash")])
    found = blocks(text)
    assert [(b.lang, b.code) for b in found] == [("python", "a = 1\n"), ("sh", "echo sh\n"),
                                                 ("python", "b = 2\n"), ("bash", "echo bash\n")]
    assert [b.line for b in found] == [1, 21, 25, 29]  # the opening fences' lines
    assert all(b.skip is None for b in found)


def test_a_skip_with_a_reason_skips_the_next_block_blank_lines_aside() -> None:
    text = ("intro\n\n<!-- skip: needs a GPU -->\n\n\n" + fence("bash", "foxhunt train --use-gpu")
            + fence("bash", "ls"))
    first, second = blocks(text)
    assert first.skip == "needs a GPU" and first.code == "foxhunt train --use-gpu\n"
    assert second.skip is None


@pytest.mark.parametrize("comment", ["<!-- skip -->", "<!-- skip: -->", "<!--skip:   -->",
                                     "<!-- skip reason -->"])
def test_a_skip_without_a_reason_is_an_error_naming_its_line(comment: str) -> None:
    with pytest.raises(PageError, match=r"^guide\.md:3: a skip needs a reason"):
        blocks(f"# Guide\n\n{comment}\n" + fence("bash", "ls"), "guide.md")


@pytest.mark.parametrize(("text", "why"), [
    ("<!-- skip: x -->\nsome prose\n" + fence("bash", "ls"), "directly above"),
    ("<!-- skip: x -->\n" + fence("console", "$ ls"), "never runs"),
    ("text\n<!-- skip: x -->\n", "above no block"),
    ("<!-- skip: x -->\n<!-- skip: y -->\n" + fence("bash", "ls"), "two skips"),
    ("```bash\nls\n", "never closed"),
])
def test_a_skip_that_skips_nothing_and_an_unclosed_fence_are_errors(text: str, why: str) -> None:
    with pytest.raises(PageError, match=why):
        blocks(text)


def test_indented_tilde_and_long_fences() -> None:
    text = ("1. Install:\n\n    ```bash\n    echo one\n      echo indented\n    ```\n\n"
            "~~~python\nx = '```'\n~~~\n\n````python\n```bash\nnot a fence\n```\n````\n")
    found = blocks(text)
    assert [b.code for b in found] == ["echo one\n  echo indented\n", "x = '```'\n",
                                       "```bash\nnot a fence\n```\n"]
    assert [b.lang for b in found] == ["bash", "python", "python"]


def test_a_skip_comment_inside_a_block_is_the_block_s_text() -> None:
    assert blocks(fence("bash", "<!-- skip -->")) == [Block("bash", "<!-- skip -->\n", 1)]


# The runner


def test_python_blocks_share_a_namespace_and_bash_blocks_the_directory(tmp_path: Path) -> None:
    text = "\n".join([fence("python", "x = 41\ndef twice(v):\n    return 2 * v"),
                      fence("python", "print(twice(x + 1))\nopen('answer.txt', 'w').write(str(x + 1))"),
                      fence("bash", "cat answer.txt\necho; ls"), fence("python", "print(__name__)")])
    run = run_page(page(tmp_path, text), tmp_path / "work", timeout=60)
    assert run.ok, report(run)
    assert [o.stdout for o in run.outcomes] == ["", "84\n", "42\nanswer.txt\ntests\n", "__main__\n"]


def test_each_page_starts_in_a_fresh_directory_with_the_fixtures_at_tests_fixtures(tmp_path: Path) -> None:
    writes = page(tmp_path, fence("bash", "touch mine.txt\nls -A"))
    first = run_page(writes, tmp_path / "a", timeout=60)
    second = run_page(writes, tmp_path / "b", timeout=60)
    assert first.ok and second.ok
    assert first.outcomes[0].stdout == second.outcomes[0].stdout == "mine.txt\ntests\n"
    reads = page(tmp_path, fence("bash", "test -f tests/fixtures/generic_ohlcv_daily.parquet && pwd"))
    run = run_page(reads, tmp_path / "c", timeout=60)
    assert run.ok, report(run)
    assert Path(run.outcomes[0].stdout.strip()) == (tmp_path / "c" / "page").resolve()


def test_foxhunt_and_python_on_path_are_this_checkout_s(tmp_path: Path) -> None:
    text = fence("bash", "foxhunt --help | head -3\npython -c 'import foxhunt; print(foxhunt.__file__)'\n"
                 "echo $OMP_NUM_THREADS")
    run = run_page(page(tmp_path, text), tmp_path / "work", timeout=120)
    assert run.ok, report(run)
    out = run.outcomes[0].stdout.splitlines()
    assert out[0].startswith("Usage: foxhunt")
    assert Path(out[-2]) == REPO / "src" / "foxhunt" / "__init__.py"
    assert out[-1] == os.environ.get("OMP_NUM_THREADS", "1")


@pytest.mark.parametrize("code", ["false\necho after", "false | cat\necho after",
                                  "echo $UNSET_VARIABLE_X\necho after"])
def test_a_failing_line_fails_its_bash_block_and_the_page_stops(tmp_path: Path, code: str) -> None:
    text = fence("bash", "echo before") + "\nprose\n\n" + fence("bash", code) + fence("bash", "echo never")
    run = run_page(page(tmp_path, text), tmp_path / "work", timeout=60, name="guide.md")
    assert not run.ok and len(run.outcomes) == 2  # the third block never started
    assert run.outcomes[1].stdout == ""
    message = report(run)
    assert message.startswith("guide.md:7: the ```bash block failed (exit 1):\n")
    assert "    " + code.splitlines()[0] in message


def test_a_python_failure_reports_its_traceback_with_the_page_s_line(tmp_path: Path) -> None:
    code = "import sys\nprint('half way')\nprint('oops', file=sys.stderr)\n1 / 0"
    text = "# Title\n\n" + fence("python", code)
    run = run_page(page(tmp_path, text), tmp_path / "work", timeout=60, name="guide.md")
    message = report(run)
    assert message.startswith("guide.md:3: the ```python block failed (exit 1):\n")
    assert "--- stdout ---\nhalf way\n" in message
    assert 'File "guide.md", line 7' in message and "ZeroDivisionError" in message and "oops" in message
    assert "run_blocks.py" not in message


def test_a_page_past_its_time_limit_names_the_running_block_and_what_it_printed(tmp_path: Path) -> None:
    text = (fence("bash", "echo quick") + fence("bash", "echo started\nsleep 60\necho never")
            + fence("bash", "ls"))
    run = run_page(page(tmp_path, text), tmp_path / "work", timeout=3, name="slow.md")
    assert run.timed_out and not run.ok
    assert [o.rc for o in run.outcomes] == [0, None]
    message = report(run, timeout=3)
    assert message.startswith("slow.md:4: the ```bash block was still running after 3 s (the page's limit):")
    assert "--- stdout ---\nstarted\n" in message


def test_a_page_that_writes_into_the_fixtures_fails(tmp_path: Path) -> None:
    fixtures = tmp_path / "fixtures"
    fixtures.mkdir()
    (fixtures / "bars.csv").write_text("ts,close\n")
    text = fence("bash", "echo more >> tests/fixtures/bars.csv")
    run = run_page(page(tmp_path, text), tmp_path / "work", timeout=60, name="guide.md", fixtures=fixtures)
    assert run.fixtures_changed and not run.ok
    assert report(run).startswith("guide.md: its examples wrote into tests/fixtures")


def test_an_example_s_sys_exit_is_its_block_s_status(tmp_path: Path) -> None:
    text = fence("python", "import sys\nsys.exit(0)") + fence("python", "sys.exit('no data: stop')")
    run = run_page(page(tmp_path, text), tmp_path / "work", timeout=60)
    assert [o.rc for o in run.outcomes] == [0, 1]
    assert run.outcomes[1].stderr == "no data: stop\n"


def test_skipped_blocks_do_not_run(tmp_path: Path) -> None:
    text = "<!-- skip: fails on purpose -->\n" + fence("bash", "exit 1") + fence("bash", "echo ran")
    run = run_page(page(tmp_path, text), tmp_path / "work", timeout=60)
    assert run.ok and [o.stdout for o in run.outcomes] == ["ran\n"]
    assert [b.skip for b in run.skipped] == ["fails on purpose"]


def test_the_sample_page_runs_and_leaves_its_files_in_its_own_directory(tmp_path: Path) -> None:
    run = run_page(SAMPLE, tmp_path, timeout=PAGE_TIMEOUT_S)
    assert run.ok, report(run)
    assert [o.block.lang for o in run.outcomes] == ["bash", "python", "python", "python", "sh"]
    assert len(run.skipped) == 1
    assert "'sample': " in run.outcomes[2].stdout
    written = {p.name for p in (tmp_path / "page").iterdir()}
    assert written == {"tests", "sample.parquet", "inspect.txt", "head.csv"}
    assert not (REPO / "sample.parquet").exists()
