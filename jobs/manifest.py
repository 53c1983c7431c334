"""The manifest a run leaves for the next one: what each source and topic looked like last time.

Stored at `{output}/_reindex/manifest.json`. With it, the next run tells changed, unchanged and
deleted sources apart from a listing alone (size + ETag/mtime), without reading unchanged files.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from chunking.record import DETERMINISTIC_FAILURES
from indexing.keywords import KEYWORDS_FAILED
from indexing.questions import QUESTIONS_FAILED

MANIFEST_PATH = "_reindex/manifest.json"
REPORT_PATH = "_reindex/report.json"
REPORT_HTML_PATH = "_reindex/report.html"
# 2: chunk records and tables gained fields, and chunking and index rules changed (issue 10), so
# an output of format 1 is rebuilt whole. 3: chunk files are named by their text's digest
# (`_chunks/{stem}-{digest}-{i}.md`, issue 12 item 7); an output of format 2 is rebuilt whole, so
# that it converges to a clean build's names. 4: settled failures (a source entry's
# `settled_failure`, a topic entry's `settled_failures`), which a reader of format 3 would refuse
# (unknown fields); format 3 is read as 4 without any. 5: a topic entry's `link_targets`; a topic
# of format 3 or 4 has none recorded, so the plan rebuilds it once (`jobs.plan`). A topic
# entry's `page_links` (2026-11-30) is written only where it has some, and a reader of format 5
# without it ignores it: still 5.
FORMAT = 5
READABLE_FORMATS = (3, 4, FORMAT)

# Failures that a file's bytes and the settings decide, for files whose fingerprint the plan
# compares (sources, qa-pairs.md, keywords files): settled, not retried until one changes
# (`jobs.plan`). A read that fails is READ_FAILED, retried; so are timeouts, CHUNKER_ERROR and
# TOPIC_SPEC_FAILED (topic-spec.md is the output's file, which the plan does not compare).
SETTLED_FAILURES = DETERMINISTIC_FAILURES | {QUESTIONS_FAILED, KEYWORDS_FAILED}


@dataclass(frozen=True)
class SourceEntry:
    """A source as last seen: its listing fingerprint, content hash, and whether it failed.

    `settled_failure`: the (code, message) of a failure that its bytes and the settings decide
    (`SETTLED_FAILURES`); such a source is not read again until one changes.
    """

    fingerprint: str
    sha256: str | None
    failed: bool = False
    settled_failure: tuple[str, str] | None = None

    def to_dict(self) -> dict:
        """The entry as the manifest stores it (the failure only where there is one)."""
        data = {"fingerprint": self.fingerprint, "sha256": self.sha256, "failed": self.failed}
        if self.settled_failure is not None:
            data["settled_failure"] = list(self.settled_failure)
        return data

    @classmethod
    def from_dict(cls, data: dict) -> SourceEntry:
        """The entry `to_dict` stored."""
        settled = data.get("settled_failure")
        return cls(data["fingerprint"], data["sha256"], data["failed"], settled and tuple(settled))


@dataclass(frozen=True)
class TopicEntry:
    """A topic as last built: fingerprint of its inputs, children, files and prompt hashes."""

    inputs: str
    children: tuple[str, ...]
    files: tuple[str, ...]
    prompt_entries: tuple[tuple[int, str, int], ...] = ()  # (simhash, source stem, chunk index)
    failed: bool = False  # a failure to retry: any but settled ones
    # (path, code, message) of the settled failures of its qa-pairs.md and keywords file (those
    # of its sources are in their own entries)
    settled_failures: tuple[tuple[str, str, str], ...] = ()
    # the paths its sources' relative links name that could be sources (`jobs.stages.topic`);
    # None: not recorded (a manifest of format 3 or 4)
    link_targets: tuple[str, ...] | None = ()
    # (source, href) of its sources' links to pages no source is, and of a final section
    # `semantic` skipped to any page (since 2026-11-30: a source carried keeps its own from
    # here), each source's in order (`jobs.broken_links.page_links`), which every run judges
    # against its listing for the report's broken links: a kept topic's sources are unchanged,
    # and the plan rebuilds it when a path its chunks' links name becomes a source or stops
    # being one. A topic last built before they were recorded has none; one built earlier on
    # 2026-11-30 has its broken ones alone (stored as `broken_links`), judged again likewise.
    page_links: tuple[tuple[str, str], ...] = ()

    def to_dict(self) -> dict:
        """The entry as the manifest stores it (settled failures and page links only where
        there are some: a corpus without them keeps its manifest's bytes)."""
        data = {
            "inputs": self.inputs,
            "children": list(self.children),
            "files": list(self.files),
            "prompt_entries": [list(x) for x in self.prompt_entries],
            "failed": self.failed,
            "link_targets": None if self.link_targets is None else list(self.link_targets),
        }
        if self.settled_failures:
            data["settled_failures"] = [list(x) for x in self.settled_failures]
        if self.page_links:
            data["page_links"] = [list(x) for x in self.page_links]
        return data

    @classmethod
    def from_dict(cls, data: dict) -> TopicEntry:
        """The entry `to_dict` stored."""
        return cls(
            inputs=data["inputs"],
            children=tuple(data["children"]),
            files=tuple(data["files"]),
            prompt_entries=tuple(tuple(x) for x in data["prompt_entries"]),
            failed=data["failed"],
            settled_failures=tuple(tuple(x) for x in data.get("settled_failures", ())),
            link_targets=None if (targets := data.get("link_targets")) is None else tuple(targets),
            page_links=tuple(
                (source, href)
                for source, href in data.get("page_links", data.get("broken_links", ()))
            ),
        )


@dataclass(frozen=True)
class Manifest:
    """Everything the next run compares against (`directories`: plain ancestor directories)."""

    config_key: str = ""
    sources: dict[str, SourceEntry] = field(default_factory=dict)
    topics: dict[str, TopicEntry] = field(default_factory=dict)
    directories: tuple[str, ...] = ()
    simhash_files: tuple[str, ...] = ()
    # path -> (fingerprint, sha256) of each file the plan compares that is no source (a topic's
    # qa-pairs.md, a keywords file, a separate output's input topic-spec.md): `jobs.discovery.
    # restamped` tells a new fingerprint of the same bytes by them. Optional: a reader of format
    # 5 without them ignores them, and a manifest without them has them hashed once.
    stamps: dict[str, tuple[str, str]] = field(default_factory=dict)

    def to_json(self) -> bytes:
        """Deterministic JSON bytes (sorted keys)."""
        data = {
            "format": FORMAT,
            "config_key": self.config_key,
            "sources": {p: e.to_dict() for p, e in sorted(self.sources.items())},
            "topics": {t: e.to_dict() for t, e in sorted(self.topics.items())},
            "directories": list(self.directories),
            "simhash_files": list(self.simhash_files),
        }
        if self.stamps:  # only then: a corpus without such files keeps its manifest's bytes
            data["stamps"] = {p: list(stamp) for p, stamp in sorted(self.stamps.items())}
        # Compact: an indent makes json use its pure-Python encoder, which on all of tldr-pages
        # (38k sources) took 1.2 s and 48 MB of transient memory, against 0.4 s and 17 MB.
        return (json.dumps(data, sort_keys=True, separators=(",", ":")) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes | None) -> Manifest:
        """The manifest stored by a previous run; an empty one when there is none.

        One this version cannot read (an older or a newer format, or a damaged file) gives the
        names it holds alone (`names_only`): no settings key, so the run rebuilds every topic
        and reads every source, and still removes the topics, sources, directories and SimHash
        files that the input no longer has. (An empty manifest there left them for good.)"""
        if not data:
            return cls()
        try:
            raw = json.loads(data)
        except (ValueError, RecursionError):  # not JSON, or nested past the stack
            return cls()
        if isinstance(raw, dict) and raw.get("format") in READABLE_FORMATS:
            try:
                return cls(
                    config_key=raw["config_key"],
                    sources={p: SourceEntry.from_dict(e) for p, e in raw["sources"].items()},
                    topics={t: TopicEntry.from_dict(e) for t, e in raw["topics"].items()},
                    directories=tuple(raw["directories"]),
                    simhash_files=tuple(raw["simhash_files"]),
                    stamps={p: (s[0], s[1]) for p, s in raw.get("stamps", {}).items()},
                )
            except (KeyError, TypeError, ValueError, AttributeError):  # damaged
                pass
        return names_only(raw)


def unreadable_note(data: bytes) -> str:
    """Why a stored manifest (`data`) read for its names alone is so, in words: its format
    number where it has one this version does not read (an older or a newer mdindex wrote it)."""
    try:
        found = json.loads(data).get("format")
    except (ValueError, RecursionError, AttributeError):  # not JSON, or no mapping
        found = None
    if type(found) is not int or found in READABLE_FORMATS:
        return "is of another format, or damaged"
    by = "an older" if found < min(READABLE_FORMATS) else "a newer"
    reads = f"formats {min(READABLE_FORMATS)} to {FORMAT}"
    return f"is of format {found}, which {by} mdindex wrote (this one reads {reads})"


def names_only(raw: object) -> Manifest:
    """What an unreadable manifest (`raw`, its parsed JSON) still names: each source and topic as
    failed, with no fingerprint and no files, its directories and its SimHash files."""

    def names(key: str) -> list[str]:  # the strings of a list, or a mapping's keys
        value = raw.get(key) if isinstance(raw, dict) else None
        found = value if isinstance(value, list | dict) else ()
        return [name for name in found if isinstance(name, str)]

    return Manifest(
        sources={path: SourceEntry("", None, failed=True) for path in names("sources")},
        topics={topic: TopicEntry("", (), (), failed=True) for topic in names("topics")},
        directories=tuple(names("directories")),
        simhash_files=tuple(names("simhash_files")),
    )
