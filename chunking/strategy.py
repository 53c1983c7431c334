"""The strategy base class, the strategies by name, and the shared finishing step.

A strategy subclasses `Strategy`, sets `name`, `defaults` (its own options) and `key_options`,
and implements `split(doc) -> Split`. `Strategy.chunk` turns the drafts into numbered `Chunk`
records and runs seed 002's validation checklist (section 11).

A built-in strategy's module is listed in `_MODULES` (imported on first use) and its class is
decorated with `@register`. A third-party strategy lives in a module of its own package, sets
`version` too, and is named either by an entry point of the group `mdindex.strategies` (name =
its `name`; `paragraphs = my_package.paragraphs:Paragraphs`) or, in place of a name, by the
dotted path `my_package.paragraphs:Paragraphs`. Either is resolved where it is used, the same way
in every process (a build's Ray workers too), so the package must be importable there: installed
in their environment, on their PYTHONPATH, or shipped by a Ray job's runtime_env.
"""

from __future__ import annotations

import hashlib
import importlib
import json
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Mapping, MutableSet
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from types import MappingProxyType
from typing import Any, ClassVar

from chunking.blocks import Heading, ParsedDocument, text_line_kinds
from chunking.canonical import canonical_chunk_text, is_code
from chunking.links import FoundLink, resolve
from chunking.record import (
    CHUNKING_FAILED,
    Chunk,
    ChunkedDocument,
    ChunkingError,
    Link,
    make_chunk_id,
)
from chunking.substrings import Substrings
from chunking.tokens import TokenCounter, get_counter
from plugins import named_class

_MODULES = {
    "semantic": "chunking.semantic",
    "headers": "chunking.headers",
    "structural": "chunking.structural",
    "hierarchical": "chunking.hierarchical",
}
_REGISTRY: dict[str, type[Strategy]] = {}
# Where installed packages name their strategies (`[project.entry-points."mdindex.strategies"]`).
ENTRY_POINTS = "mdindex.strategies"
_FOREIGN: dict[str, type[Strategy]] = {}  # third-party strategies resolved, by what named them

# Options every strategy understands; they never change chunk texts, except the tokenizer.
# `embed_context` (default: the strategy's `default_embed_context`) embeds each chunk with its
# heading path in front (`Chunk.context`); a non-default value is in the cache key.
_COMMON = MappingProxyType({"document_path": "", "corpus_paths": frozenset()})
# The ones a caller passes per source (the build does): never a strategy setting of a config.
PER_SOURCE_OPTIONS = frozenset(_COMMON)


@dataclass(frozen=True)
class Draft:
    """A chunk before numbering: its text and the original lines its own content comes from."""

    text: str
    start_line: int
    end_line: int
    headings: tuple[Heading, ...] = ()  # active heading stack, outermost first
    title: str | None = None  # None: the innermost heading's text
    content_type: str | None = None  # None: "code" when is_code, else "text"
    line_kinds: bytes | None = None  # one kind per line of text; None: found by parsing `text`
    token_count: int | None = None  # None: counted from `text` by the strategy's counter
    extras: Mapping[str, Any] = field(default_factory=dict)
    chunk_path: str | None = None  # None: the header path
    context: str | None = None  # None: "Context: A > B" over the heading path (embed_context)


@dataclass(frozen=True)
class Split:
    """What a strategy's `split` returns."""

    drafts: tuple[Draft, ...]
    is_chunked: bool | None = None  # None: more than one chunk
    skipped_tail_tokens: int = 0  # tokens of a final piece the strategy dropped
    skipped_tail: Draft | None = None  # that piece (None: none), for its links


def register(cls: type[Strategy]) -> type[Strategy]:
    """Class decorator adding a built-in strategy (one `_MODULES` lists) to the registry. A
    third-party strategy is not registered: registered on import, it would be known in the
    process that imported it alone, not in a build's Ray workers (see the module docstring)."""
    if cls.name not in _MODULES:
        raise ValueError(
            f"register: {cls.name!r} is no built-in strategy; name a third-party one by an entry "
            f"point of the group {ENTRY_POINTS!r} or by its dotted path 'package.module:Class'"
        )
    _REGISTRY[cls.name] = cls
    return cls


