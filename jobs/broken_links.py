"""Links to pages the corpus does not have (a renamed or deleted page, a typo: `./instal.md`),
which chunking leaves without a `target_document` and nothing else said.

A link is broken when it is a relative link (no scheme, no leading `#`; not an image) that stays
inside the corpus root and names a markdown page (its path ends in `.md`, `.mdx` or `.markdown`,
or has no extension or ends in `/`, which `chunking.links.candidate_paths` tries as `X.md`,
`X.mdx`, `X/index.md`, `X/index.mdx` and `X/README.md`), and none of the paths it may name is a
file of the input's listing (a source or any other listed file: `topic-spec.md`, a symbolic link
the listing did not follow). Not judged: a link to a path the listing could not show (under a
hidden or `_` folder, or left out by `sources.exclude`), an extensionless link to a folder the
listing holds files in (a site may make a page of it: Docusaurus' generated index), and a
root-absolute one without an extension (`/docs/intro`: a site's route, which its base URL maps
to a file).
"""

from __future__ import annotations

import heapq
import posixpath
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from chunking.links import target_paths
from chunking.record import Link
from indexing import SourceInput
from jobs.manifest import TopicEntry
from jobs.path_set import PathSet
from jobs.plan import excluded, keep_directory, name_problem
from jobs.stats import NAMED

PAGE_EXTENSIONS = (".md", ".mdx", ".markdown")


@dataclass(frozen=True)
class Listed:
    """The input's listing as the check sees it: its sources and its other paths, and the
    `sources.exclude` patterns that left paths out of it."""

    sources: PathSet
    others: PathSet
    exclude: tuple[str, ...] = ()

    @classmethod
    def of(cls, sources: PathSet, others: Iterable[str], exclude: tuple[str, ...]) -> Listed:
        """The listing of `sources` and the `others` listed paths (files no glob matches,
        symbolic links not followed); one no index can name (not UTF-8:
        `jobs.plan.name_problem`) is left out."""
        return cls(sources, PathSet.of(path for path in others if not name_problem(path)), exclude)

    def holds(self, path: str) -> bool:
        """Whether `path` is listed."""
        return path in self.sources or path in self.others

    def holds_folder(self, folder: str) -> bool:
        """Whether a listed path lies below `folder` ("": the root)."""
        return not folder or self.sources.has_folder(folder) or self.others.has_folder(folder)

    def could_show(self, path: str) -> bool:
        """Whether the listing would hold `path` were it a file: no folder of it is one the
        listing does not walk, and no exclude pattern leaves it out."""
        folders = path.split("/")[:-1]
        return all(map(keep_directory, folders)) and not excluded(path, self.exclude)


def is_broken(link: Link, document_path: str, listed: Listed) -> bool:
    """Whether `link` of the document at `document_path` names a page the listing lacks (the
    module's rule)."""
    if link.link_type != "internal" or link.target_document is not None:  # resolved: a source
        return False
    candidates = target_paths(link, document_path)
    if not candidates:  # outside the corpus root, or only a ?query
        return False
    if len(candidates) == 1:  # a path with an extension: a page's, or a file of another kind
        page = candidates[0].lower().endswith(PAGE_EXTENSIONS)
    else:  # `X`, `X/`: `X.md`, ..., `X/README.md` (the root's for `./`); a listed folder may
        # be a page a site makes (Docusaurus' generated index), `/docs/intro` a site's route
        page = not link.url.startswith("/") and not listed.holds_folder(
            posixpath.dirname(candidates[-1])
        )
    return page and all(not listed.holds(path) and listed.could_show(path) for path in candidates)


def broken_links(sources: Iterable[SourceInput], listed: Listed) -> tuple[tuple[str, str], ...]:
    """The broken links of the chunked `sources` as (source, href): each once, in the order of
    its first chunk (a link in the overlap of two chunks, or written twice, is one to fix). A
    failed source's kept rows are left as they were, and not counted."""
    return tuple(
        (source.path, href)
        for source in sources
        if source.document is not None
        for href in dict.fromkeys(
            link.url
            for chunk in source.document.chunks
            for link in chunk.links
            if is_broken(link, source.path, listed)
        )
    )


@dataclass(frozen=True)
class BrokenLinks:
    """Links to pages the corpus does not have (`jobs.broken_links`): how many, and the first
    NAMED by source path, then position in it, as (source, position, href)."""

    count: int = 0
    first: tuple[tuple[str, int, str], ...] = ()

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]]) -> BrokenLinks:
        """The record of the (source, href) `pairs`, each source's in the order it has them
        (those of several topics in any order of the topics)."""
        found: list[tuple[str, int, str]] = []
        seen: Counter[str] = Counter()
        for source, href in pairs:
            found.append((source, seen[source], href))
            seen[source] += 1
        return cls(len(found), tuple(heapq.nsmallest(NAMED, found)))

    def to_dict(self) -> dict[str, Any]:
        """Their count, and the first of them as {source, href} objects."""
        return {
            "count": self.count,
            "first": [{"source": source, "href": href} for source, _, href in self.first],
        }


def index_broken_links(topics: Iterable[TopicEntry]) -> BrokenLinks:
    """The whole index's broken links, from its manifest's `topics` (each records its own when
    it is built, and a kept topic's cannot change: `jobs.manifest.TopicEntry`)."""
    return BrokenLinks.of(pair for entry in topics for pair in entry.broken_links)
