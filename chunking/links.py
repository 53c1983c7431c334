"""Link extraction (seed 002 section 9): find links with markdown-it's inline parser, classify them
and resolve relative links against the corpus.

Only inline tokens that can hold a link are inline-parsed, with the inline rules that matter for
links, so documents pay for inline parsing only where a link can be.
"""

from __future__ import annotations

import posixpath
import re
import unicodedata
from bisect import bisect_left
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from functools import lru_cache
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

from chunking.record import Link

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")
_NEWLINE = re.compile("\n")
_AUTOLINK_START = re.compile(r"<(?:[A-Za-z][A-Za-z0-9+.\-]{1,31}:|[^\s<>@]+@)")


@dataclass(frozen=True)
class FoundLink:
    """A link as written in the source, with the original line it starts on."""

    line: int
    url: str
    text: str
    is_image: bool
    markup: str = ""  # its source text up to the end of that line: `[a](foo\_bar.md)`, `[a][1]`


@lru_cache(maxsize=1)
def _inline_parser() -> MarkdownIt:
    """CommonMark inline rules that decide where links are (code spans, escapes, raw HTML, links,
    images, autolinks); emphasis, entities and line breaks cannot create or hide a link."""
    md = MarkdownIt("commonmark")
    md.inline.ruler.disable(["newline", "emphasis", "entity"])
    md.inline.ruler2.disable(["balance_pairs", "emphasis", "fragments_join"])
    # Keep URLs exactly as written (no percent-encoding, no dropping of unusual schemes).
    md.normalizeLink = lambda url: url
    md.validateLink = lambda url: True
    rules = {rule.name: rule.fn for rule in md.inline.ruler.__rules__}
    for name in ("link", "image", "autolink"):
        md.inline.ruler.at(name, _positioned(rules[name]))
    md.inline.ruler.before("link", "wikilink", _positioned(_wikilink))
    md.inline.ruler.before("link", "myst_role", _positioned(_myst_role))
    md.inline.ruler.before("link", "hugo_ref", _positioned(_hugo_ref))
    return md


# Obsidian's and other wikis' links: `[[Page]]`, `[[Page|label]]`, `[[Page#Heading]]`, and
# `![[picture.png]]` (an embed) after a `!`; a target holds no bracket, bar or line break.
_WIKILINK = re.compile(r"\[\[([^\[\]|\n]+?)(?:\|([^\[\]\n]*))?\]\]")
# MyST's cross-reference roles to a page: {doc}`path` or {doc}`label <path>` (a path without
# extension, relative to the page, `/` the source root), {download}`file`.
_MYST_ROLE = re.compile(r"\{(doc|download)\}`([^`\n]*?)(?:\s*<([^<>`\n]+)>)?`")
# Hugo's ref and relref shortcodes, `{{< ref "install.md" >}}`, `{{% relref "/docs/a#b" %}}`: a
# page's path, quoted or not (`hugo_ref_path`); as a link's destination, in parentheses.
_HUGO_REF = re.compile(
    r"\{\{([<%])\s*(?:rel)?ref\s+(?:\"([^\"\n]*)\"|`([^`\n]*)`|([^\s\"`<>%{}]+))\s*([>%])\}\}"
)
_HUGO_DESTINATION = re.compile(rf"\(\s*({_HUGO_REF.pattern})\s*\)")


def _wikilink(state: StateInline, silent: bool) -> bool:
    """Inline rule: a wiki link as a link to its target page (a name without extension, resolved
    as `./Page` is; `Folder/Page` from the page's folder too), its label (or target) as text; an
    embed as an image."""
    embed = state.src.startswith("![[", state.pos)
    if not embed and not state.src.startswith("[[", state.pos):
        return False
    match = _WIKILINK.match(state.src, state.pos + embed)
    if match is None or (match.group(1).lower() == "toc" and match.group(2) is None):
        return False  # `[[toc]]`: VitePress' (markdown-it-toc's) table of contents
    if not silent:
        target = match.group(1).strip()
        if embed:
            image = state.push("image", "img", 0)
            image.attrs, image.content = {"src": target}, match.group(2) or ""
        else:
            _push_link(state, target, match.group(2) or target)
    state.pos = match.end()
    return True


