"""Small builders of real chunk records and topic inputs for the indexing tests."""

from __future__ import annotations

import hashlib

import numpy as np

from chunking.record import Chunk, ChunkedDocument, make_chunk_id
from indexing import SourceInput, TopicInput


def make_document(path: str, sections: list[tuple[str, str]], *, is_code=(), front_matter=None):
    """A ChunkedDocument with one "## title" chunk per (title, body) section."""
    source = "\n\n".join(f"## {t}\n\n{b}" for t, b in sections).encode()
    version = hashlib.sha256(source).hexdigest()
    chunks = []
    line = 1
    for i, (title, body) in enumerate(sections):
        text = f"## {title}\n\n{body}"
        n_lines = text.count("\n") + 1
        chunks.append(
            Chunk(
                ordinal=i,
                text=text,
                title=title,
                headings_path=(title,),
                header_path=f"## {title}",
                start_line=line,
                end_line=line + n_lines - 1,
                token_count=len(text.split()),
                is_code=i in is_code,
                content_type="code" if i in is_code else "prose",
                links=(),
                chunk_id=make_chunk_id("default", path, version, i, text),
            )
        )
        line += n_lines + 1
    return ChunkedDocument(
        document_id=path,
        tenant_id="default",
        source_version_id=version,
        strategy="semantic",
        strategy_key="semantic-250-750",
        chunks=tuple(chunks),
        front_matter=dict(front_matter or {}),
        is_chunked=True,
    )


def ranked_vectors(similarities: list[float]) -> np.ndarray:
    """Unit vectors whose cosine to row 0 is exactly each given similarity (row 0 gets 1.0)."""
    rows = [[1.0, 0.0, 0.0]]
    for s in similarities[1:]:
        rows.append([s, float(np.sqrt(max(0.0, 1.0 - s * s))), 0.0])
    return np.array(rows, dtype=np.float64)


def source(path, sections, vectors, **kwargs) -> SourceInput:
    """A chunked SourceInput."""
    return SourceInput(path=path, document=make_document(path, sections, **kwargs), vectors=vectors)


def topic_input(
    topic,
    sources,
    *,
    questions=(),
    question_vectors=None,
    keywords=(),
    children=(),
    previous=None,
    spec=None,
) -> TopicInput:
    """A TopicInput with the given parts and fixed model/strategy names."""
    return TopicInput(
        topic=topic,
        sources=list(sources),
        questions=list(questions),
        question_vectors=question_vectors,
        keywords=list(keywords),
        child_topics=list(children),
        previous_index=previous,
        existing_topic_spec=spec,
        model="sentence-transformers/all-MiniLM-L6-v2",
        strategy="semantic-250-750",
    )