def strategy_class(name: str) -> type[Strategy]:
    """The strategy class `name` names: a built-in one (its module imported on first use), an
    installed entry point's of the group `ENTRY_POINTS`, or a dotted path `package.module:Class`.
    ValueError naming the known names for any other."""
    if name in _MODULES:
        if name not in _REGISTRY:
            importlib.import_module(_MODULES[name])
        return _REGISTRY[name]
    if name not in _FOREIGN:
        _FOREIGN[name] = _foreign(name)
    return _FOREIGN[name]


def get_strategy(name: str = "semantic", **options: Any) -> Strategy:
    """An instance of strategy `name` with `options` validated."""
    return strategy_class(name)(**options)


def strategy_names() -> tuple[str, ...]:
    """Names of every built-in strategy, sorted."""
    return tuple(sorted(_MODULES))


def known_strategies() -> tuple[str, ...]:
    """Names of every built-in strategy and every installed one (`ENTRY_POINTS`), sorted."""
    return tuple(sorted({*_MODULES, *(point.name for point in entry_points(group=ENTRY_POINTS))}))


def _foreign(name: str) -> type[Strategy]:
    """The third-party strategy class a dotted path or an entry point's name names
    (`plugins.named_class`); ValueError naming the known names where none does."""
    found = named_class(
        name,
        group=ENTRY_POINTS,
        kind="chunking strategy",
        base=Strategy,
        reserved=_MODULES,
        version_use="whenever the same input and options can chunk differently: it is in the "
        "cache key",
    )
    if found is None:
        raise ValueError(
            f"unknown chunking strategy {name!r} (known: {', '.join(known_strategies())}; "
            "or a class of yours as 'package.module:Class')"
        )
    return found


