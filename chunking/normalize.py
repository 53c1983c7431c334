"""Decode a source, normalise its line endings and split off front matter (seed 002 section 2):
YAML between `---` lines, or TOML between `+++` lines (Hugo's), and an MDX module preamble after it
(`import Tabs from '@theme/Tabs';`, `export const x = 1;`: Docusaurus' pages).

Line numbers stay those of the original file: `NormalizedDocument.lines[n - 1]` is original line n,
front matter included, and the body starts at `lines[body_start]`.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import json
import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from typing import Any

import yaml

from chunking.record import (
    CHUNKING_FAILED,
    DRAFT_MARKS,
    FRONT_MATTER_TOO_LARGE,
    INVALID_FRONT_MATTER,
    ChunkingError,
    is_draft,
)
from chunking.yaml_keys import UniqueKeyLoader

_BOM = "\ufeff"
_UTF16_BOMS = {b"\xff\xfe": "FF FE", b"\xfe\xff": "FE FF"}
# opening line: (format, closing lines)
_FRONT_MATTER = {"---": ("YAML", ("---", "...")), "+++": ("TOML", ("+++",))}
_TOML_WHERE = re.compile(r" \(at (?:line (\d+), column (\d+)|end of document)\)$")
# The first line of an MDX ESM block (an `import` or `export` statement at the start of a line), and
# how an import block ends: its last module name, or a semicolon (a block of imports and exports).
_ESM_START = re.compile(
    r"import\s*(?:[\w$]+\s*(?:,|from\b)|[{*'\"])"
    r"|export\s+(?:const|let|var|function|async|class|default)\b|export\s*[{*]"
)
_IMPORT_END = re.compile(r"(?:['\"]|;)[ \t]*$")
# Front matter bounds: YAML aliases can make a few hundred bytes expand to gigabytes.
MAX_FRONT_MATTER_CHARS = 65_536  # the YAML or TOML text between the markers
MAX_FRONT_MATTER_NODES = 100_000  # scalars' characters plus one per node, aliases expanded
MAX_FRONT_MATTER_DEPTH = 32


@dataclass(frozen=True)
class NormalizedDocument:
    """A decoded source with LF line endings and front matter split off, line numbers kept."""

    lines: tuple[str, ...]  # every line of the file (front matter too); lines[n - 1] is line n
    # index in `lines` of the first body line: the number of front matter lines, and of the MDX
    # module preamble's lines after them (`_module_preamble_end`)
    body_start: int
    front_matter: dict[str, Any] = field(hash=False)
    source_version_id: str  # sha256 hex of the raw source bytes

    @property
    def body(self) -> str:
        """The markdown after the front matter, always ending with a newline when not empty."""
        body_lines = self.lines[self.body_start :]
        return "\n".join(body_lines) + "\n" if body_lines else ""


def front_matter_title(front_matter: dict[str, Any]) -> str:
    """The front matter's `title` on one line (its lines stripped, joined by spaces); "" when it
    has none, or one that is no string."""
    title = front_matter.get("title")
    if not isinstance(title, str):
        return ""
    return " ".join(line.strip() for line in title.splitlines() if line.strip())


def as_published(source: NormalizedDocument) -> NormalizedDocument:
    """`source` as its site publishes it: a draft (`chunking.record.is_draft`) as an empty page
    whose front matter holds only the entries that mark it, so its text and title are in no
    chunk and name no topic; any other source as it is."""
    if not is_draft(source.front_matter):
        return source
    marks = {key: value for key, value in DRAFT_MARKS if source.front_matter.get(key) is value}
    return replace(source, lines=(), body_start=0, front_matter=marks)


def decode(data: bytes) -> str:
    """UTF-8 text of `data` without a BOM; UTF-16, invalid UTF-8 or a NUL byte raises
    CHUNKING_FAILED, its message saying which (a topic's own files, qa-pairs.md, keywords and
    topic-spec.md, are read with it too, their failures saying the same)."""
    utf16 = _utf16_hint(data)
    if utf16:
        raise ChunkingError(CHUNKING_FAILED, f"looks like UTF-16 ({utf16}); save it as UTF-8")
    nul = data.find(b"\x00")
    binary = ChunkingError(
        CHUNKING_FAILED, f"binary content: NUL byte at byte offset {nul}{_line_of(data, nul)}"
    )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if 0 <= nul < exc.start:  # the first thing wrong (an executable's NUL at byte 7)
            raise binary from None
        raise ChunkingError(CHUNKING_FAILED, invalid_utf8(data, exc)) from None
    if nul >= 0:
        raise binary
    return text.removeprefix(_BOM)


def invalid_utf8(data: bytes, error: UnicodeDecodeError) -> str:
    """Where `data` is not UTF-8, as a writer goes to it: "invalid UTF-8 at byte offset 90 (line
    3): invalid start byte" (`decode`'s, a source's CHUNKING_FAILED and a topic's own files'
    failures: `jobs.report_html.failure_line` reads the line)."""
    return (
        f"invalid UTF-8 at byte offset {error.start}{_line_of(data, error.start)}: {error.reason}"
    )


def _line_of(data: bytes, offset: int) -> str:
    """' (line N)' for the line of `data` that byte `offset` is on: a writer's editor goes to a
    line, not a byte (until 2026-11-30 the message gave the offset alone)."""
    line = data.count(b"\n", 0, offset) + 1
    return f" (line {line})"


def _utf16_hint(data: bytes) -> str:
    """Why `data` looks like UTF-16 ("" when it does not): a UTF-16 byte order mark, or NUL
    bytes at every other offset of its first 64 bytes (ASCII text in UTF-16 without a mark)."""
    for mark, name in _UTF16_BOMS.items():
        if data.startswith(mark):
            return f"byte order mark {name}"
    head = data[:64]
    for parity, name in ((1, "little-endian"), (0, "big-endian")):
        if len(head) >= 8 and set(head[parity::2]) == {0} and 0 not in head[1 - parity :: 2]:
            return f"{name}, no byte order mark"
    return ""


def split_lines(text: str) -> tuple[str, ...]:
    """Lines of `text`, CRLF and lone CR counting as LF; a final newline adds no empty line."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    if not text:
        return ()
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return tuple(lines)