def _myst_role(state: StateInline, silent: bool) -> bool:
    """Inline rule: MyST's {doc} and {download} roles as links to their path."""
    match = _MYST_ROLE.match(state.src, state.pos) if state.src[state.pos] == "{" else None
    if match is None or not (match.group(3) or match.group(2)).strip():
        return False
    if not silent:
        label, target = match.group(2), match.group(3)
        target = (target or label).strip()
        _push_link(state, target, label.strip() if match.group(3) else target)
    state.pos = match.end()
    return True


def _hugo_ref(state: StateInline, silent: bool) -> bool:
    """Inline rule: a link whose destination is Hugo's ref or relref shortcode as a link to that
    shortcode (its spaces collapsed), which `hugo_ref_path` reads."""
    if state.src[state.pos] != "[" or not state.env["shortcodes"]:
        return False
    label_end = state.md.helpers.parseLinkLabel(state, state.pos, True)
    match = _HUGO_DESTINATION.match(state.src, label_end + 1) if label_end >= 0 else None
    href = " ".join(match.group(1).split()) if match else ""
    if not hugo_ref_path(href):
        return False
    if not silent:
        state.push("link_open", "a", 1).attrs = {"href": href}
        end, state.pos, state.posMax = state.posMax, state.pos + 1, label_end
        state.linkLevel += 1
        state.md.inline.tokenize(state)
        state.linkLevel -= 1
        state.posMax = end
        state.push("link_close", "a", -1)
    state.pos = match.end()
    return True


def hugo_ref_path(url: str) -> str:
    """The page path (`#anchor` included) of a URL that is Hugo's ref or relref shortcode
    (`{{< ref "install.md" >}}`, `{{% relref /docs/a %}}`); '' for any other URL."""
    match = _HUGO_REF.fullmatch(url)
    if match is None or match.group(1) + match.group(5) not in ("<>", "%%"):
        return ""
    return "".join(filter(None, match.group(2, 3, 4))).strip()


def hugo_readings(url: str, document_path: str) -> tuple[str, ...]:
    """The relative links a Hugo ref (see `hugo_ref_path`) of the document at `document_path`
    reads as, in Hugo's order: its path from the page's folder, then from the content root (a
    path with a leading `/`: from the root only), each written from the page's folder; () for
    an #anchor alone and any other URL."""
    page = hugo_ref_path(url).split("#", 1)[0]
    if not page:
        return ()
    from_root = posixpath.relpath("/" + page.lstrip("/"), "/" + posixpath.dirname(document_path))
    from_root += "/" if page.endswith("/") else ""
    return (from_root,) if page.startswith("/") or page == from_root else (page, from_root)


def _push_link(state: StateInline, href: str, text: str) -> None:
    opener = state.push("link_open", "a", 1)
    opener.attrs = {"href": href}
    state.push("text", "", 0).content = text
    state.push("link_close", "a", -1)


def _positioned(rule: Callable[[StateInline, bool], bool]) -> Callable[[StateInline, bool], bool]:
    """`rule` recording where the link or image it makes starts and ends in the inline content
    (`meta` of its link_open or image token), so a link gets its own line and source text."""

    def positioned(state: StateInline, silent: bool) -> bool:
        start, count = state.pos, len(state.tokens)
        if not rule(state, silent):
            return False
        if not silent:
            opener = next(t for t in state.tokens[count:] if t.type in ("link_open", "image"))
            opener.meta.update(start=start, end=state.pos)
        return True

    return positioned


