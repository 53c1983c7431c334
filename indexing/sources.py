"""Which files are sources, which directories are topics, which directories get an index.json."""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from collections.abc import Callable, Iterable

from indexing.paths import INDEX, TOPIC_SPEC, in_topic, not_one_string, parent_of

QA_PAIRS = "qa-pairs.md"
KEYWORDS_FILE = "_keywords/words.md"
# Files a topic reads beside its sources.
TOPIC_FILES = frozenset({QA_PAIRS, TOPIC_SPEC})
# Never sources, whatever the globs: those, and the build's own index.json files (with
# `sources.globs: ["*"]` an in-place build read them back as sources, for ever).
NOT_SOURCES = TOPIC_FILES | {INDEX}
DEFAULT_GLOBS = ("*.md",)  # file-name patterns of sources (`sources.globs`)
GLOBS = "file-name patterns"
# macOS writes an AppleDouble file `._name` (binary: Finder data and extended attributes) beside
# each file it copies to a volume or archive that cannot hold them; `._page.md` is not a page.
APPLE_DOUBLE = "._"


def is_source(relpath: str, globs: Iterable[str] = DEFAULT_GLOBS) -> bool:
    """Whether a corpus-relative path is a source: its file name matches a glob, it is not
    qa-pairs.md, topic-spec.md or index.json nor a macOS AppleDouble file (`._name`), and no
    folder on its path starts with "_" or "." (a file name may start with ".": tldr-pages'
    `..md`). TypeError for `globs` given as one string.

    A build asks it up to four times for each listed file (3.1 µs a call on the 2-core AMD EPYC,
    1.1 µs with the globs as one expression: 125 s of a 10M-file listing's planning, 45 s)."""
    folders, _, name = relpath.rpartition("/")
    if name in NOT_SOURCES or name.startswith(APPLE_DOUBLE):
        return False
    if folders[:1] in ("_", ".") or "/_" in folders or "/." in folders:
        return False
    return _names_matching(tuple(not_one_string("globs", GLOBS, globs)))(name) is not None


@functools.lru_cache(maxsize=64)
def _names_matching(globs: tuple[str, ...]) -> Callable[[str], re.Match | None]:
    """A match of a file name against any of `globs`, as `fnmatch.fnmatchcase` matches each."""
    either = "|".join(f"(?:{fnmatch.translate(glob)})" for glob in globs)
    return re.compile(either or "(?!)").match  # no globs: nothing matches


def group_sources(
    relpaths: Iterable[str], globs: Iterable[str] = DEFAULT_GLOBS
) -> dict[str, list[str]]:
    """Topic id (the directory, "" for the root) -> its sorted source paths, topics sorted."""
    globs = tuple(not_one_string("globs", GLOBS, globs))
    topics: dict[str, list[str]] = {}
    for path in relpaths:
        if is_source(path, globs):
            topics.setdefault(posixpath.dirname(path), []).append(path)
    return {topic: sorted(topics[topic]) for topic in sorted(topics)}


def nearest_keywords_path(topic: str, keyword_paths: Iterable[str]) -> str | None:
    """The `_keywords/words.md` of the topic or of its nearest ancestor, or None (`keyword_paths`
    a set is taken as it is: a caller asking for every topic of a corpus makes it once; a single
    string is a TypeError)."""
    paths = not_one_string("keyword_paths", "paths", keyword_paths)
    available = paths if isinstance(paths, (set, frozenset)) else set(paths)
    directory: str | None = topic
    while directory is not None:
        candidate = in_topic(directory, KEYWORDS_FILE)
        if candidate in available:
            return candidate
        directory = parent_of(directory)
    return None


def index_tree(topics: Iterable[str]) -> dict[str, list[str]]:
    """Every directory that gets an index.json (the topics and all their ancestors up to the root)
    -> its sorted child directories that have one. Empty when there are no topics."""
    tree: dict[str, set[str]] = {}
    for topic in topics:
        tree.setdefault(topic, set())
        child, parent = topic, parent_of(topic)
        while parent is not None:
            tree.setdefault(parent, set()).add(child)
            child, parent = parent, parent_of(parent)
    return {directory: sorted(tree[directory]) for directory in sorted(tree)}
