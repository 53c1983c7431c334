"""The generated chunk summary inside `topic-spec.md`; text outside its markers is never touched."""

from __future__ import annotations

from typing import Any

from chunking.blocks import closers_for_open_fences, parse_tokens
from indexing.terminal import counted

BEGIN = "<!-- mdindex:begin (generated; edits inside these markers are replaced) -->"
END = "<!-- mdindex:end -->"
_BEGIN_PREFIX = "<!-- mdindex:begin"
# The failure a build reports for a person's topic-spec.md it leaves as it is (bytes a source's
# `chunking.normalize.decode` refuses: not UTF-8, UTF-16, a NUL byte; rewriting it would corrupt
# it; `jobs.stages.topic`)
TOPIC_SPEC_FAILED = "TOPIC_SPEC_FAILED"


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
        count = counted(entry["count"], "chunk")
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
    and the last such begin, each a line of its own outside code blocks as CommonMark reads the
    file (`parse_tokens`). A marker quoted in a person's code block, or a chunk title holding one
    (inside a table row), once made a section that grew on every rebuild; one quoted in a fence
    that a shorter fence line does not close (a "````" block holding "```", a "```" block holding
    "```python"), or in indented code, replaced the person's lines with the section."""
    code = {
        number
        for token in parse_tokens(text)
        if token.type in ("fence", "code_block") and token.map
        for number in range(*token.map)
    }
    begin = None
    offset = 0
    for number, line in enumerate(text.split("\n")):
        stripped = line.strip() if number not in code else ""
        if stripped.startswith(_BEGIN_PREFIX):
            begin = offset
        elif stripped == END and begin is not None:
            return begin, min(offset + len(line) + 1, len(text))
        offset += len(line) + 1
    return None


def merge_section(existing: str | None, section: str) -> str:
    """`existing` with its generated section replaced by `section` (appended when it has none,
    after a line closing each fence the person's text leaves open: in that fence, the section
    was code, never found again, and one more was appended on every rebuild)."""
    if not existing:
        return section
    span = _section_span(existing)
    if span is None:
        body = existing if existing.endswith("\n") else existing + "\n"
        body += "".join(f"{line}\n" for line in closers_for_open_fences(existing))
        return body + ("" if body.endswith("\n\n") else "\n") + section
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
