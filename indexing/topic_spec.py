"""The generated chunk summary inside `topic-spec.md`; text outside its markers is never touched."""

from __future__ import annotations

import re
from typing import Any

from markdown_it import MarkdownIt

BEGIN = "<!-- mdindex:begin (generated; edits inside these markers are replaced) -->"
END = "<!-- mdindex:end -->"
_BEGIN_PREFIX = "<!-- mdindex:begin"
_NEWLINE = re.compile(r"\r\n?|\n")  # the line breaks markdown-it counts lines by


def _cell(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def render_section(title: str, chunks: dict[str, Any]) -> str:
    """The marked section: per source, a table of index, title, is_code, sims, keywords, prompts."""
    lines = [BEGIN, f"## Chunks of {title}", ""]
    if not chunks:
        lines += ["No chunked sources.", ""]
    for entry in chunks.values():
        technical = "baseline_technical" in entry
        lines += [f"### {entry['source']}", ""]
        count = f"{entry['count']} chunk{'' if entry['count'] == 1 else 's'}"
        lines += [f"{count}; stripe order: {entry['stripe_order']}"]
        if technical:
            lines += [f"technical stripe order: {entry['stripe_order_technical']}"]
        lines += [
            "",
            "| index | title | is_code | sim. conceptual | sim. technical | keywords | prompts |",
            "|---:|---|---|---:|---:|---|---:|",
        ]
        for item in entry["items"]:
            keywords = ", ".join(f"{k['name']} ({k['score']})" for k in item["keywords"])
            cells = [
                item["index"],
                item["title"],
                "yes" if item["is_code"] else "no",
                item["similarity_conceptual"],
                item.get("similarity_technical", ""),
                keywords,
                len(item.get("prompt_hashes", ())),
            ]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
        lines.append("")
    lines.append(END)
    return "\n".join(lines) + "\n"


def _section_span(text: str) -> tuple[int, int] | None:
    """(start, end) of the generated section: the first end marker with a begin marker before it,
    and the last such begin, each a top-level HTML block of its own line (as CommonMark reads the
    file), so a marker in any code block, quote or list is the person's text. A marker quoted in
    a person's code block, or a chunk title holding one (inside a table row), once made a section
    that grew on every rebuild; one quoted in a fence that a shorter fence line does not close
    (a "````" block holding "```", a "```" block holding "```python") replaced the person's
    text with the section."""
    starts = [0, *(m.end() for m in _NEWLINE.finditer(text)), len(text)]
    begin = None
    for token in MarkdownIt("commonmark").parse(text):
        if token.type != "html_block" or token.level != 0 or token.map is None:
            continue
        first, _ = token.map
        line = token.content.split("\n", 1)[0].strip()
        if line.startswith(_BEGIN_PREFIX):
            begin = starts[first]
        elif line == END and begin is not None:
            return begin, starts[first + 1]
    return None


def merge_section(existing: str | None, section: str) -> str:
    """`existing` with its generated section replaced by `section` (appended when it has none)."""
    if not existing:
        return section
    span = _section_span(existing)
    if span is None:
        separator = (
            "" if existing.endswith("\n\n") else ("\n" if existing.endswith("\n") else "\n\n")
        )
        return existing + separator + section
    return existing[: span[0]] + section + existing[span[1] :]


def without_section(existing: str) -> str | None:
    """`existing` without the generated section; None when nothing written by a person is left."""
    span = _section_span(existing)
    if span is None:
        return existing
    before, after = existing[: span[0]], existing[span[1] :]
    if not (before + after).strip():
        return None
    return before + after if after else before.rstrip("\n") + "\n"  # drop merge's blank line
