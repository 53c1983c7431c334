"""Small builders of real chunk records and topic inputs for the indexing tests."""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from chunking.record import Chunk, ChunkedDocument, make_chunk_id
from indexing import (
    SourceInput,
    TopicInput,
    TopicOutput,
    build_simhash_tables,
    chunk_table_path,
    directory_index,
    document_table_path,
    index_tree,
    stale_files,
)
from indexing.paths import is_chunk_file


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


def listing(root: Path) -> list[str]:
    """Every file under `root`, as sorted POSIX paths relative to it."""
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def write_topic(root: Path, output: TopicOutput) -> list[str]:
    """Apply one topic's output in the documented order; returns the stale files it deleted.

    Chunk files first, then index.json, then topic-spec.md, and only then the stale chunk files.
    """
    before = listing(root)
    index = output.topic + "/index.json" if output.topic else "index.json"
    chunks = [p for p in output.files if is_chunk_file(p)]
    for path in chunks + [index] + [p for p in output.files if p not in {*chunks, index}]:
        _target(root, path).write_bytes(output.files[path])
    stale = stale_files(before, output.live_paths())
    for path in stale:
        (root / path).unlink()
    return stale


def write_index(root: Path, outputs: list[TopicOutput], k: int = 3) -> None:
    """Write whole topics plus the directory indexes, table shards and corpus SimHash tables."""
    tree = index_tree(o.topic for o in outputs)
    for output in outputs:
        write_topic(root, output)
        pq.write_table(output.chunk_rows, _target(root, chunk_table_path(output.topic)))
        pq.write_table(output.document_rows, _target(root, document_table_path(output.topic)))
    topics = {o.topic for o in outputs}
    for directory, children in tree.items():
        if directory not in topics:
            path = f"{directory}/index.json" if directory else "index.json"
            (_target(root, path)).write_bytes(directory_index(directory, children))
    entries = [e for o in outputs for e in o.prompt_entries]
    for path, data in build_simhash_tables(entries, k=k).items():
        (_target(root, path)).write_bytes(data)


def _target(root: Path, relpath: str) -> Path:
    (root / relpath).parent.mkdir(parents=True, exist_ok=True)
    return root / relpath


@contextlib.contextmanager
def serving(root: Path, search=None, quiet: bool = True) -> Iterator[str]:
    """`mdindex serve`'s server for `root` on a free loopback port (answering questions with
    `search`; its log on standard error unless `quiet`), in a thread; yields its base URL and
    shuts it down after."""
    from indexing.server import make_server

    httpd = make_server(str(root), port=0, quiet=quiet, search=search)
    assert httpd.server_address[0] == "127.0.0.1"  # loopback unless told otherwise
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def run_cli(argv: list[str], capsys) -> tuple[int, str, str]:
    """Run the `indexing` sub-commands (query, serve, ...) in-process: exit code, stdout, stderr."""
    from indexing.cli import register

    parser = argparse.ArgumentParser(prog="mdindex")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code = args.run(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def loaded_models(monkeypatch) -> list:
    """The embedders `embedding.load_embedder` makes from here on, in order (each loaded for real:
    the list only keeps them)."""
    import embedding

    loaded = []
    real = embedding.load_embedder

    def keeping_load(*args, **kwargs):
        loaded.append(real(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(embedding, "load_embedder", keeping_load)
    return loaded