class Strategy:
    """Base class: options, cache key, token counter and the shared finishing step."""

    name: ClassVar[str]
    defaults: ClassVar[Mapping[str, Any]] = MappingProxyType({})
    key_options: ClassVar[tuple[str, ...]] = ()  # spelled out in the cache key, in this order
    default_tokenizer: ClassVar[str] = "heuristic"
    default_embed_context: ClassVar[bool] = False
    # A third-party strategy's own revision (required of one; built-in ones are covered by
    # `chunking.REVISION`): in the cache key, so chunks of another version are never carried.
    version: ClassVar[str] = ""

    def __init__(self, **options: Any):
        known = {
            **_COMMON,
            "tokenizer": self.default_tokenizer,
            "embed_context": self.default_embed_context,
            **self.defaults,
        }
        for key in options:
            if key not in known:
                raise ValueError(
                    f"unknown option {key!r} for chunking strategy {self.name!r} "
                    f"(known: {', '.join(sorted(known))})"
                )
        self._defaults = known
        self.options: Mapping[str, Any] = MappingProxyType(
            {
                key: _coerce(key, options.get(key, default), default)
                for key, default in known.items()
            }
        )

    @property
    def counter(self) -> TokenCounter:
        """The token counter named by the `tokenizer` option."""
        return get_counter(self.options["tokenizer"])

    @property
    def hard_max_tokens(self) -> int | None:
        """No chunk may count more tokens than this (None: the strategy has no token limit)."""
        return None

    @property
    def cache_key(self) -> str:
        """`name-<key options>` (`name-v<version>-<key options>` for a third-party strategy), plus
        a hash of any other option that differs from its default."""
        version = [f"v{self.version}"] if self.version else []
        parts = [self.name, *version, *(str(self.options[key]) for key in self.key_options)]
        changed = {
            key: value
            for key, value in self.options.items()
            if key not in PER_SOURCE_OPTIONS
            and key not in self.key_options
            and value != self._defaults[key]
        }
        if changed:
            digest = hashlib.sha256(json.dumps(changed, sort_keys=True).encode()).hexdigest()
            parts.append(digest[:8])
        return "-".join(parts)

    def split(self, doc: ParsedDocument) -> Split:
        """The strategy itself: cut `doc` into drafts."""
        raise NotImplementedError

    def chunk(
        self, doc: ParsedDocument, *, document_id: str = "", tenant_id: str = "default"
    ) -> ChunkedDocument:
        """Split `doc`, number and identify its chunks, and validate them (seed 002 section 11)."""
        result = self.split(doc)
        source = doc.source
        counter = self.counter
        link_lines = [found.line for found in doc.links]
        link_spans = [_link_span(link_lines, draft) for draft in result.drafts]
        indexes = _link_indexes(doc.links, link_spans, result.drafts)
        chunks = []
        embed_context = self.options["embed_context"]
        for ordinal, (draft, span) in enumerate(zip(result.drafts, link_spans, strict=True)):
            kinds = (
                draft.line_kinds if draft.line_kinds is not None else text_line_kinds(draft.text)
            )
            code = is_code(draft.text, kinds)
            headings_path = tuple(heading.title for heading in draft.headings)
            header_path = path_of(draft.headings)
            context = ""
            if embed_context:
                context = (
                    draft.context if draft.context is not None else path_context(headings_path)
                )
            chunks.append(
                Chunk(
                    ordinal=ordinal,
                    text=draft.text,
                    title=draft.title if draft.title is not None else _innermost(draft.headings),
                    headings_path=headings_path,
                    header_path=header_path,
                    start_line=draft.start_line,
                    end_line=draft.end_line,
                    token_count=(
                        counter.count(draft.text)
                        if draft.token_count is None
                        else draft.token_count
                    ),
                    is_code=code,
                    content_type=draft.content_type or ("code" if code else "text"),
                    links=self._links(doc, draft, span, indexes.get(span)),
                    chunk_id=make_chunk_id(
                        tenant_id,
                        document_id,
                        source.source_version_id,
                        ordinal,
                        canonical_chunk_text(draft.text, kinds),
                    ),
                    extras=dict(draft.extras),
                    chunk_path=header_path if draft.chunk_path is None else draft.chunk_path,
                    context=context,
                )
            )
        self.validate(doc, chunks)
        return ChunkedDocument(
            document_id=document_id,
            tenant_id=tenant_id,
            source_version_id=source.source_version_id,
            strategy=self.name,
            strategy_key=self.cache_key,
            chunks=tuple(chunks),
            front_matter=source.front_matter,
            is_chunked=len(chunks) > 1 if result.is_chunked is None else result.is_chunked,
            skipped_tail_tokens=result.skipped_tail_tokens,
            tokenizer=counter.name,
            skipped_links=self._skipped_links(doc, result.skipped_tail, link_lines),
        )

    def _skipped_links(
        self, doc: ParsedDocument, tail: Draft | None, link_lines: list[int]
    ) -> tuple[Link, ...]:
        """The links of the final piece the strategy dropped (`tail`), as a chunk of it would
        have them; () for none."""
        if tail is None:
            return ()
        return self._links(doc, tail, _link_span(link_lines, tail), None)

    def _links(
        self, doc: ParsedDocument, draft: Draft, span: tuple[int, int], index: _LinkIndex | None
    ) -> tuple[Link, ...]:
        """Links that start on the draft's own source lines (`span` of `doc.links`) and are in its
        text: their source text there (`[a][1]`, `[a](foo\\_bar.md)`), or their URL (a piece of a
        line cut inside a link holds its URL)."""
        held = (
            index.held(draft.text)
            if index is not None
            else [found for found in doc.links[slice(*span)] if _holds(draft.text, found)]
        )
        return tuple(
            resolve(found, self.options["document_path"], self.options["corpus_paths"])
            for found in held
        )

    def validate(self, doc: ParsedDocument, chunks: list[Chunk]) -> None:
        """Seed 002 section 11 checklist; any failure raises ChunkingError(CHUNKING_FAILED).

        The stable-id formula is applied by construction in `chunk`. A chunk is a root chunk
        when its content starts before the document's first heading; every other chunk needs a
        heading path.
        """
        first_heading = next(
            (block.start_line for block in doc.blocks if block.kind == "heading"), None
        )
        limit = self.hard_max_tokens
        for expected, chunk in enumerate(chunks):
            problem = None
            if chunk.ordinal != expected:
                problem = f"ordinal {chunk.ordinal} where {expected} was expected"
            elif not chunk.text.strip():
                problem = "empty text"
            elif limit is not None and chunk.token_count > limit:
                problem = f"{chunk.token_count} tokens, over the hard maximum of {limit}"
            elif not 1 <= chunk.start_line <= chunk.end_line <= len(doc.lines):
                problem = f"line range {chunk.start_line}..{chunk.end_line} outside the document"
            elif (
                first_heading is not None
                and chunk.start_line >= first_heading
                and not chunk.headings_path
            ):
                problem = "no heading path although the chunk lies under a heading"
            if problem:
                raise ChunkingError(
                    CHUNKING_FAILED,
                    f"strategy {self.name!r} produced an invalid chunk {chunk.ordinal}: {problem}",
                )


def _link_span(link_lines: list[int], draft: Draft) -> tuple[int, int]:
    """Where the links that start on the draft's own source lines are in the document's links
    (`link_lines`: the line each starts on)."""
    return bisect_left(link_lines, draft.start_line), bisect_right(link_lines, draft.end_line)


