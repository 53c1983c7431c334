"""One topic's reduce: chunks and vectors in; index.json, chunk files, topic-spec, tables out."""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import dataclass, fields
from typing import Any

import numpy as np
import pyarrow as pa

from chunking.blocks import heading_title, parse_tokens
from chunking.normalize import front_matter_title
from chunking.record import Chunk, ChunkedDocument
from indexing.hal import directory_title, dump_json, index_document, not_an_index
from indexing.keywords import Keyword, KeywordMatcher, keyword_matcher, keywords_in
from indexing.lifecycle import entry_files, named_files
from indexing.paths import (
    INDEX,
    TOPIC_SPEC,
    href_of,
    href_path,
    in_topic,
    not_one_string,
    shared_stems,
    source_chunk_files,
    source_stem,
)
from indexing.questions import best_chunks, match_questions
from indexing.simhash import simhash64
from indexing.simhash_tables import PromptEntry, blocks
from indexing.stripes import similarities, stripe_order
from indexing.tables import (
    DocumentRow,
    RetainedRows,
    SourceRows,
    chunk_table,
    combined_chunk_table,
    document_table,
    front_matter_json,
)
from indexing.topic_spec import merge_section, render_section
from indexing.vectors import unit_rows

# A one-word edit of a stored question is within 6 bits for 2 in 3 questions, within 3 for 1 in 6;
# no two different questions of the retrieval benchmark are closer than 11 (README: Retrieval).
DEFAULT_SIMHASH_K = 6
PRIMARY_SOURCE = "golden-reference.md"  # seed 000's primary source: it names the topic
# A docs site's page for its folder (MkDocs' and Docusaurus' index.md, Docusaurus' index.mdx, Hugo's
# _index.md, GitHub's README.md): it names the topic where there is no primary source.
LANDING_PAGES = ("index.md", "index.mdx", "_index.md", "README.md")
DEFAULT_TECHNICAL_TITLES = (
    "quick reference",
    "api reference",
    "quick ref",
    "reference card",
    "cheat sheet",
    "cheatsheet",
)


_WORD = re.compile(r"[^\W_]+")


@dataclass(frozen=True)
class IndexSettings:
    """Knobs of the index build; defaults follow seed 000."""

    prompt_threshold: float = 0.7
    prompt_top_k: int | None = None
    technical_titles: tuple[str, ...] = DEFAULT_TECHNICAL_TITLES
    simhash_k: int = DEFAULT_SIMHASH_K

    def __post_init__(self) -> None:
        if not -1.0 <= self.prompt_threshold <= 1.0:
            raise ValueError(
                f"prompt_threshold must be a cosine in [-1, 1], got {self.prompt_threshold}"
            )
        if self.prompt_top_k is not None and self.prompt_top_k < 1:
            raise ValueError(f"prompt_top_k must be at least 1 or None, got {self.prompt_top_k}")
        blocks(self.simhash_k)  # validates the range of k
        # one string's letters were each a phrase: a title with a one-letter word was technical
        not_one_string("technical_titles", "phrases", self.technical_titles)


@dataclass(frozen=True, eq=False)
class SourceInput:
    """One source of a topic: its chunked document and one vector per chunk, or its error.

    `source_version_id` is only read for a failed source (a chunked one carries it in `document`),
    and so is `retained`: the failed source's rows in the previous run's tables, kept as they were.
    """

    path: str
    document: ChunkedDocument | None
    vectors: np.ndarray | None
    error: tuple[str, str] | None = None
    source_version_id: str | None = None
    retained: RetainedRows | None = None


@dataclass(frozen=True, eq=False)
class TopicInput:
    """Everything one topic's reduce needs; `previous_index` is its index.json from the last run.

    `tenant_id` is the build's tenant, for the documents rows of failed sources (a chunked
    document carries its own)."""

    topic: str
    sources: list[SourceInput]
    questions: list[str]
    question_vectors: np.ndarray | None
    keywords: list[Keyword]
    child_topics: list[str]
    previous_index: bytes | None
    existing_topic_spec: str | None
    model: str
    strategy: str
    tenant_id: str = "default"


@dataclass(frozen=True, eq=False)
class TopicOutput:
    """What one topic's reduce produces; nothing is written yet.

    `files` maps output-root-relative paths to bytes. `retained` lists the chunk files of failed
    sources that stay from the previous run: they are live although not rewritten. `previous`
    lists the chunk files the previous index.json named (what its readers may still fetch).
    """

    topic: str
    title: str
    files: dict[str, bytes]
    chunk_rows: pa.Table
    document_rows: pa.Table
    prompt_entries: list[PromptEntry]
    retained: tuple[str, ...] = ()
    previous: frozenset[str] = frozenset()

    def live_paths(self) -> set[str]:
        """Every file of the topic that the new index.json refers to (written or retained)."""
        return set(self.files) | set(self.retained)