def find_links(
    tokens: Iterable[Token], line_offset: int, references: dict
) -> tuple[FoundLink, ...]:
    """Links in the inline tokens of a block parse; `line_offset` maps token lines to file lines."""
    md = _inline_parser()
    env = {"references": references}
    found: list[FoundLink] = []
    for token in tokens:
        if token.type != "inline" or not _may_link(token.content, references):
            continue
        children: list[Token] = []
        env["shortcodes"] = "{{" in token.content  # `_hugo_ref` looks for none otherwise
        md.inline.parse(token.content, md, env, children)
        breaks = [match.start() for match in _NEWLINE.finditer(token.content)]
        found.extend(_links_in(children, token.content, breaks, token.map[0] + line_offset + 1))
    return tuple(found)


def _may_link(text: str, references: dict) -> bool:
    """Cheap test: a link or image needs `](` or `[` plus a reference definition, a wiki link
    `[[`, a MyST role `}``; an autolink needs `<` and a scheme or an e-mail address (HTML tags
    such as `<a href>` are not links)."""
    return (
        "](" in text
        or "[[" in text
        or "}`" in text
        or (bool(references) and "[" in text)
        or ("<" in text and _AUTOLINK_START.search(text) is not None)
    )


def _links_in(
    children: list[Token], content: str, breaks: list[int], first_line: int
) -> Iterable[FoundLink]:
    """The links and images among the inline tokens of `content`, which starts on `first_line`
    and has its line breaks at offsets `breaks` (its lines are the source's, container markers
    and indentation left out)."""
    open_link: Token | None = None
    text: list[str] = []
    for child in children:
        if child.type == "image":
            line, markup = _where(child, content, breaks, first_line)
            src = child.attrGet("src") or ""
            yield FoundLink(line, src, child.content, is_image=True, markup=markup)
        elif child.type == "link_open":
            open_link, text = child, []
        elif child.type == "link_close" and open_link is not None:
            line, markup = _where(open_link, content, breaks, first_line)
            href = open_link.attrGet("href") or ""
            yield FoundLink(line, href, "".join(text), is_image=False, markup=markup)
            open_link = None
        elif open_link is not None and child.type in ("text", "code_inline"):
            text.append(child.content)


def _where(opener: Token, content: str, breaks: list[int], first_line: int) -> tuple[int, str]:
    """(line, source text up to the end of that line) of the link or image `opener` starts."""
    start, end = opener.meta["start"], opener.meta["end"]
    line_end = content.find("\n", start, end)
    markup = content[start : end if line_end < 0 else line_end]
    return first_line + bisect_left(breaks, start), markup


def link_type(url: str, is_image: bool) -> str:
    """Seed 002 section 9 link type: image, anchor, email, external, internal or other."""
    if is_image:
        return "image"
    url = hugo_ref_path(url) or url
    if url.startswith("#"):
        return "anchor"
    lowered = url.lower()
    if lowered.startswith("mailto:"):
        return "email"
    if lowered.startswith(("http://", "https://", "//")):
        return "external"
    if _SCHEME.match(url):
        return "other"
    return "internal"


def resolve(found: FoundLink, document_path: str, corpus_paths: AbstractSet[str]) -> Link:
    """The Link record; a relative link to a corpus file gets that file as `target_document`: the
    first of `candidate_paths` that is one, else the first of their other Unicode normal forms
    (`spellings`)."""
    kind = link_type(found.url, found.is_image)
    target = None
    if kind == "anchor":
        target = document_path or None
    elif kind in ("internal", "image"):
        candidates = candidate_paths(found.url, document_path, page=kind == "internal")
        target = next((path for path in spellings(candidates) if path in corpus_paths), None)
    return Link(url=found.url, text=found.text, link_type=kind, target_document=target)


def spellings(paths: tuple[str, ...]) -> tuple[str, ...]:
    """`paths` as written, then those of their other Unicode normal forms (NFC, NFD) that differ:
    a page named on macOS has an NFD name, and a link typed to it most often an NFC one."""
    if all(path.isascii() for path in paths):
        return paths
    forms = (unicodedata.normalize(form, path) for form in ("NFC", "NFD") for path in paths)
    return tuple(dict.fromkeys((*paths, *forms)))