def _link_indexes(
    links: tuple[FoundLink, ...], spans: list[tuple[int, int]], drafts: tuple[Draft, ...]
) -> dict[tuple[int, int], _LinkIndex]:
    """An index of the links of each span (`_link_span`) where one costs less than `_holds`."""
    characters: dict[tuple[int, int], int] = defaultdict(int)
    sharing: dict[tuple[int, int], int] = defaultdict(int)
    for span, draft in zip(spans, drafts, strict=True):
        characters[span] += len(draft.text)
        sharing[span] += 1
    return {
        span: _LinkIndex.of(links[slice(*span)])
        for span, total in characters.items()
        if _worth_indexing(span[1] - span[0], total, sharing[span])
    }


def _worth_indexing(links: int, characters: int, drafts: int) -> bool:
    """Whether an index of `links`, made once, costs less than testing each against the texts of
    the `drafts` that share them (`characters` in all), as measured on a 2-core AMD EPYC: a test
    reads a text that does not hold the link to its end, twice (about 1 ns a character: the
    pieces of a line of links), one that holds it up to the link (about 1/16 of that: a single
    draft); the index takes 10 µs a link and reads each text once, at about 200 ns a character."""
    tested = links * characters // (1 if drafts > 1 else 16)
    return tested > 200 * characters + 10_000 * links


def _holds(text: str, found: FoundLink) -> bool:
    """Whether `text` holds the link's source text or its URL."""
    return found.markup in text or found.url in text


@dataclass(frozen=True)
class _LinkIndex:
    """Links indexed by their source texts and URLs: `held` is `_holds` for each of them, in one
    read of the text."""

    links: tuple[FoundLink, ...]
    strings: Substrings
    having: Mapping[str, frozenset[int]]  # a source text or URL -> the links that have it

    @classmethod
    def of(cls, links: tuple[FoundLink, ...]) -> _LinkIndex:
        """The index of `links`."""
        having: dict[str, set[int]] = {}
        for number, found in enumerate(links):
            # a text holding the source text holds the URL in it: the URL alone decides
            strings = (found.url,) if found.url in found.markup else (found.markup, found.url)
            for string in strings:
                having.setdefault(string, set()).add(number)
        return cls(
            links,
            Substrings.of(having),
            {string: frozenset(numbers) for string, numbers in having.items()},
        )

    def held(self, text: str) -> list[FoundLink]:
        """The links `text` holds, in their order."""
        numbers = set().union(*(self.having[string] for string in self.strings.found_in(text)))
        return [self.links[number] for number in sorted(numbers)]


def path_of(headings: tuple[Heading, ...]) -> str:
    """Seed 001's header path of a heading stack, e.g. `# A > ## B`: titles, so without a
    trailing attribute list (`{ #anchor }`)."""
    return " > ".join(f"{'#' * heading.level} {heading.title}" for heading in headings)


def path_context(headings_path: tuple[str, ...]) -> str:
    """Seed 004's context line over a heading path, e.g. "Context: A > B\n\n" ("" without one)."""
    return f"Context: {' > '.join(headings_path)}\n\n" if headings_path else ""


def _innermost(headings: tuple[Heading, ...]) -> str:
    return headings[-1].title if headings else ""


def _coerce(key: str, value: Any, default: Any) -> Any:
    """`value` checked against the type of the option's default (ints accepted for floats)."""
    if isinstance(default, frozenset):
        # An immutable set is taken as is (a frozenset, the build's `jobs.path_set.PathSet`): the
        # corpus's paths, passed for every source (checking its items each time cost
        # O(sources^2) in a build); an item that is not a path never matches.
        if isinstance(value, AbstractSet) and not isinstance(value, MutableSet):
            return value
        if not isinstance(value, (set, list, tuple)) or not all(
            isinstance(item, str) for item in value
        ):
            raise ValueError(f"option {key!r} must be a collection of paths, got {value!r}")
        return frozenset(value)
    if isinstance(default, bool) or isinstance(value, bool):
        if not (isinstance(default, bool) and isinstance(value, bool)):
            raise ValueError(f"option {key!r} must be {type(default).__name__}, got {value!r}")
        return value
    if isinstance(default, float) and isinstance(value, int):
        return float(value)
    if not isinstance(value, type(default)):
        raise ValueError(f"option {key!r} must be {type(default).__name__}, got {value!r}")
    return value
