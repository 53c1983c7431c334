"""Documentation not in English: CJK punctuation, Devanagari's danda, text in Unicode's NFD (as
macOS writes file names) and links to pages named in it (found chunking FastAPI's translations)."""

from __future__ import annotations

import unicodedata

import pytest

from chunking import chunk_document, chunk_source
from chunking.links import target_paths
from chunking.tokens import get_counter


def _is_mark(character: str) -> bool:
    return unicodedata.category(character).startswith("M") or "\u1160" <= character <= "\u11ff"


def test_a_list_introduced_by_a_full_width_colon_stays_with_it_in_structural():
    """`structural` kept a list with the prose introducing it only after an ASCII colon: after
    Chinese's `：` the prose was a chunk of its own ("...查询参数为：", FastAPI's zh docs; 2,197
    chunks of zh's structural were 2,026 with the list kept)."""
    for colon in (":", "："):
        text = (
            "# 查询参数\n\n声明的参数不是路径参数时，会被解释为查询参数。\n\n"
            f"...查询参数为{colon}\n\n* `skip`{colon}值为 `0`\n* `limit`{colon}值为 `10`\n\n"
            "这些值都是 URL 的组成部分。\n"
        )
        chunks = chunk_document(text, strategy="structural")
        (intro,) = [chunk for chunk in chunks if f"查询参数为{colon}" in chunk.text]
        assert "* `limit`" in intro.text, colon


@pytest.mark.parametrize("strategy", ["structural", "hierarchical"])
def test_a_sentence_cut_from_the_next_keeps_its_closing_quote_or_bracket(strategy):
    """A sentence ended at its `.`, `。`: the closing quote or bracket after it was left between
    two pieces (in neither: a piece ended `...test.` where the source has `...test."`), or
    began the next one (`」這個「路徑前綴」...`, FastAPI's zh-hant docs). A curly quote ended no
    English sentence: `the “end.” Next` was one sentence, and prose quoted so was cut between
    words."""
    english = " ".join(f'Sentence {i} says "this is quoted text {i}." Then' for i in range(80))
    curly = " ".join(f"Sentence {i} says “this is quoted text {i}.” Then" for i in range(80))
    chinese = "".join(f"他说「这是第{i}个被引用的句子，内容比较长一些。」然后" for i in range(80))
    for prose, closer in ((english, '."'), (curly, ".”"), (chinese, "。」")):
        chunks = chunk_document(f"# T\n\n## Big\n\n{prose}\n", strategy=strategy)
        assert len(chunks) > 2
        for chunk in chunks:
            body = chunk.text.split("\n")[-1]
            assert not body.startswith(('"', "”", "」")), body[:20]
            assert body.endswith(closer) or body.endswith(prose[-10:]), body[-20:]


def test_hindi_sentences_end_at_the_danda():
    """Devanagari's full stop `।` ended no sentence: a long Hindi paragraph was cut between words
    and each overlap began mid-sentence (69 of FastAPI's hi files chunked so by
    `hierarchical`); it is cut after a `।` and the overlap is the last whole sentences."""
    sentences = [f"यह वाक्य संख्या {i} है और इसमें कुछ शब्द हैं जो अर्थ रखते हैं।" for i in range(60)]
    text = "# शीर्षक\n\n## भाग\n\n" + " ".join(sentences) + "\n"
    chunks = chunk_document(text, strategy="hierarchical")
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.text.endswith("।")
    for chunk in chunks[1:]:
        assert any(chunk.text.startswith(sentence) for sentence in sentences), chunk.text[:30]


def test_a_cjk_overlap_does_not_start_with_punctuation():
    """A last sentence ending with a long code span and `。`: the overlap the next chunk starts
    with was that `。` alone (a chunk of FastAPI's ja oauth2-jwt.md read `。` and an admonition's
    closing line; here each chunk began `。`): punctuation that ends what is before it starts no
    word."""
    code = "`$argon2id$v=19$m=65536,t=3,p=4$" + "CYaIb8sB+wtD+Vu/P4uod1+Qof8h+1g7bb" * 8 + "`"
    paragraph = "新しいデータベースを確認すると、ハッシュ化されたパスワードは次のとおりです："
    text = "# 見出し\n\n" + "\n\n".join(f"{paragraph}{i}{code}。" for i in range(12)) + "\n"
    chunks = chunk_document(text, strategy="structural")
    assert len(chunks) > 2
    for chunk in chunks:
        assert chunk.text.lstrip()[0] not in "、。，」：", chunk.text[:20]


@pytest.mark.parametrize(
    ("strategy", "options"),
    [("semantic", {}), ("structural", {"tokenizer": "heuristic"}), ("hierarchical", {})],
)
@pytest.mark.parametrize(
    "prose",
    [
        "한국어문서를맥에서만들었습니다그리고강한글자를확인합니다" * 60,
        "これはがぎぐげごぱぴぷぺぽのテストです。ガギグゲゴとパピプペポも含みます、" * 60,
        "葛\U000e0100飾区の辻\U000e0101さん" * 200,
    ],
    ids=["hangul", "kana", "variation-selectors"],
)
def test_nfd_text_is_never_cut_between_a_character_and_its_mark(strategy, options, prose):
    """A Korean or Japanese page written in NFD was cut between a syllable's jamo (a chunk
    starting with a vowel jamo) or between a kana and its voiced mark, and Japanese with
    ideographic variation selectors before a selector: the heuristic counted each as a word."""
    text = "# 見出し\n\n## 本文\n\n" + unicodedata.normalize("NFD", prose) + "\n"
    chunks = chunk_document(text, strategy=strategy, **options)
    assert len(chunks) > 1
    starts = [line[0] for chunk in chunks for line in chunk.text.split("\n") if line]
    assert not [start for start in starts if _is_mark(start)]


def test_the_heuristic_counts_a_page_in_nfd_as_in_nfc():
    """Each jamo or mark of an NFD page was a word: Korean counted three times its NFC size."""
    counter = get_counter("heuristic")
    for text in ("한국어 문서를 맥에서 만들었습니다.", "データベースへの接続を説明します。"):
        nfd = unicodedata.normalize("NFD", text)
        assert nfd != text
        assert counter.count(nfd) == counter.count(text)
    assert counter.count("葛\U000e0100飾") == counter.count("葛飾")


def test_a_link_resolves_to_a_page_named_in_the_other_unicode_normal_form():
    """A page named on macOS has an NFD name, a link to it typed elsewhere an NFC one: it had no
    target_document and the build reported it as a broken link. The name as written comes
    first; the other forms are among the paths whose coming or going relinks the page."""
    nfc, nfd = "ja/ガイド.md", unicodedata.normalize("NFD", "ja/ガイド.md")
    text = "# リンク\n\n[ガイド](ガイド.md) と [NFD](" + nfd[3:] + ")\n"
    for corpus, expected in (({nfd}, nfd), ({nfc}, nfc)):
        (chunk,) = chunk_document(text, document_path="ja/links.md", corpus_paths=corpus)
        assert [link.target_document for link in chunk.links] == [expected, expected]
    both = frozenset({nfc, nfd})
    document = chunk_source(text, document_path="ja/links.md", corpus_paths=both)
    links = document.chunks[0].links
    assert [link.target_document for link in links] == [nfc, nfd]  # each its own, exactly
    assert set(target_paths(links[0], "ja/links.md")) == {nfc, nfd}
