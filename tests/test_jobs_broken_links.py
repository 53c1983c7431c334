"""Links to pages the corpus does not have (`jobs.broken_links`): which links the rule judges,
against a real listing (`PathSet`) and real chunked documents, and what a report says of them.
A link to a renamed page or a typo was left without `target_document`, and no report said so."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from chunking import chunk_source
from indexing import SourceInput
from jobs.broken_links import (
    BrokenLink,
    BrokenLinks,
    index_broken_links,
    link_lines,
    page_links,
)
from jobs.config import ConfigError, load_config
from jobs.manifest import Manifest, TopicEntry
from jobs.path_set import PathSet
from jobs.report import broken_lines, build_report, listing_notes
from jobs.report_html import render_html
from jobs.stats import RunStats
from jobs.storage import Storage

CONFIG = str(Path(__file__).resolve().parents[1] / "configs" / "local.yaml")

SOURCES = ["a.md", "api/index.md", "guides/intro.md", "guides/setup.md", "reference/cli.md"]
OTHERS = ["guides/topic-spec.md", "guides/diagram.png", "LICENSE", "vendored/linked.md"]
SETUP = """# Setup

Broken: [install](./instal.md), [old](../guides/old-page/), [gone](./gone), [mdx](./Page.mdx),
[long](notes.markdown), [again](./instal.md#step) and [twice](./instal.md).

Fine: [intro](./intro.md), [cli](../reference/cli), [api](/api/), [spec](./topic-spec.md),
[licence](../LICENSE), [linked](../vendored/linked.md), [top](#setup), [query](?tab=2).

Not judged: [web](https://example.org/x.md), [mail](mailto:a@example.org), [pdf](./guide.pdf),
![missing picture](./missing.png), [other repo](../../other-repo/x.md),
[hidden](../.github/CONTRIBUTING.md), [generated](../_build/x.md), [draft](./drafts/x.md),
[folder](../reference/), [route](/docs/intro), [version](./v1.2).
"""


def chunked(path: str, text: str) -> SourceInput:
    document = chunk_source(text, document_path=path, corpus_paths=PathSet.of(SOURCES))
    return SourceInput(path, document, None)


DRAFTS = ("*/drafts",)


def entry(*sources: SourceInput) -> TopicEntry:
    """A topic's manifest entry as its reduce records its links (`page_links`)."""
    return TopicEntry("i", (), (), page_links=page_links(sources))


def broken(
    topics: list[TopicEntry], paths: list[str] | None = None, exclude: tuple[str, ...] = DRAFTS
) -> BrokenLinks:
    """The index's broken links against the listing of `paths` (the sources and OTHERS)."""
    return index_broken_links(topics, SOURCES + OTHERS if paths is None else paths, exclude)


def test_a_link_to_a_page_no_listed_file_is_is_broken_and_no_other_link():
    """Relative links to markdown pages (or extensionless, as the candidate rule tries them) none
    of whose candidates is listed; each href of a page once, in the order written. A link to a
    listed non-source file (topic-spec.md, a licence, a file no glob matches), out of the corpus
    root, under a folder the listing skips or excludes, to a listed folder, or a site route is
    not judged."""
    found = broken([entry(chunked("guides/setup.md", SETUP))])
    assert [link.href for link in found.first] == [
        "./instal.md",
        "../guides/old-page/",
        "./gone",
        "./Page.mdx",
        "notes.markdown",
        "./instal.md#step",
    ]
    assert found.first[0] == BrokenLink("guides/setup.md", 0, "./instal.md")
    # without the exclude pattern, the draft page is one the listing would have shown
    assert broken([entry(chunked("guides/setup.md", SETUP))], exclude=()).count == 7


def test_a_hugo_ref_is_broken_where_hugo_finds_no_page_from_the_pages_folder_or_the_root():
    """Hugo's `{{< ref >}}` links were no links, never judged. A ref names a path from the
    page's folder, then from the root (Hugo tries both), so `reference/cli.md` from a guide is
    fine; `/guides/gone` is a content path, not a site's route."""
    hugo = (
        '# Hugo\n\n[a]({{< ref "intro.md" >}}) [b]({{< ref "reference/cli.md" >}})\n'
        '[c]({{< ref "/reference" >}}) [d]({{< relref "instal.md#x" >}})\n'
        '[e]({{% ref "/guides/gone" %}}) [f]({{< ref "reference/clii" >}})\n'
    )
    found = broken([entry(chunked("guides/setup.md", hugo))])
    assert [link.href for link in found.first] == [
        '{{< relref "instal.md#x" >}}',
        '{{% ref "/guides/gone" %}}',
        '{{< ref "reference/clii" >}}',
    ]


def test_a_kept_topics_links_are_judged_against_each_runs_listing():
    """A topic records its links to pages no source is, and every run judges them: a listed
    file one names that goes (a licence, topic-spec.md), or a folder an extensionless one names
    that gains files, made a kept topic's report false until its next rebuild."""
    kept = entry(chunked("guides/setup.md", SETUP))
    assert len(kept.page_links) == 13  # the 6 broken, 3 to listed files, 4 not judged
    assert broken([kept]).count == 6
    gone = [p for p in SOURCES + OTHERS if p not in ("LICENSE", "guides/topic-spec.md")]
    changed = [*gone, "guides/old-page/diagram.png", "guides/gone/notes.txt"]
    assert [link.href for link in broken([kept], changed).first] == [
        "./instal.md",
        "./Page.mdx",
        "notes.markdown",
        "./instal.md#step",
        "./topic-spec.md",
        "../LICENSE",
    ]
    stored = Manifest.from_json(Manifest(topics={"guides": kept}).to_json()).topics["guides"]
    assert broken([stored], changed) == broken([kept], changed)


NEXT_STEPS = (
    "## Guide\n\n"
    + "Install the tool and run it on a folder of pages. " * 40
    + "[cli](../reference/cli.md)\n\n"
    "## Next steps\n\nRead [setup](./setup.md), the [typo](./instal.md) and [web](https://example.org/).\n"
)


def test_the_links_of_a_final_section_semantic_skips_are_judged_and_a_drafts_are_not():
    """`semantic` skips a short final section (seed 003), often a "Next steps" list of links,
    which no chunk holds: they were never judged, and a page it linked to renamed went
    unreported under `checks.broken_links: fail`. Its links to pages are recorded, those to a
    source too (the plan follows none of them), and judged against each run's listing; a
    source carried from the last run keeps those the last run recorded that its chunks do not
    hold; a draft's (an unpublished page) are not judged."""
    path = "guides/intro.md"
    document = chunk_source(NEXT_STEPS, document_path=path, corpus_paths=PathSet.of(SOURCES))
    assert document.skipped_tail_tokens and len(document.chunks) == 1
    recorded = entry(SourceInput(path, document, None))
    assert recorded.page_links == ((path, "./setup.md"), (path, "./instal.md"))
    assert [link.href for link in broken([recorded]).first] == ["./instal.md"]
    renamed = [p for p in SOURCES + OTHERS if p != "guides/setup.md"]
    assert [link.href for link in broken([recorded], renamed).first] == [
        "./setup.md",
        "./instal.md",
    ]
    # carried: the document the tables give back has no skipped section; a recorded href its
    # chunks hold (one they resolve to a source now) is theirs to give
    carried = SourceInput(path, replace(document, skipped_links=()), None)
    assert page_links([carried]) == ()
    hrefs = ["../reference/cli.md", "./setup.md", "./instal.md"]
    assert page_links([carried], {path: hrefs}) == recorded.page_links
    draft = chunk_source("---\ndraft: true\n---\n" + NEXT_STEPS, document_path=path)
    assert entry(SourceInput(path, draft, None)).page_links == ()


def test_broken_links_are_counted_in_all_and_the_first_20_kept_by_source_then_position():
    """The index's are its topics' (`TopicEntry.page_links`) in any order of the topics; the
    first 20 are by source path, then where in it, so a report names the same ones."""
    many = "# Many\n\n" + "\n\n".join(f"See [p{i}](./missing-{i:02d}.md)." for i in range(25))
    late = entry(chunked("z/many.md", many))
    early = entry(chunked("a.md", "# A\n\n[x](./nowhere.md)\n"))
    assert (len(late.page_links), len(early.page_links)) == (25, 1)
    topics = [late, entry(), early]
    total = broken(topics)
    assert total == broken(topics[::-1]) and total.count == 26
    hrefs = [link.href for link in total.first]
    assert hrefs == ["./nowhere.md"] + [f"./missing-{i:02d}.md" for i in range(19)]
    failed = SourceInput("b.md", None, None, error=("CHUNKING_FAILED", "x"))  # kept rows: left
    assert page_links([failed]) == ()
    assert broken([]) == BrokenLinks()


def test_a_report_names_broken_links_in_a_note_and_on_its_page_and_an_older_one_as_before():
    """The summary's note and `mdindex report` name the first three, the page all 20 it holds,
    and say which setting fails the run on them; a report from before they were counted, or of
    none, has neither; one from before their lines, its sources alone."""
    report = {"broken_links": broken([entry(chunked("guides/setup.md", SETUP))]).to_dict()}
    note = (
        "6 links name pages the corpus does not have: "
        "guides/setup.md → ./instal.md, guides/setup.md → ../guides/old-page/, "
        "guides/setup.md → ./gone, … (checks.broken_links: fail fails the run on them)"
    )
    assert listing_notes(report) == [f"  note:    {note}"]
    one = {"broken_links": {"count": 1, "first": [{"source": "a.md", "href": "b.md"}]}}
    assert listing_notes(one) == [
        "  note:    1 link names a page the corpus does not have: a.md → b.md "
        "(checks.broken_links: fail fails the run on them)"
    ]
    assert listing_notes({}) == [] and broken_lines({}) == []
    assert listing_notes({"broken_links": BrokenLinks().to_dict()}) == []
    page = render_html(_report(report))
    assert "broken links</span> 6 links name pages the corpus does not have" in page
    assert "guides/setup.md → ./instal.md#step (checks.broken_links" in page
    assert "broken links</span>" not in render_html(_report({}))


def test_broken_links_are_named_with_the_line_each_is_on_in_its_source(tmp_path):
    """A writer fixes `guides/setup.md:6`: the report names the line of each of its first broken
    links, the file's own (front matter counted), looked up in the input at the run's end: a
    link written twice, the first; a reference link, where it is used. A source gone by then
    (or not text) leaves its links' lines unknown, and fails nothing."""
    text = f"---\ntitle: Setup\n---\n{SETUP}\nSee [ref][r].\n\n[r]: ./refd.md\n"
    (tmp_path / "guides").mkdir()
    (tmp_path / "guides" / "setup.md").write_text(text)
    gone = entry(chunked("a.md", "# A\n\n[x](./nowhere.md)\n"))
    topics = [entry(chunked("guides/setup.md", text)), gone]
    found = index_broken_links(topics, SOURCES + OTHERS, DRAFTS, source=Storage(str(tmp_path)))
    assert [(link.source, link.line, link.href) for link in found.first] == [
        ("a.md", None, "./nowhere.md"),
        ("guides/setup.md", 6, "./instal.md"),
        ("guides/setup.md", 6, "../guides/old-page/"),
        ("guides/setup.md", 6, "./gone"),
        ("guides/setup.md", 6, "./Page.mdx"),
        ("guides/setup.md", 7, "notes.markdown"),
        ("guides/setup.md", 7, "./instal.md#step"),
        ("guides/setup.md", 17, "./refd.md"),
    ]
    assert found.to_dict()["first"][1] == {
        "source": "guides/setup.md",
        "href": "./instal.md",
        "line": 6,
    }
    assert found == broken(topics)  # the lines are no part of what is broken
    assert link_lines(b"\xff\xfe\x00broken") == {}


def test_checks_broken_links_fail_makes_the_run_fail_and_names_each_on_a_line_of_its_own():
    """`checks.broken_links: fail` (a docs check in CI): a run with broken links is
    `sources_failed`, exit 3, as one with a failed source; its summary names each of the first
    20 on a `BROKEN path:line: href` line, in the report's order, and how many more, where a
    note named three on one line. Without any, or under `note` (the default), the run is ok.
    Another value is refused, naming the key."""
    links = [(f"guides/p{i:02d}.md", "./gone.md") for i in range(22)]
    failing = BrokenLinks.of(links, check="fail")
    assert failing.fails and not BrokenLinks.of(links).fails
    assert not BrokenLinks(check="fail").fails
    for links_found, outcome in (
        (failing, ("sources_failed", 3)),
        (BrokenLinks.of(links), ("ok", 0)),
        (BrokenLinks(check="fail"), ("ok", 0)),
    ):
        report = build_report(
            RunStats(),
            failures=[],
            sources={},
            topics={"seen": 0},
            began=0.0,
            wall={"total": 1.0, "finish": 0.0},
            finish_cpu=0.0,
            cpus=1.0,
            facts={},
            pool=None,
            broken_links=links_found,
        )
        assert (report["status"], report["exit_code"]) == outcome
    report = {"broken_links": replace(failing, first=failing.first[:2]).to_dict()}
    report["broken_links"]["first"][0]["line"] = 12
    assert listing_notes(report) == []
    assert broken_lines(report) == [
        "  links:   22 links name pages the corpus does not have (checks.broken_links: fail)",
        "  BROKEN  guides/p00.md:12: ./gone.md",
        "  BROKEN  guides/p01.md: ./gone.md",
        "  ...      20 more broken links: fix these and build again",
    ]
    assert '<span class="status bad">broken links</span>' in render_html(_report(report))
    with pytest.raises(ConfigError, match="checks.broken_links: 'warn' is not one of: note, fail"):
        load_config(CONFIG, overrides={"input": "."}, settings=["checks.broken_links=warn"])


def _report(extra: dict) -> dict:
    """A report with sources counted, which the page renders (a run of no source)."""
    counts = dict.fromkeys(("seen", "changed", "unchanged", "deleted", "failed", "chunked"), 0)
    return {
        "status": "ok",
        "exit_code": 0,
        "output": "out",
        "sources": counts | {"carried": 0},
        **extra,
    }
