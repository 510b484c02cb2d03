"""docs/hooks/cli_reference.py: the CLI reference page is generated from the app, whole, and builds strictly.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import pytest
import typer
import typer.main

from foxhunt.cli import app

REPO = Path(__file__).resolve().parents[2]
HOOK = REPO / "docs" / "hooks" / "cli_reference.py"
MODE_HELP = "a | b <tag> *not bold* `x | y`"  # module level: the annotations are evaluated in the module


def load_hook():
    spec = importlib.util.spec_from_file_location("cli_reference", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


hook = load_hook()


def commands(group, prefix="foxhunt"):
    ctx = group.make_context(prefix, [], resilient_parsing=True)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd.hidden:
            continue
        yield f"{prefix} {name}", cmd
        if hasattr(cmd, "list_commands"):
            yield from commands(cmd, f"{prefix} {name}")


def test_every_command_and_every_option_of_the_app_is_in_the_reference() -> None:
    text = hook.foxhunt_reference()
    root = typer.main.get_command(app)
    found = list(commands(root))
    assert len(found) >= 11
    missing = []
    for name, cmd in [("foxhunt", root), *found]:
        if f"\n## {name}\n" not in f"\n{text}":
            missing.append(f"heading {name}")
        section = text.split(f"## {name}\n", 1)[1].split("\n## ", 1)[0]
        for p in (p for p in cmd.params if not getattr(p, "hidden", False)):
            flags = p.opts + p.secondary_opts if p.param_type_name == "option" else [p.metavar or p.name]
            missing += [f"{name} {flag}" for flag in flags if flag not in section]
        first_line = (cmd.help or "").split("\n")[0].split("`")[0][:40]
        if first_line and first_line not in section.replace("\\", ""):
            missing.append(f"{name} help: {first_line!r}")
    assert not missing, missing


def test_options_are_grouped_by_help_panel_with_their_defaults() -> None:
    train = hook.foxhunt_reference().split("## foxhunt train\n", 1)[1].split("\n## ", 1)[0]
    panels = [line for line in train.splitlines() if line.startswith("**") and line.endswith("**")]
    assert panels[0] == "**Options**" and {"**Data**", "**Model**", "**Training**"} <= set(panels)
    assert len(panels) == len(set(panels))
    assert "| `--epochs N` | `auto` | Epochs, or auto: 3-30 by data size. |" in train.split("**Training**", 1)[1]
    assert "| `--horizon N` | `5` |" in train.split("**Data**", 1)[1].split("**", 1)[0]


def test_a_page_without_the_marker_is_left_unchanged() -> None:
    for page in ("", "# Title\n\nNo reference here: `<!-- cli-reference -->` is quoted.\n",
                 "text <!-- cli-reference --> inside a line\n"):
        assert hook.on_page_markdown(page, None, None, None) == page


def test_the_marker_line_becomes_the_reference_and_the_rest_stays() -> None:
    page = "# Command line\n\nBefore.\n\n  <!-- cli-reference -->\n\nAfter.\n"
    out = hook.on_page_markdown(page, None, None, None)
    assert out.startswith("# Command line\n\nBefore.\n\n## foxhunt\n") and out.endswith("\n\nAfter.\n")
    assert out.count("\n## foxhunt train\n") == 1 and "cli-reference" not in out


def test_help_texts_are_escaped_outside_code_spans() -> None:
    tiny = typer.Typer(add_completion=False, rich_markup_mode=None)

    @tiny.command()
    def go(mode: Annotated[str, typer.Option(help=MODE_HELP, rich_help_panel="Data")] = "a",
           path: Annotated[str, typer.Argument(help="Where <to>.")] = ".") -> None:
        """Run <it> | twice, with a_b_c."""

    @tiny.command()
    def other() -> None:
        """A second command, so that the app is a group."""

    text = hook.reference(typer.main.get_command(tiny), "tiny")
    assert "## tiny go\n" in text and "Run &lt;it&gt; \\| twice, with a\\_b\\_c." in text
    row = "| `--mode <str>` | `a` | a \\| b &lt;tag&gt; \\*not bold\\* `x | y` |"
    assert row in text.split("**Data**")[1]
    assert "| `path <str>` | `.` | Where &lt;to&gt;. |" in text.split("**Arguments**")[1]


def test_a_strict_mkdocs_build_of_the_reference_passes(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("material")
    docs = tmp_path / "docs"
    (docs / "reference").mkdir(parents=True)
    (docs / "index.md").write_text("# foxhunt\n\nThe [command line](reference/cli.md).\n")
    (docs / "reference" / "cli.md").write_text("# Command line\n\n<!-- cli-reference -->\n")
    (tmp_path / "mkdocs.yml").write_text(f"site_name: foxhunt\ndocs_dir: docs\ntheme:\n  name: material\n"
                                         f"hooks:\n  - {HOOK}\nnav:\n  - index.md\n  - reference/cli.md\n")
    build = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(tmp_path / "mkdocs.yml"),
             "-d", str(tmp_path / "site")]
    out = subprocess.run(build, capture_output=True, text=True, timeout=180,
                         env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    html = (tmp_path / "site" / "reference" / "cli" / "index.html").read_text()
    assert 'id="foxhunt-train"' in html
    assert "<code>-f, --parquet-file PATH</code>" in html and html.count("<table>") >= 12