def normalize(data: bytes | str) -> NormalizedDocument:
    """Decode and normalise one source (text, or bytes-like); front matter is parsed with
    `_FrontMatterLoader` (YAML 1.2) or tomllib. TypeError for anything else: `bytes()` made an
    int's NUL bytes of it, and a `Path` its own name."""
    if isinstance(data, str):
        raw = data.encode("utf-8", "surrogatepass")
    elif isinstance(data, (bytes, bytearray, memoryview)):
        raw = bytes(data)
    else:
        raise TypeError(
            f"a markdown source is str or bytes, got {type(data).__name__} "
            "(a file is chunked from its bytes: Path(p).read_bytes())"
        )
    lines = split_lines(decode(raw))
    front_matter, body_start = _front_matter(lines)
    return NormalizedDocument(
        lines=lines,
        body_start=_module_preamble_end(lines, body_start),
        front_matter=front_matter,
        source_version_id=hashlib.sha256(raw).hexdigest(),
    )


def _module_preamble_end(lines: tuple[str, ...], start: int) -> int:
    """The index in `lines` after the MDX module preamble that begins at `start` (`start` when
    there is none): the blocks of lines (up to a blank line) from there on, blank lines between
    them, that are ESM, as MDX reads them: a first line that starts an `import` or `export`
    statement (`import Tabs from '@theme/Tabs';`, `export const x = ...`), and for an import a
    last line ending with a module name or `;`. Such a block renders nothing (MDX compiles it to
    the page's JavaScript); a page's text starts after them, as after its front matter."""
    end = line = start
    while True:
        while line < len(lines) and not lines[line].strip(" \t"):
            line += 1
        stop = line
        while stop < len(lines) and lines[stop].strip(" \t"):
            stop += 1
        first = _ESM_START.match(lines[line]) if line < stop else None
        if first is None:
            return end
        if first.group().startswith("import") and not _IMPORT_END.search(lines[stop - 1]):
            return end
        end = line = stop


def _front_matter(lines: tuple[str, ...]) -> tuple[dict[str, Any], int]:
    """(front matter mapping, number of lines it spans); ({}, 0) when the file has none.

    Front matter is a first line `---` and the next line that is `---` or `...`, between them YAML
    that reads as a mapping (or nothing); without a closing line, or where the YAML reads as text,
    a list or a number, the file has no front matter (the `---` is then ordinary markdown: a
    thematic break). YAML that cannot be read is INVALID_FRONT_MATTER. Hugo's TOML front matter
    is a first line `+++` and the next `+++` line, TOML between them (tomllib), read the same way;
    without a closing line the `+++` is ordinary markdown, and TOML that cannot be read is
    INVALID_FRONT_MATTER.
    """
    opening = _FRONT_MATTER.get(lines[0].rstrip()) if lines else None
    if opening is None:
        return {}, 0
    kind, closing = opening
    close = next((i for i in range(1, len(lines)) if lines[i].rstrip() in closing), None)
    if close is None:
        return {}, 0
    source = "\n".join(lines[1:close])
    if len(source) > MAX_FRONT_MATTER_CHARS:
        raise ChunkingError(
            FRONT_MATTER_TOO_LARGE,
            f"{kind} front matter of {len(source)} characters (limit {MAX_FRONT_MATTER_CHARS})",
        )
    try:
        data = _load_yaml(source) if kind == "YAML" else _load_toml(source, close)
    except RecursionError:
        raise ChunkingError(
            FRONT_MATTER_TOO_LARGE,
            f"{kind} front matter nested deeper than {MAX_FRONT_MATTER_DEPTH} levels",
        ) from None
    if data is None:
        data = {}
    if not isinstance(data, dict):  # a thematic break, then text or a list (a slide deck's page)
        return {}, 0
    _check_expansion(data, kind)
    text = json.dumps(_json_ready(data, kind), ensure_ascii=False)
    try:
        text.encode("utf-8")  # a lone surrogate ("\ud800" escaped in YAML) is no character
    except UnicodeEncodeError as exc:
        found = exc.object[exc.start : exc.end]
        raise ChunkingError(
            INVALID_FRONT_MATTER,
            f"{kind} front matter: {found!r} is a lone surrogate, no character",
        ) from None
    plain = json.loads(text)
    return plain, close + 1