def is_technical_title(title: str, technical_titles: tuple[str, ...]) -> bool:
    """Whether a chunk title holds one of the technical-baseline phrases as whole words, ignoring
    case and punctuation ("Quick-Reference" holds "quick reference"; "Quick Refresh" does not
    hold "quick ref")."""
    words = f" {' '.join(_words(title))} "
    return any(f" {' '.join(_words(phrase))} " in words for phrase in technical_titles)


def _words(text: str) -> list[str]:
    """Case-folded words: runs of letters and digits (punctuation and underscores split them)."""
    return _WORD.findall(text.casefold())


def first_h1(document: ChunkedDocument) -> str | None:
    """The text of the document's first level-1 heading, if any, from its chunks in order: the H1
    a chunk's header path starts with when its text lacks that heading (a strategy that leaves an
    empty section out, `headers` and `hierarchical` under `# Title` then `## Part`, keeps it only
    there), else the first top-level H1 of its text (`- # x` and `> # x` are no headings of the
    document, as chunking reads it)."""
    for chunk in document.chunks:
        tokens = parse_tokens(chunk.text)
        own = [
            heading_title(tokens[i + 1].content.strip())
            for i, token in enumerate(tokens)
            if token.type == "heading_open" and token.tag == "h1" and token.level == 0
            if tokens[i + 1].content.strip()
        ]
        path = _path_h1(chunk)
        if path is not None and path not in own:
            return path
        if own:
            return own[0]
    return None


def _path_h1(chunk: Chunk) -> str | None:
    """The title of the level-1 heading that a chunk's header path starts with, if any."""
    if chunk.headings_path and chunk.headings_path[0] and chunk.header_path.startswith("# "):
        return chunk.headings_path[0]
    return None


def topic_title(topic: str, documents: dict[str, ChunkedDocument], kept: str | None) -> str:
    """The title of the primary source (seed 000: `golden-reference.md`), else of a landing page
    (`LANDING_PAGES`, in that order; one of front matter alone, Hugo's `_index.md`, names its
    section), else of the first source with chunks (`documents` maps source paths to documents, in
    source order; an empty source or a left-out draft, whose front matter keeps no title, names
    nothing): its front-matter `title`, else its first H1. Else `kept`, the previous run's title
    where failed sources kept their previous entries (no other source has chunks), else the
    directory name (as a fresh build)."""
    first = next((document for document in documents.values() if document.chunks), None)
    named = [documents.get(in_topic(topic, name)) for name in (PRIMARY_SOURCE, *LANDING_PAGES)]
    for document in [d for d in (*named, first) if d is not None]:
        if title := front_matter_title(document.front_matter):
            return title
        if h1 := first_h1(document):
            return h1
    if first is None and kept is not None:
        return kept
    return directory_title(topic)


def _check_vectors(src: SourceInput, count: int) -> np.ndarray:
    """The source's vectors: ValueError unless one per chunk, each finite (a NaN or inf made
    null similarities in index.json and a stripe order of its own, as `load_embedder` says)."""
    vectors = np.asarray(src.vectors) if src.vectors is not None else None
    if vectors is None or vectors.ndim != 2 or vectors.shape[0] != count:
        shape = None if vectors is None else vectors.shape
        raise ValueError(f"{src.path}: expected one vector per chunk ({count}), got shape {shape}")
    bad = ~np.isfinite(vectors).all(axis=1)
    if bad.any():
        raise ValueError(
            f"{src.path}: the vector of chunk {int(np.argmax(bad))} holds NaN or inf "
            f"({int(bad.sum())} of {count} chunks)"
        )
    return vectors


@dataclass(frozen=True)
class _Built:
    entry: dict[str, Any]
    rows: SourceRows


