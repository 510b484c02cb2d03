"""The examples of a markdown page: its fenced ```bash, ```sh and ```python blocks, in document order.

The conventions every page of the docs follows (README.md and docs/**/*.md), so that each example is run by
tests/docs/test_examples.py and none goes stale:

- a block tagged ```bash, ```sh or ```python runs (the tag is the first word of the fence's info string, so
  ```python title="fit.py" runs too); ```console, ```text, any other tag and untagged blocks do not;
- a block directly preceded (blank lines aside) by a line `<!-- skip: REASON -->` does not run, and REASON is
  required: a skip without one, or one that sits above no runnable block, is an error in the page.

Fences may be indented (in a list item, an admonition, a content tab): the block's lines lose that indent.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

RUNNABLE = ("bash", "sh", "python")
SKIP = re.compile(r"^\s*<!--\s*skip\b(?P<rest>.*?)-->\s*$")
OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


class PageError(ValueError):
    """The page breaks the conventions (a skip without a reason, a stray skip, an unclosed fence)."""


@dataclass(frozen=True)
class Block:
    """One runnable block: its tag, its text, the page line of its opening fence, and why it is skipped (None:
    it runs)."""

    lang: str
    code: str
    line: int
    skip: str | None = None

    @property
    def first_code_line(self) -> int:
        return self.line + 1


def skip_reason(line: str, source: str, number: int) -> str | None:
    """The reason of a `<!-- skip: REASON -->` line; None when the line is no skip comment."""
    m = SKIP.match(line)
    if m is None:
        return None
    rest = m["rest"].strip()
    reason = rest[1:].strip() if rest.startswith(":") else ""
    if not reason:
        raise PageError(f"{source}:{number}: a skip needs a reason: "
                        "write <!-- skip: why this block cannot run -->")
    return reason


def blocks(text: str, source: str = "<page>") -> list[Block]:
    """The bash, sh and python blocks of `text`, in order, each with its skip reason (None: it runs). `source`
    names the page in errors."""
    lines = text.splitlines()
    out: list[Block] = []
    pending: tuple[int, str] | None = None  # (line, reason) of a skip comment waiting for its block
    i = 0
    while i < len(lines):
        line, number = lines[i], i + 1
        opening = OPEN.match(line)
        if opening and not (opening["fence"][0] == "`" and "`" in opening["info"]):
            indent, fence = len(opening["indent"]), opening["fence"]
            words = opening["info"].split()
            lang = words[0].lower() if words else ""
            close = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
            end = next((j for j in range(i + 1, len(lines)) if close.match(lines[j])), None)
            if end is None:
                raise PageError(f"{source}:{number}: the fenced block opened here is never closed")
            body = [dedent(x, indent) for x in lines[i + 1:end]]
            if pending is not None and lang not in RUNNABLE:
                what = f"```{lang}" if lang else "an untagged"
                raise PageError(f"{source}:{pending[0]}: the skip sits above {what} block, which never runs; "
                                "remove it")
            if lang in RUNNABLE:
                out.append(Block(lang, "\n".join(body) + "\n", number, pending[1] if pending else None))
            pending = None
            i = end + 1
            continue
        reason = skip_reason(line, source, number)
        if reason is not None:
            if pending is not None:
                raise PageError(f"{source}:{pending[0]}: two skips in a row; keep one above the block")
            pending = (number, reason)
        elif line.strip() and pending is not None:
            raise PageError(f"{source}:{pending[0]}: a skip must sit directly above the bash, sh or python "
                            "block it skips (blank lines aside)")
        i += 1
    if pending is not None:
        raise PageError(f"{source}:{pending[0]}: the skip sits above no block")
    return out


def dedent(line: str, indent: int) -> str:
    """`line` without up to `indent` leading spaces or tabs (the fence's own indent)."""
    n = 0
    while n < indent and n < len(line) and line[n] in " \t":
        n += 1
    return line[n:]