_TAG = "tag:yaml.org,2002:"
# The YAML 1.2 core schema's plain scalars that PyYAML (YAML 1.1) reads otherwise (spec 1.2.2,
# 10.3.2), in the order tried: tag, pattern, first characters.
_CORE_SCHEMA = (
    ("bool", r"(?:true|True|TRUE|false|False|FALSE)$", "tTfF"),
    ("int", r"(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", "-+0123456789"),
    (
        "float",
        r"(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        "-+0123456789.",
    ),
)
_REPLACED = {kind for kind, _, _ in _CORE_SCHEMA}
_YAML11_BOOLEAN = re.compile(r"(?:yes|Yes|YES|no|No|NO|on|On|ON|off|Off|OFF)$")
# Top-level keys whose type sites fix, read so from a plain scalar of another type (as Go's yaml
# v3 reads YAML 1.1's `yes` into a typed bool): the draft marks' YAML 1.1 booleans (a page marked
# `draft: yes` stays out, as before), a title's number or boolean as the text written.
_TYPED_KEYS = {
    "draft": ("bool", _YAML11_BOOLEAN),
    "published": ("bool", _YAML11_BOOLEAN),
    "title": ("str", None),
}


class _FrontMatterLoader(UniqueKeyLoader):
    """yaml.SafeLoader reading plain scalars by the YAML 1.2 core schema (Hugo's, js-yaml's):
    booleans only `true`/`false` (`country: NO` is text), integers decimal, `0o` or `0x` (`10:30`
    and `1_000` are text, `0755` is 755), floats with an optional exponent sign (`1e3`). Nulls,
    dates and `<<` merges as PyYAML reads them. A key repeated in one mapping is an error
    (`UniqueKeyLoader`)."""

    first_line = 2  # the line after the opening `---`, as `_load_yaml` names lines

    yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag[len(_TAG) :] not in _REPLACED]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }

    def construct_document(self, node: yaml.Node) -> Any:
        """The document, `_TYPED_KEYS`' plain scalars at its top level read as their type."""
        for key, value in node.value if isinstance(node, yaml.MappingNode) else ():
            typed = _TYPED_KEYS.get(key.value) if isinstance(key, yaml.ScalarNode) else None
            if typed and isinstance(value, yaml.ScalarNode) and value.style is None:
                kind, words = typed
                if value.tag != _TAG + "null" and (words is None or words.match(value.value)):
                    value.tag = _TAG + kind
        return super().construct_document(node)

    def construct_yaml_int(self, node: yaml.ScalarNode) -> int:
        """An integer as YAML 1.2 reads one: `0755` is 755 (YAML 1.1's octal was 493)."""
        text = self.construct_scalar(node)
        return int(text, 0) if text[:2] in ("0o", "0x") else int(text)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        """The node's value; a ConstructorError where an explicit tag's constructor fails on the
        text (`!!int abc`, `!!bool maybe`: Python's ValueError or KeyError, a CHUNKER_ERROR)."""
        try:
            return super().construct_object(node, deep)
        except (ValueError, KeyError, AttributeError):
            if not isinstance(node, yaml.ScalarNode):
                raise
            problem = f"{node.value!r} is no {node.tag.removeprefix(_TAG)}"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None


for _kind, _pattern, _first in _CORE_SCHEMA:
    _FrontMatterLoader.add_implicit_resolver(_TAG + _kind, re.compile(_pattern), list(_first))
_FrontMatterLoader.add_constructor(_TAG + "int", _FrontMatterLoader.construct_yaml_int)