def _build_source(
    inp: TopicInput,
    src: SourceInput,
    doc: ChunkedDocument,
    settings: IndexSettings,
    question_hashes: list[int],
    question_units: np.ndarray | None,
    matcher: KeywordMatcher,
    best: list[tuple[int, int]],
) -> _Built:
    """The `_embedded.chunks` entry and table rows of one chunked source (`question_units`: the
    question vectors as `unit_rows` gives them; `best`: (question, chunk index) for each question
    whose best chunk of the topic is in this source, in question order)."""
    chunks = doc.chunks
    vectors = _check_vectors(src, len(chunks))
    conceptual = similarities(vectors, 0)
    technical = None
    if len(chunks) >= 2 and is_technical_title(chunks[1].title, settings.technical_titles):
        technical = similarities(vectors, 1)
    matched = (
        match_questions(
            vectors, question_units, settings.prompt_threshold, settings.prompt_top_k, best
        )
        if question_hashes
        else [[] for _ in chunks]
    )
    prompt_hashes = [sorted({question_hashes[q] for q in row}) for row in matched]
    names = source_chunk_files(src.path, [chunk.text for chunk in chunks])
    items = []
    for i, chunk in enumerate(chunks):
        item: dict[str, Any] = {
            "index": i,
            "href": href_of(names[i]),
            "title": chunk.title,
            "is_code": chunk.is_code,
            "similarity_conceptual": conceptual[i],
        }
        if technical is not None:
            item["similarity_technical"] = technical[i]
        if prompt_hashes[i]:
            item["prompt_hashes"] = prompt_hashes[i]
        item["keywords"] = [
            {"name": k.name, "score": k.score} for k in keywords_in(chunk.text, matcher)
        ]
        items.append(item)
    entry: dict[str, Any] = {
        "source": posixpath.basename(src.path),
        "count": len(chunks),
        "baseline_conceptual": 0,
    }
    if technical is not None:
        entry["baseline_technical"] = 1
    entry["stripe_order"] = stripe_order(conceptual, {0})
    if technical is not None:
        entry["stripe_order_technical"] = stripe_order(technical, {0, 1})
    entry["items"] = items
    rows = SourceRows(
        path=src.path,
        document=doc,
        vectors=vectors,
        hrefs=[href_of(in_topic(inp.topic, name)) for name in names],
        similarity_conceptual=conceptual,
        similarity_technical=technical,
        prompt_hashes=prompt_hashes,
    )
    return _Built(entry=entry, rows=rows)


def _question_hashes(inp: TopicInput) -> list[int]:
    """The SimHash of each question; ValueError unless each has one finite vector (a NaN one
    attached its question to no chunk, unsaid)."""
    if not inp.questions:
        return []
    vectors = inp.question_vectors
    if vectors is None or len(vectors) != len(inp.questions):
        got = None if vectors is None else len(vectors)
        raise ValueError(
            f"topic {inp.topic!r}: {len(inp.questions)} questions but {got} question vectors"
        )
    bad = ~np.isfinite(np.asarray(vectors, dtype=np.float64)).all(axis=1)
    if bad.any():
        question = inp.questions[int(np.argmax(bad))]
        raise ValueError(
            f"topic {inp.topic!r}: the vector of question {question!r} holds NaN or inf"
        )
    return [simhash64(q) for q in inp.questions]


def build_topic(inp: TopicInput, settings: IndexSettings) -> TopicOutput:
    """Build one topic's index.json, chunk files, topic-spec.md and table rows (seed 000 §3-§7).

    A failed source keeps its previous `_embedded.chunks` entry (the one of its file name) and
    chunk files (listed in `retained`); a source with zero chunks gets no entry. Raises ValueError
    for inconsistent input (a chunked source whose stem another source shares, vectors that do not
    match the chunks, a `previous_index` that is no index.json of this topic).
    """
    sources = sorted(inp.sources, key=lambda s: source_stem(s.path))
    stems = [source_stem(s.path) for s in sources]
    shared = shared_stems(s.path for s in sources)
    if duplicates := sorted(
        {source_stem(s.path) for s in sources if s.document and s.path in shared}
    ):
        raise ValueError(f"topic {inp.topic!r}: several sources share the stem(s) {duplicates}")
    if inp.previous_index and (problem := not_an_index(inp.previous_index, inp.topic)):
        raise ValueError(f"topic {inp.topic!r}: its previous_index is {problem}")
    previous = json.loads(inp.previous_index) if inp.previous_index else None
    previous_chunks = previous["_embedded"].get("chunks", {}) if previous else {}
    question_hashes = _question_hashes(inp)
    matcher = keyword_matcher(inp.keywords)
    with_chunks = [s for s in sources if s.document is not None and s.document.chunks]
    position = {s.path: i for i, s in enumerate(with_chunks)}
    units = unit_rows(inp.question_vectors) if question_hashes else None
    best = (
        _best_by_source(
            best_chunks([_check_vectors(s, len(s.document.chunks)) for s in with_chunks], units)
        )
        if question_hashes
        else {}
    )

    chunks: dict[str, Any] = {}
    files: dict[str, bytes] = {}
    retained: list[str] = []
    table_parts: list[SourceRows | pa.Table] = []  # in source order: built rows, retained rows
    documents: dict[str, ChunkedDocument] = {}
    doc_rows: list[DocumentRow] = []
    for stem, src in zip(stems, sources, strict=True):
        if src.document is None:
            code, message = src.error or ("UNKNOWN", "source failed without an error")
            doc_rows.append(_failed_row(inp, src, code, message))
            if src.retained is not None and src.retained.chunks.num_rows:
                table_parts.append(src.retained.chunks)
            if previous_chunks.get(stem, {}).get("source") == posixpath.basename(src.path):
                chunks[stem] = previous_chunks[stem]
                retained += entry_files(inp.topic, chunks[stem])
            continue
        doc = src.document
        documents[src.path] = doc
        doc_rows.append(
            DocumentRow(
                inp.topic,
                src.path,
                doc.document_id,
                doc.is_chunked,
                len(doc.chunks),
                doc.source_version_id,
                inp.strategy,
                "ok",
                tenant_id=doc.tenant_id,
                front_matter=front_matter_json(doc),
                skipped_tail_tokens=doc.skipped_tail_tokens,
                tokenizer=doc.tokenizer,
                promotion_level=doc.promotion_level,
            )
        )
        if not doc.chunks:
            continue
        here = best.get(position[src.path], [])
        built = _build_source(inp, src, doc, settings, question_hashes, units, matcher, here)
        chunks[stem] = built.entry
        table_parts.append(built.rows)
        for chunk, href in zip(doc.chunks, built.rows.hrefs, strict=True):
            files[href_path(href)] = chunk.text.encode("utf-8")

    title = topic_title(inp.topic, documents, previous["title"] if retained else None)
    files[in_topic(inp.topic, INDEX)] = dump_json(
        index_document(inp.topic, title, inp.child_topics, chunks)
    )
    spec = merge_section(inp.existing_topic_spec, render_section(title, chunks))
    files[in_topic(inp.topic, TOPIC_SPEC)] = spec.encode("utf-8")
    dims = {_dim(part) for part in table_parts}
    if len(dims) > 1:
        raise ValueError(
            f"topic {inp.topic!r}: sources have vectors of different sizes {sorted(dims)}"
        )
    dim = dims.pop() if dims else 0
    return TopicOutput(
        topic=inp.topic,
        title=title,
        files=dict(sorted(files.items())),
        chunk_rows=_chunk_rows(inp, table_parts, dim),
        document_rows=document_table(doc_rows),
        prompt_entries=prompt_entries(inp.topic, chunks),
        retained=tuple(sorted(retained)),
        previous=named_files(inp.topic, previous_chunks),
    )


