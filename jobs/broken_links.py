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
to a file). A Hugo ref (`{{< ref "install.md" >}}`) is broken where each of its readings is, from
the page's folder and from the root (`chunking.links.hugo_readings`): Hugo tries both.

A topic's reduce records its links to pages no source is (`page_links`, in its manifest entry);
every run judges the whole index's against its own listing (`index_broken_links`), whether or
not it rebuilt their topics. The line of each the report names is looked up in its source at the
end of the run (`link_lines`): a writer fixes `guides/a.md:14`, and a topic records no lines.
`checks.broken_links: fail` makes a run with any `sources_failed`, exit 3 (`BrokenLinks.fails`).

Not judged: a link's anchor (`page.md#nope`, `#nowhere`): site generators make a heading's id
each their own way, and the chunk records hold the headings that start a chunk, not every one;
nor a link of a draft (an unpublished page: chunked as an empty page). A short final section
`semantic` drops (`ChunkedDocument.skipped_links`, often a "Next steps" list of links) is in no
chunk: its links to pages are recorded whether or not a source is there, and judged likewise
(until 2026-11-30 they were not; a topic built before is judged so from its next rebuild).
"""

from __future__ import annotations

import heapq
import posixpath
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from chunking.blocks import parse
from chunking.links import candidate_paths, hugo_readings
from chunking.normalize import normalize
from chunking.record import ChunkedDocument
from indexing import SourceInput
from jobs.manifest import TopicEntry
from jobs.path_set import PathSet
from jobs.plan import excluded, keep_directory, name_problem
from jobs.stats import NAMED
from jobs.storage import Storage

PAGE_EXTENSIONS = (".md", ".mdx", ".markdown")


@dataclass(frozen=True)
class Listed:
    """The input's listing as the check sees it: its paths, and the `sources.exclude` patterns
    that left paths out of it."""

    paths: PathSet
    exclude: tuple[str, ...] = ()

    @classmethod
    def of(cls, paths: Iterable[str], exclude: tuple[str, ...]) -> Listed:
        """The listing of `paths` (sources, files no glob matches, symbolic links not followed);
        one no index can name (not UTF-8: `jobs.plan.name_problem`) is left out."""
        return cls(PathSet.of(path for path in paths if not name_problem(path)), exclude)

    def holds(self, path: str) -> bool:
        """Whether `path` is listed."""
        return path in self.paths

    def holds_folder(self, folder: str) -> bool:
        """Whether a listed path lies below `folder` ("": the root)."""
        return not folder or self.paths.has_folder(folder)

    def could_show(self, path: str) -> bool:
        """Whether the listing would hold `path` were it a file: no folder of it is one the
        listing does not walk, and no exclude pattern leaves it out."""
        folders = path.split("/")[:-1]
        return all(map(keep_directory, folders)) and not excluded(path, self.exclude)


def page_paths(href: str, document_path: str) -> tuple[str, ...]:
    """The paths a relative link `href` of the document at `document_path` may name, where it
    names a markdown page whatever the listing holds (the module's rule); () for one out of the
    corpus root, to a file of another kind, or a site's route (`/docs/intro`)."""
    candidates = candidate_paths(href, document_path, page=True)
    if len(candidates) == 1:  # a path with an extension: a page's, or a file of another kind
        return candidates if candidates[0].lower().endswith(PAGE_EXTENSIONS) else ()
    return () if href.startswith("/") else candidates


def is_broken(href: str, document_path: str, listed: Listed) -> bool:
    """Whether the link `href` of the document at `document_path`, which names no source, names
    a page the listing lacks (the module's rule)."""
    readings = hugo_readings(href, document_path)
    if readings:
        return all(is_broken(reading, document_path, listed) for reading in readings)
    candidates = page_paths(href, document_path)
    # `X`, `X/`: `X.md`, ..., `X/README.md` (the root's for `./`); a listed folder may be a page
    # a site makes (Docusaurus' generated index)
    if len(candidates) > 1 and listed.holds_folder(posixpath.dirname(candidates[-1])):
        return False
    return bool(candidates) and all(
        not listed.holds(path) and listed.could_show(path) for path in candidates
    )


def page_links(
    sources: Iterable[SourceInput], carried: Mapping[str, Iterable[str]] | None = None
) -> tuple[tuple[str, str], ...]:
    """The links of the chunked `sources` to pages (`page_paths`), as (source, href): their
    chunks' to pages no source is, then those of a final section the strategy dropped
    (`ChunkedDocument.skipped_links`), to any page (no chunk row holds them, and the plan follows
    none of them); each once, in that order (a link in the overlap of two chunks, or written
    twice, is one to fix). `carried`: for each source carried from the last run (rebuilt from
    the tables, without its dropped section), the hrefs that run recorded for it
    (`TopicEntry.page_links`), those its chunks do not hold kept: its dropped section's. Whether
    each is broken is the listing's to say, on every run (`index_broken_links`). A failed
    source's kept rows are left as they were, and not counted."""
    carried = carried or {}
    return tuple(
        (source.path, href)
        for source in sources
        if source.document is not None
        for href in dict.fromkeys(
            _page_hrefs(source.path, source.document, carried.get(source.path, ()))
        )
    )


def _page_hrefs(path: str, document: ChunkedDocument, recorded: Iterable[str]) -> Iterator[str]:
    """`page_links`' hrefs of one source, with repeats: its chunks', its dropped section's, then
    the `recorded` ones its chunks do not hold."""
    held = [link for chunk in document.chunks for link in chunk.links]
    for link in held:
        if link.link_type == "internal" and link.target_document is None:
            if page_paths(link.url, path):
                yield link.url
    for link in document.skipped_links:
        if link.link_type == "internal" and page_paths(link.url, path):
            yield link.url
    urls = {link.url for link in held}
    yield from (href for href in recorded if href not in urls)


@dataclass(frozen=True, order=True)
class BrokenLink:
    """One link to a page the corpus does not have: its source, its place among that source's
    (the order its chunks have them), its href as written and the line of the source it is
    first on (None: not looked up, or the source could not be read again)."""

    source: str
    position: int
    href: str
    line: int | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """{source, href, line} (`line` null where unknown)."""
        return {"source": self.source, "href": self.href, "line": self.line}


@dataclass(frozen=True)
class BrokenLinks:
    """Links to pages the corpus does not have (`jobs.broken_links`): how many, the first NAMED
    by source path, then position in it, and the check's setting (`checks.broken_links`)."""

    count: int = 0
    first: tuple[BrokenLink, ...] = ()
    check: str = "note"

    @classmethod
    def of(cls, pairs: Iterable[tuple[str, str]], check: str = "note") -> BrokenLinks:
        """The record of the (source, href) `pairs`, each source's in the order it has them
        (those of several topics in any order of the topics)."""
        found: list[BrokenLink] = []
        seen: Counter[str] = Counter()
        for source, href in pairs:
            found.append(BrokenLink(source, seen[source], href))
            seen[source] += 1
        return cls(len(found), tuple(heapq.nsmallest(NAMED, found)), check)

    @property
    def fails(self) -> bool:
        """Whether they fail the run (exit 3): some, under `checks.broken_links: fail`."""
        return self.check == "fail" and self.count > 0

    def with_lines(self, source: Storage) -> BrokenLinks:
        """These with the line of each of the first, from their sources in `source` (the
        input), read again (NAMED files at most); a source that cannot be read, or no longer
        holds the link, leaves its lines unknown."""
        paths = sorted({link.source for link in self.first})
        lines = {
            path: link_lines(data)
            for path, data in source.read_many(paths).items()
            if isinstance(data, bytes)
        }
        first = tuple(
            replace(link, line=lines.get(link.source, {}).get(link.href)) for link in self.first
        )
        return replace(self, first=first)

    def to_dict(self) -> dict[str, Any]:
        """Their count, the first of them as {source, href, line} objects, and the check."""
        return {
            "count": self.count,
            "first": [link.to_dict() for link in self.first],
            "check": self.check,
        }


def link_lines(data: bytes) -> dict[str, int]:
    """The line each href of the markdown source `data` is first on, as chunking finds its links
    (`chunking.blocks.parse`: a reference link's is the line it is used on); {} for a source
    chunking cannot read."""
    try:
        links = parse(normalize(data)).links
    except ValueError:  # ChunkingError: not text, a front matter that is no mapping
        return {}
    lines: dict[str, int] = {}
    for found in links:
        lines.setdefault(found.url, found.line)
    return lines


def index_broken_links(
    topics: Iterable[TopicEntry],
    paths: Iterable[str],
    exclude: tuple[str, ...],
    check: str = "note",
    source: Storage | None = None,
) -> BrokenLinks:
    """The whole index's broken links: those of the links its manifest's `topics` record
    (`TopicEntry.page_links`) that the input's listed `paths` lack (`exclude`: its
    `sources.exclude`), judged on every run, so a kept topic's are true when a file or folder a
    link names appears or goes; `check`: `checks.broken_links`; with the input's `source`, the
    lines of the first (`BrokenLinks.with_lines`). The listing is not looked at when no topic
    has any."""
    pairs = [pair for entry in topics for pair in entry.page_links]
    return broken_links_of(pairs, paths, exclude, check, source)


def broken_links_of(
    pairs: Iterable[tuple[str, str]],
    paths: Iterable[str],
    exclude: tuple[str, ...],
    check: str = "note",
    source: Storage | None = None,
) -> BrokenLinks:
    """Those of the (source, href) links to pages `pairs` (`page_links`) that the input's listed
    `paths` lack, as `index_broken_links` judges them (a dry run's: `jobs.dry_run`)."""
    pairs = list(pairs)
    if not pairs:
        return BrokenLinks(check=check)
    listed = Listed.of(paths, exclude)
    broken = BrokenLinks.of(
        ((path, href) for path, href in pairs if is_broken(href, path, listed)), check
    )
    return broken.with_lines(source) if source is not None and broken.count else broken