def _load_yaml(source: str) -> Any:
    """`source` read by `_FrontMatterLoader`; YAML that cannot be read is INVALID_FRONT_MATTER,
    naming its line in the file."""
    try:
        return yaml.load(source, Loader=_FrontMatterLoader)  # a SafeLoader: no Python objects
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ChunkingError(INVALID_FRONT_MATTER, f"YAML front matter{where}: {problem}") from None


def _load_toml(source: str, close: int) -> dict[str, Any]:
    """`source` read by tomllib; TOML that cannot be read is INVALID_FRONT_MATTER, naming the line
    in the file where tomllib says (`close`, the last line before the closing `+++`, for "at end
    of document")."""
    try:
        return _title_as_text(tomllib.loads(source))
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        found = _TOML_WHERE.search(message)
        if found is None:
            where = ""
        elif found.group(1) is None:
            where = f" at its end, line {close}"
        else:
            where = f" at line {int(found.group(1)) + 1}, column {found.group(2)}"
        problem = message[: found.start()] if found else message
        raise ChunkingError(INVALID_FRONT_MATTER, f"TOML front matter{where}: {problem}") from None


def _title_as_text(data: dict[str, Any]) -> dict[str, Any]:
    """TOML front matter `data` with a top-level `title` written as a number or boolean as its
    text, as Hugo reads it (`title = 1984` is "1984", `true` "true") and as a YAML title is read
    (`_TYPED_KEYS`); until 2026-12-01 it was no title."""
    title = data.get("title")
    if isinstance(title, bool):
        return {**data, "title": "true" if title else "false"}
    if isinstance(title, int | float):
        return {**data, "title": str(title)}
    return data


def _json_ready(value: Any, kind: str, key: str = "") -> Any:
    """`value` (at `key`, its place in the front matter: `params.ids[2]`) with what JSON cannot
    hold as text, deterministic: a date, time or datetime as `str` spells it (`2024-05-01
    10:00:00+00:00`, YAML's and TOML's alike), also as a mapping key; a float NaN or infinity as
    `nan`, `inf` (`NaN` is no JSON); YAML's `!!binary` as its base64 text and `!!set` as the
    mapping of null values a JavaScript or Go site reads, its members sorted (they were Python's
    `b'...'` and `{'b', 'a'}`, in an order that changed from run to run); `!!omap`'s and
    `!!pairs`' pairs as lists, their values made ready too (a NaN there was written `NaN`). A
    TOML integer outside 64 bits is INVALID_FRONT_MATTER naming its key: TOML allows none
    (tomllib reads one; Hugo refuses it)."""
    if isinstance(value, set):
        members = sorted(value, key=lambda member: (type(member).__name__, str(member)))
        value = dict.fromkeys(members)
    if isinstance(value, dict):
        return {
            _json_key(name): _json_ready(item, kind, f"{key}.{name}" if key else str(name))
            for name, item in value.items()
        }
    if isinstance(value, list | tuple):
        return [_json_ready(item, kind, f"{key}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.date | datetime.time):
        return str(value)
    if kind == "TOML" and isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ChunkingError(
            INVALID_FRONT_MATTER,
            f"TOML front matter: {key} = {value} is outside TOML's 64-bit integers",
        )
    return value


def _json_key(name: Any) -> Any:
    """A mapping key as `json.dumps` takes it: a string, number, boolean or null as it is (a
    number made text by `json.dumps`), another (a date: `2024-01-01:`) as `_json_ready` spells
    it."""
    return name if isinstance(name, str | int | float | bool | None) else _json_ready(name, "")


def _check_expansion(data: Any, kind: str) -> None:
    """Raise FRONT_MATTER_TOO_LARGE when `data`, with every alias expanded, is deeper than
    MAX_FRONT_MATTER_DEPTH or larger than MAX_FRONT_MATTER_NODES (a billion-laughs bomb stops
    after that many steps, never expanded; one in `!!pairs` too: a tuple was measured by its
    text, which expanded it)."""
    left = MAX_FRONT_MATTER_NODES
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_FRONT_MATTER_DEPTH:
            raise ChunkingError(
                FRONT_MATTER_TOO_LARGE,
                f"{kind} front matter nested deeper than {MAX_FRONT_MATTER_DEPTH} levels",
            )
        if isinstance(value, dict):
            children = [*value.keys(), *value.values()]
        elif isinstance(value, list | tuple | set):  # `!!omap`'s and `!!pairs`' pairs too
            children = value
        else:
            children = []
            left -= len(str(value))
        left -= 1
        if left < 0:
            raise ChunkingError(
                FRONT_MATTER_TOO_LARGE,
                f"{kind} front matter expands (aliases included) to over "
                f"{MAX_FRONT_MATTER_NODES} nodes and characters",
            )
        stack.extend((child, depth + 1) for child in children)
