"""The chunk record every strategy returns, its stable id, and the chunking error."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields
from typing import Any

CHUNKING_FAILED = "CHUNKING_FAILED"
INVALID_FRONT_MATTER = "INVALID_FRONT_MATTER"
FRONT_MATTER_TOO_LARGE = "FRONT_MATTER_TOO_LARGE"  # over the size, expansion or depth bound
CHUNKING_TIMEOUT = "CHUNKING_TIMEOUT"  # the source ran past its time budget
# The codes that the same bytes and options always raise again (a timeout depends on the machine).
DETERMINISTIC_FAILURES = frozenset({CHUNKING_FAILED, INVALID_FRONT_MATTER, FRONT_MATTER_TOO_LARGE})
# Front-matter entries that mark a page unpublished, which its site never shows: `draft: true`
# (Docusaurus, Hugo, MkDocs Material's blog, Astro Starlight), `published: false` (Jekyll).
DRAFT_MARKS = (("draft", True), ("published", False))


class ChunkingError(ValueError):
    """A document that cannot be chunked; `code` is a stable machine-readable error code."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Link:
    """A link found in a chunk (seed 002 section 9)."""

    url: str
    text: str
    link_type: str  # "external" | "internal" | "anchor" | "image" | "email" | "other"
    target_document: str | None = None  # corpus-relative path when the link resolves to a source


@dataclass(frozen=True)
class Chunk:
    """One chunk of one markdown document; identical for every strategy."""

    ordinal: int
    text: str
    title: str
    headings_path: tuple[str, ...]
    header_path: str
    start_line: int
    end_line: int
    token_count: int
    is_code: bool
    content_type: str
    links: tuple[Link, ...]
    chunk_id: str
    extras: dict[str, Any] = field(default_factory=dict, hash=False, compare=True)
    chunk_path: str = ""  # seed 002 section 8: the heading path, plus the container if any
    context: str = ""  # what the embedder sees before `text` (see `embedding_text`)

    @property
    def embedding_text(self) -> str:
        """The text to embed (`embedding_text_of` its context and text)."""
        return embedding_text_of(self.context, self.text)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-ready dict with lists instead of tuples, fields in declaration order.

        Shallow (no `dataclasses.asdict` deep copy, which cost seconds per 10k chunks); `extras`
        is copied one level deep."""
        data = {name: getattr(self, name) for name in _CHUNK_FIELDS}
        data["headings_path"] = list(self.headings_path)
        data["links"] = [
            {name: getattr(link, name) for name in _LINK_FIELDS} for link in self.links
        ]
        data["extras"] = dict(self.extras)
        return data


_CHUNK_FIELDS = tuple(f.name for f in fields(Chunk))
_LINK_FIELDS = tuple(f.name for f in fields(Link))


@dataclass(frozen=True)
class ChunkedDocument:
    """The result of chunking one source: its chunks plus document-level facts."""

    document_id: str
    tenant_id: str
    source_version_id: str  # sha256 hex of the raw source bytes
    strategy: str
    strategy_key: str
    chunks: tuple[Chunk, ...]
    front_matter: dict[str, Any]
    is_chunked: bool
    skipped_tail_tokens: int = 0  # tokens of a final chunk the strategy dropped (0: none)
    tokenizer: str = ""  # name and version of the token counter, e.g. "words*1.3/v1"
    # the links of that dropped final chunk, which no chunk holds: the broken-links check judges
    # them too (`jobs.broken_links.page_links`); in no output file
    skipped_links: tuple[Link, ...] = ()

    @property
    def promotion_level(self) -> str | None:
        """Seed 001's `promotion_level`: the front matter's, as text (a value that is no string
        as JSON spells it: `true`, `3`, `["a", "b"]`; Python's `True` and `['a', 'b']` until
        2026-11-29); None when it has none. Every chunk inherits it from its document."""
        value = self.front_matter.get("promotion_level")
        if value is None or isinstance(value, str):
            return value
        return json.dumps(value, ensure_ascii=False)

    @property
    def is_draft(self) -> bool:
        """Whether its front matter marks the page a draft (`is_draft`)."""
        return is_draft(self.front_matter)

    def chunk_records(self) -> list[dict[str, Any]]:
        """Every chunk as a JSON-ready dict with its document's fields in front."""
        document = {
            "document_id": self.document_id,
            "tenant_id": self.tenant_id,
            "source_version_id": self.source_version_id,
            "promotion_level": self.promotion_level,
        }
        return [{**document, **chunk.to_dict()} for chunk in self.chunks]


def is_draft(front_matter: dict[str, Any]) -> bool:
    """Whether front matter marks its page a draft: `draft: true` or `published: false`, as
    booleans (YAML's `yes`/`no` are; the strings "true" and "false" are not)."""
    return any(front_matter.get(key) is value for key, value in DRAFT_MARKS)


def embedding_text_of(context: str, text: str) -> str:
    """A chunk's text to embed: its `context` (e.g. hierarchical's "Context: A > B" lines), then
    its `text`."""
    return context + text


def make_chunk_id(
    tenant_id: str, document_id: str, source_version_id: str, ordinal: int, canonical_text: str
) -> str:
    """Seed 002 section 7: sha256 over the pipe-joined identity fields and canonical text."""
    payload = "|".join([tenant_id, document_id, source_version_id, str(ordinal), canonical_text])
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()
