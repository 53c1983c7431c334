"""End to end on real parts: files on disk, the real chunker, real MiniLM, the query CLI."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jsonschema
import pytest
from indexing_support import listing, write_index

from chunking import chunk_source
from indexing import (
    IndexSettings,
    SourceInput,
    TopicInput,
    build_topic,
    group_sources,
    nearest_keywords_path,
    parse_keywords,
    parse_questions,
    simhash64,
)
from indexing.cli import register

GUIDE = """---
title: Installing Widgets
---
# Widgets installation guide

Widgets is a command-line tool for packaging documentation. This guide explains how to install it.

## Quick Reference

```sh
pip install widgets
widgets --version
```

## Installing on Linux

Use your distribution's package manager or pip to install widgets on Linux.

## Installing on Windows

Download the MSI installer and run it; widgets is added to the PATH.

## Configuration file

Settings live in widgets.toml in your home directory; set the output folder there.

## Troubleshooting network errors

If downloads fail behind a corporate proxy, set HTTPS_PROXY and retry the download.

## Upgrading

Run pip install --upgrade widgets to move to the newest release.

## Uninstalling

Run pip uninstall widgets to remove the tool completely.
"""

CORPUS = {
    "guides/install/golden-reference.md": GUIDE,
    "guides/install/qa-pairs.md": "## How do I install widgets on Windows?\n\nRun the MSI.\n\n"
    "Q: How do I remove widgets?\nA: pip uninstall.\n",
    "guides/_keywords/words.md": "| Keyword | Score |\n|---|---|\n| pip | 3 |\n| proxy | 5 |\n"
    "| package manager | 4 |\n",
    "guides/baking/golden-reference.md": "# Baking bread\n\nMix flour, water, salt and yeast.\n\n"
    "## Proving\n\nLet the dough rise for two hours somewhere warm.\n",
}
CHUNKING = {"strategy": "semantic", "min_tokens": 5, "min_tokens_deeper": 5, "max_tokens": 200}
SCHEMA = json.loads((Path(__file__).parent / "schemas" / "index.schema.json").read_text())


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from embedding import load_embedder

    corpus = tmp_path_factory.mktemp("corpus")
    for path, text in CORPUS.items():
        (corpus / path).parent.mkdir(parents=True, exist_ok=True)
        (corpus / path).write_text(text)
    files = listing(corpus)
    embedder = load_embedder("minilm")
    outputs = []
    for topic, paths in group_sources(files).items():
        keywords_path = nearest_keywords_path(topic, files)
        keywords = parse_keywords((corpus / keywords_path).read_text()) if keywords_path else []
        qa = corpus / topic / "qa-pairs.md"
        questions = parse_questions(qa.read_text()) if qa.exists() else []
        sources = []
        for path in paths:
            document = chunk_source((corpus / path).read_bytes(), document_id=path, **CHUNKING)
            sources.append(
                SourceInput(path, document, embedder.embed([c.text for c in document.chunks]))
            )
        inp = TopicInput(
            topic=topic,
            sources=sources,
            questions=questions,
            question_vectors=embedder.embed(questions, query=True) if questions else None,
            keywords=keywords,
            child_topics=[],
            previous_index=None,
            existing_topic_spec=None,
            model=embedder.name,
            strategy="semantic-5-200",
        )
        outputs.append(build_topic(inp, IndexSettings(prompt_threshold=0.65)))
    root = tmp_path_factory.mktemp("site")
    write_index(root, outputs)
    return root


def query(root: Path, *options: str, capsys) -> dict:
    parser = argparse.ArgumentParser(prog="mdindex")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["query", str(root), *options, "--json"])
    assert args.run(args) == 0
    return json.loads(capsys.readouterr().out)


def test_index_of_a_real_chunked_and_embedded_topic(built):
    doc = json.loads((built / "guides/install/index.json").read_bytes())
    jsonschema.validate(doc, SCHEMA)
    assert doc["title"] == "Installing Widgets"
    entry = doc["_embedded"]["chunks"]["golden-reference"]
    items = {item["title"]: item for item in entry["items"]}
    assert entry["count"] == 8 and entry["baseline_technical"] == 1
    assert len(entry["stripe_order"]) == 7 and len(entry["stripe_order_technical"]) == 6
    assert {k["name"] for k in items["Troubleshooting network errors"]["keywords"]} == {"proxy"}
    assert [k["name"] for k in items["Installing on Linux"]["keywords"]] == [
        "pip",
        "package manager",
    ]
    windows = simhash64("How do I install widgets on Windows?")
    assert windows in items["Installing on Windows"]["prompt_hashes"]
    assert simhash64("How do I remove widgets?") in items["Uninstalling"]["prompt_hashes"]
    root = json.loads((built / "index.json").read_bytes())
    assert [t["id"] for t in root["_embedded"]["topics"]] == ["guides"]
    guides = json.loads((built / "guides/index.json").read_bytes())
    assert [t["id"] for t in guides["_embedded"]["topics"]] == ["guides/baking", "guides/install"]


def test_question_from_qa_pairs_is_found_by_simhash(built, capsys):
    result = query(built, "--question", "how do I install Widgets on windows", capsys=capsys)
    assert result["method"] == "simhash+embedding"  # the search's chunks follow, up to --n
    found = [(m["topic"], m["source"], m["title"]) for m in result["matches"] if "distance" in m]
    assert ("guides/install", "golden-reference", "Installing on Windows") in found
    assert len(result["matches"]) == 5 and "distance" in result["matches"][0]


def test_unseen_question_falls_back_to_embedding_search(built, capsys):
    result = query(built, "--question", "My download fails behind a proxy, what can I do?",
                   "--n", "2", "--show", capsys=capsys)  # fmt: skip
    assert result["method"] == "embedding"
    best = result["matches"][0]
    assert (best["topic"], best["title"]) == ("guides/install", "Troubleshooting network errors")
    assert "HTTPS_PROXY" in best["text"] and best["score"] > result["matches"][1]["score"]
    bread = query(built, "--question", "how long should dough rise", "--n", "1", capsys=capsys)
    assert bread["method"] == "embedding" and bread["matches"][0]["topic"] == "guides/baking"
