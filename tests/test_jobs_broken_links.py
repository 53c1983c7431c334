"""Links to pages the corpus does not have (`jobs.broken_links`): which links the rule judges,
against a real listing (`PathSet`) and real chunked documents, and what a report says of them.
A link to a renamed page or a typo was left without `target_document`, and no report said so."""

from __future__ import annotations

from chunking import chunk_source
from indexing import SourceInput
from jobs.broken_links import BrokenLinks, index_broken_links, page_links
from jobs.manifest import Manifest, TopicEntry
from jobs.path_set import PathSet
from jobs.report import listing_notes
from jobs.report_html import render_html

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
    assert [href for _, _, href in found.first] == [
        "./instal.md",
        "../guides/old-page/",
        "./gone",
        "./Page.mdx",
        "notes.markdown",
        "./instal.md#step",
    ]
    assert found.first[0] == ("guides/setup.md", 0, "./instal.md")
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
    assert [href for _, _, href in found.first] == [
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
    assert [href for _, _, href in broken([kept], changed).first] == [
        "./instal.md",
        "./Page.mdx",
        "notes.markdown",
        "./instal.md#step",
        "./topic-spec.md",
        "../LICENSE",
    ]
    stored = Manifest.from_json(Manifest(topics={"guides": kept}).to_json()).topics["guides"]
    assert broken([stored], changed) == broken([kept], changed)


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
    hrefs = [href for _, _, href in total.first]
    assert hrefs == ["./nowhere.md"] + [f"./missing-{i:02d}.md" for i in range(19)]
    failed = SourceInput("b.md", None, None, error=("CHUNKING_FAILED", "x"))  # kept rows: left
    assert page_links([failed]) == ()
    assert broken([]) == BrokenLinks()


def test_a_report_names_broken_links_in_a_note_and_on_its_page_and_an_older_one_as_before():
    """The summary's note and `mdindex report` name the first three, the page all 20 it holds;
    a report from before they were counted, or of none, has neither."""
    report = {"broken_links": broken([entry(chunked("guides/setup.md", SETUP))]).to_dict()}
    note = (
        "6 links name pages the corpus does not have: "
        "guides/setup.md → ./instal.md, guides/setup.md → ../guides/old-page/, "
        "guides/setup.md → ./gone, …"
    )
    assert listing_notes(report) == [f"  note:    {note}"]
    one = {"broken_links": {"count": 1, "first": [{"source": "a.md", "href": "b.md"}]}}
    assert listing_notes(one) == [
        "  note:    1 link names a page the corpus does not have: a.md → b.md"
    ]
    assert listing_notes({}) == []
    assert listing_notes({"broken_links": BrokenLinks().to_dict()}) == []
    page = render_html(_report(report))
    assert "broken links</span> 6 links name pages the corpus does not have" in page
    assert "guides/setup.md → ./instal.md#step</p>" in page
    assert "broken links</span>" not in render_html(_report({}))


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