def _best_by_source(best: list[tuple[int, int]]) -> dict[int, list[tuple[int, int]]]:
    """`best_chunks`' answer by source position: (question, chunk index) pairs in question order;
    a question with no chunk (position -1) is in none."""
    by_source: dict[int, list[tuple[int, int]]] = {}
    for question, (at, chunk) in enumerate(best):
        if at >= 0:
            by_source.setdefault(at, []).append((question, chunk))
    return by_source


def _failed_row(inp: TopicInput, src: SourceInput, code: str, message: str) -> DocumentRow:
    """A failed source's documents row: its retained row with the failure, or a bare one."""
    if src.retained is not None:
        names = {f.name for f in fields(DocumentRow)}
        kept = {k: v for k, v in src.retained.document.items() if k in names}
        return DocumentRow(**{**kept, "status": "failed", "error_code": code, "error": message})
    return DocumentRow(
        inp.topic, src.path, src.path, False, 0, src.source_version_id, inp.strategy, "failed",
        code, message, tenant_id=inp.tenant_id,
    )  # fmt: skip


def _is_table(part: SourceRows | pa.Table) -> bool:
    return isinstance(part, pa.Table)


def _dim(part: SourceRows | pa.Table) -> int:
    if _is_table(part):
        return part.schema.field("embedding").type.list_size
    return part.vectors.shape[1]


def _chunk_rows(inp: TopicInput, parts: list[SourceRows | pa.Table], dim: int) -> pa.Table:
    """The topic's chunk table: built sources' rows with retained rows kept in source order."""
    if not any(_is_table(p) for p in parts):
        return chunk_table(inp.topic, inp.model, inp.strategy, parts, dim)
    tables = [
        p if _is_table(p) else chunk_table(inp.topic, inp.model, inp.strategy, [p], dim)
        for p in parts
    ]
    return combined_chunk_table(tables, dim)


def prompt_entries(topic: str, chunks: dict[str, Any]) -> list[PromptEntry]:
    """The topic's sorted SimHash table: (hash, topic, source stem, chunk index) per prompt hash."""
    return sorted(
        (h, topic, stem, item["index"])
        for stem, entry in chunks.items()
        for item in entry["items"]
        for h in item.get("prompt_hashes", ())
    )


def prompt_entries_from_index(index_json: bytes) -> list[PromptEntry]:
    """The SimHash table of a topic read back from its index.json (for topics not rebuilt)."""
    doc = json.loads(index_json)
    return prompt_entries(doc["id"], doc["_embedded"].get("chunks", {}))