def resolve_again(link: Link, document_path: str, corpus_paths: AbstractSet[str]) -> Link:
    """A link record resolved in another corpus: what chunking its document there would give."""
    found = FoundLink(0, link.url, link.text, is_image=link.link_type == "image")
    return resolve(found, document_path, corpus_paths)


def target_paths(link: Link, document_path: str) -> tuple[str, ...]:
    """The corpus paths a relative link or image of a document may name, whether or not they are
    sources now: which of them are decides its `target_document` (`candidate_paths`, then their
    other Unicode normal forms: `spellings`)."""
    if link.link_type not in ("internal", "image"):
        return ()
    return spellings(candidate_paths(link.url, document_path, page=link.link_type == "internal"))


def candidate_paths(url: str, document_path: str, *, page: bool) -> tuple[str, ...]:
    """The corpus paths a relative URL may name, in order of preference: its path as written;
    then, for a `page` link (not an image) whose last name has no extension or that ends with
    `/` (Docusaurus' `./setup`, MkDocs' `../api/`), `X.md`, `X.mdx`, `X/index.md`, `X/index.mdx`
    and `X/README.md` (Docusaurus' pages are MDX as often as markdown; the root folder's
    `index.md`, `index.mdx` and `README.md` for `/` or `./` in a root document). A Hugo ref's
    are those of its readings (`hugo_readings`), each with Hugo's section page, `X/_index.md`."""
    if hugo_ref_path(url):
        return _hugo_candidates(url, document_path)
    path = _url_path(url)
    normal = _normal_path(path, document_path) if path else None
    if normal is None:
        return ()
    extension = posixpath.splitext(posixpath.basename(normal))[1]
    if not page or (extension and not path.endswith("/")):
        return () if normal == "." else (normal,)
    if normal == ".":
        return ("index.md", "index.mdx", "README.md")
    return (
        normal,
        f"{normal}.md",
        f"{normal}.mdx",
        f"{normal}/index.md",
        f"{normal}/index.mdx",
        f"{normal}/README.md",
    )


def _hugo_candidates(url: str, document_path: str) -> tuple[str, ...]:
    """The `candidate_paths` of a Hugo ref's readings (`hugo_readings`), in order, each page link
    without an extension naming its folder's `_index.md` last (a section's page)."""
    found: list[str] = []
    for reading in hugo_readings(url, document_path):
        candidates = candidate_paths(reading, document_path, page=True)
        found += (*candidates, *_section_page(candidates))
    return tuple(dict.fromkeys(found))


def _section_page(candidates: tuple[str, ...]) -> tuple[str, ...]:
    """Hugo's section page (`X/_index.md`) for the `candidate_paths` of a page link without an
    extension (`X`, ..., `X/README.md`; the root's `index.md`, ...); () for others."""
    if len(candidates) < 2:
        return ()
    folder = posixpath.dirname(candidates[-1])
    return (posixpath.join(folder, "_index.md"),)


def _url_path(url: str) -> str:
    """The path of a relative URL, unquoted ("" for a URL with a scheme, a `//` network path, or
    only an #anchor or ?query)."""
    if _SCHEME.match(url) or url.startswith("//"):
        return ""
    return unquote(url.split("#", 1)[0].split("?", 1)[0])


def _normal_path(path: str, document_path: str) -> str | None:
    """`path` against the document's folder (a leading `/`: the corpus root), normalised; "." for
    the root folder, None outside the corpus root."""
    if path.startswith("/"):
        joined = path.lstrip("/")
    else:
        joined = posixpath.join(posixpath.dirname(document_path), path)
    normal = posixpath.normpath(joined)
    # outside the corpus root; a name that starts with dots (tldr-pages' `..md`) is inside it
    return None if normal == ".." or normal.startswith("../") else normal
