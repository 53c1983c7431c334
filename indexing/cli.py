"""`mdindex query` and `mdindex serve`: the consumer side of a built index."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import json
import os
import signal
import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import parse_qs, quote

import numpy as np

from indexing.client import (
    EmbedQuery,
    IndexReader,
    NotInIndex,
    UnsuitedOptions,
    chunk_tables,
    current_matches,
    is_text,
    named_index_json,
    query_embedder,
    question_matches,
    ranked_chunks,
    select_chunks,
    unusable_root,
)
from indexing.paths import INDEX, href_path, in_topic, is_below, text_digest, topic_id
from indexing.server import SEARCH_PATH, Search, SearchError, checked_port, make_server
from indexing.simhash import simhash64
from indexing.terminal import counted, names_no_place, printable, write_out


def _whole_number(text: str) -> int:
    """An integer argument; argparse's own message for one that is none named this module's
    function ("invalid _positive_int value: 'abc'")."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None


def _positive_int(text: str) -> int:
    value = _whole_number(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _port(text: str) -> int:
    """A TCP port (0 picks a free one): one outside 0-65535 is bad usage (exit 2), not a port
    the system wraps it to (99999 served on 34463)."""
    value = _whole_number(text)
    try:
        return checked_port(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def _utf8(text: str) -> str:
    """An argument an index is asked about, which can only be UTF-8 text (an index is JSON): one
    holding bytes that are not UTF-8 (Python's surrogate escapes of them) is bad usage (exit 2);
    a `--topic` of them over http failed naming nothing, a `--question` in the embedding ("embed:
    item 0 is not valid Unicode"), both exit 1."""
    if not is_text(text):
        raise argparse.ArgumentTypeError("is not UTF-8 text")
    return text


def _topic(text: str) -> str:
    """A `--topic` as the index names it (`topic_id`), UTF-8 text (`_utf8`)."""
    return topic_id(_utf8(text))


def _question(text: str) -> str:
    """A `--question` with words to look up: an empty or blank one is bad usage (exit 2), and so
    is one that is not UTF-8 text (`_utf8`)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return _utf8(text)


def json_object(text: str) -> dict[str, Any]:
    """A JSON object given on the command line (`--storage-options`); anything else (not JSON,
    a list, a string) is bad usage (exit 2), saying why: JSON that does not parse was "invalid
    json_object value", naming a function of the code and not the mistake (`{'anon': true}`)."""
    try:
        value = json.loads(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}: {error}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"must be a JSON object, got {text!r}")
    return value


def register(subparsers) -> None:
    """Add the `query` and `serve` sub-commands."""
    query = subparsers.add_parser(
        "query",
        help="read chunks of a built index in stripe order, or look a question up",
        description="Read a built index from a local path, an fsspec URI or an http(s) URL.",
    )
    query.add_argument("root", help="output root of the index (path, s3://..., http://...)")
    query.add_argument(
        "words",
        nargs="*",
        type=_utf8,
        metavar="QUESTION",
        help="a question to look up, quoted or not (the same as --question)",
    )
    query.add_argument(
        "--topic", type=_topic, help='topic id, e.g. "libraries/stj" ("" for the root)'
    )
    query.add_argument(
        "--n",
        type=_positive_int,
        default=5,
        help="chunks per source, or a --question's matches (default 5)",
    )
    query.add_argument(
        "--per-page",
        type=_positive_int,
        metavar="K",
        help="at most K of a --question's matches from one page (source); default: no limit",
    )
    query.add_argument(
        "--under",
        type=_topic,
        metavar="FOLDER",
        help="a --question's matches from the topics at and below FOLDER "
        '(a version of a docs site: "versioned_docs/version-2.0")',
    )
    query.add_argument(
        "--all-copies",
        action="store_true",
        help="every chunk of a --question's text, each version's copy (default: the first)",
    )
    query.add_argument("--source", type=_utf8, help="only this source (file stem)")
    query.add_argument("--technical", action="store_true", help="use the technical stripe order")
    query.add_argument("--show", action="store_true", help="include the chunk text")
    query.add_argument("--json", action="store_true", help="print machine-readable JSON")
    query.add_argument(
        "--question", type=_question, help="find chunks for a question (SimHash, then embeddings)"
    )
    query.add_argument(
        "--storage-options", type=json_object, default=None, help="fsspec options as a JSON object"
    )
    query.set_defaults(run=run_query)

    serve = subparsers.add_parser(
        "serve",
        help="serve a built index over HTTP with CORS and range requests",
        description="Static HTTP server for a local index directory (CORS, HTTP Range).",
    )
    serve.add_argument("directory", help="local output root to serve")
    serve.add_argument("--port", type=_port, default=8000, help="port (default 8000; 0 picks one)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument(
        "--search",
        action="store_true",
        help=f"also answer questions at {SEARCH_PATH}?q=... (the model loads at the first)",
    )
    serve.set_defaults(run=run_serve)


def _text(reader: IndexReader, relpath: str) -> str:
    """A chunk's text; FileNotFoundError naming it when the index lists it but it is missing,
    ValueError naming it when it is not UTF-8."""
    data = reader.read(relpath)
    if data is None:
        raise FileNotFoundError(f"chunk file {reader.location(relpath)} is missing")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"chunk file {reader.location(relpath)} is not UTF-8: {error}") from error


def topic_result(
    reader: IndexReader, args: argparse.Namespace, index: dict[str, Any]
) -> dict[str, Any]:
    """The JSON-ready answer to `query --topic`: per source, the first N chunks in stripe order
    (`index`: the topic's, as `IndexReader.spelled_topic` gave it with `args.topic`)."""
    sources = []
    for selection in select_chunks(index, args.n, args.source, args.technical):
        chunks = []
        for item in selection.items:
            relpath = in_topic(args.topic, href_path(item["href"]))
            record = {**item, "href": reader.href(relpath)}
            if args.show:
                record["text"] = _text(reader, relpath)
            chunks.append(record)
        sources.append({"source": selection.source, "order": selection.order, "chunks": chunks})
    return {"topic": args.topic, "title": index["title"], "sources": sources}


def question_result(
    reader: IndexReader,
    args: argparse.Namespace,
    href: Callable[[str], str] | None = None,
    embed: EmbedQuery | None = None,
) -> dict[str, Any]:
    """The JSON-ready answer to `query --question`: SimHash matches that the topics' index.json
    still hold, then, while they are fewer than `args.n`, the embedding search's nearest chunks
    not among them (`args.topic`, where given, a topic as `IndexReader.spelled_topic` found it;
    `args.under`, where given, a folder whose topics, its own and those below it, are searched),
    at most `args.per_page` (None: any number) of one page (a topic's source), the rest of that
    page's chunks passed over for the next page's. A chunk whose text is byte for byte that of
    one reached before (its file name's digest: a versioned site's `version-1.0/` and
    `version-2.0/` copies of a page) is passed over too, unless `args.all_copies`: the copy kept
    is the first reached (SimHash matches first, then by score, then by topic id: `docs/` before
    `versioned_docs/version-1.0/`), and where `args.per_page` passed that one over, its copies
    go with it; a copy passed over counts toward no page.
    A SimHash match names the chunk its question attached to at build time, mostly one: the
    embedding search, which ranked it first or not far from it, names the others the asker
    wants (`--n`); one that near-matched another question's words names the wrong page, and
    the search the right one after it. `method`: "simhash", "embedding", both joined by "+",
    or "none" (no SimHash match and no chunk table). `href`: a chunk's URL from its
    output-root-relative path (default `reader.href`); `embed`: the question's embedder
    (default: `query_embedder`'s, made for this question)."""
    matches: list[dict[str, Any]] = []
    methods = []
    pages: Counter[tuple[str, str]] = Counter()
    texts: set[str] = set()

    def room(topic: str, source: str, path: str) -> bool:
        """Whether a match of this page and chunk file is a text not reached before (or
        `args.all_copies`) within `args.per_page` (and then counts it)."""
        digest = None if args.all_copies else text_digest(path)
        if digest in texts:
            return False
        if digest is not None:
            texts.add(digest)
        if pages[topic, source] == args.per_page:
            return False
        pages[topic, source] += 1
        return True

    under = "" if args.under is None else args.under
    asked = question_matches(reader, args.question, args.topic)
    found = current_matches(reader, [m for m in asked if is_below(m.topic, under)])
    for m, item in found:
        if len(matches) == args.n:
            break
        path = in_topic(m.topic, href_path(item["href"]))
        if room(m.topic, m.source, path):
            matches.append(
                {
                    "topic": m.topic,
                    "source": m.source,
                    "index": m.index,
                    "distance": m.distance,
                    "prompt_hash": m.hash,
                    "title": item["title"],
                    "path": path,
                }
            )
    if matches:
        methods.append("simhash")
    if len(matches) < args.n:
        listed = {(match["topic"], match["source"], match["index"]) for match in matches}
        topics = [args.topic] if args.topic is not None else reader.topics()
        topics = [topic for topic in topics if is_below(topic, under)]
        table = chunk_tables(reader, topics)
        hits = ()
        if table is not None:
            hits = ranked_chunks(table, args.question, embed or query_embedder(reader))
        searched = len(matches)
        for hit in hits:
            if len(matches) == args.n:
                break
            chunk = (hit.topic, hit.source, hit.index)
            if chunk not in listed and room(hit.topic, hit.source, hit.path):
                matches.append(
                    {
                        "topic": hit.topic,
                        "source": hit.source,
                        "index": hit.index,
                        "title": hit.title,
                        "score": hit.score,
                        "path": hit.path,
                    }
                )
        if len(matches) > searched:
            methods.append("embedding")
    for match in matches:
        relpath = match.pop("path")
        match["href"] = (href or reader.href)(relpath)
        if args.show:
            match["text"] = _text(reader, relpath)
    return {
        "question": args.question,
        "simhash": simhash64(args.question),
        "method": "+".join(methods) or "none",
        "matches": matches,
    }


def _result_text(result: dict[str, Any]) -> str:
    """`result` for a person. Names, titles and hrefs come from the index (a remote one
    included), so each line of them is `printable`: a title or file name holding an escape
    sequence or a line break cannot act on the terminal or pass for a line of its own; a
    chunk's text (`--show`) is printed as it is, as `cat` would."""
    lines = []
    if "sources" in result:
        lines.append(printable(f"{result['title']} ({result['topic'] or '/'})"))
        for source in result["sources"]:
            count = counted(len(source["chunks"]), "chunk")
            lines.append(printable(f"{source['source']}: {source['order']} stripe order, {count}"))
            for item in source["chunks"]:
                lines.append(printable(f"  [{item['index']}] {item['title']}"))
                lines.append(printable(f"      {item['href']}"))
                if "text" in item:
                    lines.append("      " + item["text"].replace("\n", "\n      "))
        return "".join(line + "\n" for line in lines)
    matches = counted(len(result["matches"]), "match", "matches")
    lines.append(f"simhash {result['simhash']}: {result['method']}, {matches}")
    for match in result["matches"]:
        how = f"distance {match['distance']}" if "distance" in match else f"score {match['score']}"
        where = f"{match['topic'] or '/'} {match['source']} [{match['index']}] {match['title']}"
        lines.append(printable(f"  {where} ({how})"))
        lines.append(printable(f"      {match['href']}"))
        if "text" in match:
            lines.append("      " + match["text"].replace("\n", "\n      "))
    return "".join(line + "\n" for line in lines)


def _message(error: Exception, root: str) -> str:
    """What `mdindex query` prints for an error that ends it: its text, naming the file or URL
    (the root put before an error that names none, `names_no_place`), on one line (a file's name
    may hold a line break: it is written as `\\n`)."""
    if names_no_place(error):
        text = f"{root}: {type(error).__name__}" + (f": {error}" if str(error) else "")
    else:
        text = str(error) or type(error).__name__
    return text.replace("\r", "\\r").replace("\n", "\\n")


def run_query(args: argparse.Namespace) -> int:
    """`mdindex query`: 0 on success, 1 when the index lacks what was asked or is damaged or
    unreachable (one line naming the file or URL), 2 on bad usage (a root of no protocol fsspec
    knows included, as for `mdindex report`, and storage options its client refuses)."""
    if args.words:  # `mdindex query ROOT how do I ...`, as a newcomer first types it
        if args.question is not None:
            print(
                "mdindex query: give the question once, after ROOT or as --question",
                file=sys.stderr,
            )
            return 2
        try:
            question = _question(" ".join(args.words))
        except argparse.ArgumentTypeError as error:
            print(f"mdindex query: argument QUESTION: {error}", file=sys.stderr)
            return 2
        args = argparse.Namespace(**{**vars(args), "question": question})
    if args.topic is None and args.question is None:
        print("mdindex query: give a question, --topic or both", file=sys.stderr)
        return 2
    if args.question and (args.source or args.technical):  # they were left out, unsaid
        message = "--source and --technical pick a topic's chunks, not a question's"
        print(f"mdindex query: {message}", file=sys.stderr)
        return 2
    if args.per_page is not None and not args.question:  # --n is per source there already
        print("mdindex query: --per-page counts a question's matches", file=sys.stderr)
        return 2
    if args.all_copies and not args.question:
        print("mdindex query: --all-copies keeps a question's matches", file=sys.stderr)
        return 2
    if args.under is not None and (not args.question or args.topic is not None):
        print("mdindex query: --under picks a question's topics, without --topic", file=sys.stderr)
        return 2
    import aiohttp
    from botocore.exceptions import BotoCoreError  # an S3 endpoint unreachable, no credentials

    # bad usage, before any read (exit 1 once asked)
    if problem := unusable_root(args.root, args.storage_options) or named_index_json(args.root):
        print(f"mdindex query: {problem}", file=sys.stderr)
        return 2
    try:
        reader = IndexReader.open(args.root, args.storage_options)
        index = None
        if args.topic is not None:  # typed in NFC, its folder named on macOS in NFD
            topic, index = reader.spelled_topic(args.topic)
            args = argparse.Namespace(**{**vars(args), "topic": topic})
        if args.under is not None:  # a folder the index lacks: "no index.json for topic …"
            under, _ = reader.spelled(args.under)  # typed in NFC, named on macOS in NFD
            args = argparse.Namespace(**{**vars(args), "under": under})
        if args.question:
            result = question_result(reader, args)
        else:
            result = topic_result(reader, args, index)
    except UnsuitedOptions as error:  # bad usage, as options that are no JSON object are
        print(f"mdindex query: {_message(error, args.root)}", file=sys.stderr)
        return 2
    except (OSError, NotInIndex, ValueError, aiohttp.ClientError, BotoCoreError) as error:
        print(f"mdindex query: {_message(error, args.root)}", file=sys.stderr)
        return 1
    if args.json:
        text = json.dumps(result, ensure_ascii=False, indent=2) + "\n"
    else:
        text = _result_text(result)
    return 0 if write_out(text, "mdindex query") else 1


MAX_SEARCH_N = 100


def _search_parameter(params: dict[str, list[str]], name: str) -> str | None:
    """The one value of a search parameter, or None; SearchError (400) for one given twice."""
    values = params.get(name, [])
    if len(values) > 1:
        raise SearchError(400, f"{name}: given {len(values)} times")
    return values[0] if values else None


def _search_flag(params: dict[str, list[str]], name: str) -> bool:
    """A yes/no search parameter, `1` or `0` (absent: no); SearchError (400) otherwise."""
    text = _search_parameter(params, name)
    if text not in (None, "0", "1"):
        raise SearchError(400, f"{name}: must be 0 or 1, got {text!r}")
    return text == "1"


def _search_count(params: dict[str, list[str]], name: str, default: int | None) -> int | None:
    """A whole-number search parameter from 1 to `MAX_SEARCH_N`; SearchError (400) otherwise."""
    text = _search_parameter(params, name)
    if text is None:
        return default
    try:
        value = _positive_int(text)
    except argparse.ArgumentTypeError as error:
        raise SearchError(400, f"{name}: {error}") from None
    if value > MAX_SEARCH_N:
        raise SearchError(400, f"{name}: must be at most {MAX_SEARCH_N}, got {value}")
    return value


def question_search(directory: str) -> Search:
    """`mdindex serve --search`'s answer to a query string (`q`, `n`: default 5, `per_page`,
    `all_copies`: 0 or 1, `topic` or `under`): `query --question --json`'s answer for the index in
    `directory`, hrefs its server's root-relative URLs. SearchError: 400 naming a parameter
    that is missing, blank, given twice, not UTF-8 or out of range; 404 for a topic the index
    lacks; 500 naming a damaged index or a model that fails (a file by its URL on the server,
    not its path). The model is loaded at the first question that needs it, again only once a
    rebuild records another (`query_embedder`), and embeds one question at a time (the server
    answers in threads). What the index's files hold is kept between questions, each file
    parsed again once it changed (`IndexReader.read_parsed`): a rebuild's switch is seen at the
    next question."""
    reader = IndexReader.open(directory, keep=True)
    lock = threading.Lock()
    embed_question = query_embedder(reader)

    def embed(model: str, question: str) -> np.ndarray:
        with lock:
            return embed_question(model, question)

    def served(error: Exception) -> str:
        """`_message`, a file named by its URL on this server, not its path on this machine."""
        root = reader.location("")
        return _message(error, root).replace(root + "/", "/").replace(root, "/")

    def answer(query: str) -> dict[str, Any]:
        try:
            params = parse_qs(query, keep_blank_values=True, errors="strict")
        except UnicodeDecodeError:
            raise SearchError(400, "the query string is not UTF-8 text") from None
        question = _search_parameter(params, "q")
        if question is None or not question.strip():
            raise SearchError(400, "q: give a question (q=...)")
        n = _search_count(params, "n", 5)
        per_page = _search_count(params, "per_page", None)
        all_copies = _search_flag(params, "all_copies")
        topic = _search_parameter(params, "topic")
        under = _search_parameter(params, "under")
        if topic is not None and under is not None:
            raise SearchError(400, "under: picks a question's topics, without topic")
        try:
            if topic is not None:
                topic, _ = reader.spelled_topic(topic)
            if under is not None:
                under, _ = reader.spelled(under)
            args = argparse.Namespace(
                question=question,
                topic=topic,
                n=n,
                per_page=per_page,
                under=under,
                all_copies=all_copies,
                show=False,
            )
            return question_result(reader, args, lambda relpath: "/" + quote(relpath), embed)
        except (FileNotFoundError, NotInIndex) as error:
            raise SearchError(404, served(error)) from None
        except (OSError, ValueError) as error:
            raise SearchError(500, served(error)) from None

    return answer


def banner(directory: str, host: str, port: int, search: bool = False) -> str:
    """What `mdindex serve` prints once it listens on `host` (an address) and `port`: the URL to
    open, and for every address (`0.0.0.0`, `::`) the loopback one, as a browser opens no
    0.0.0.0, and a word that the folder is open to anyone who reaches the machine; then the URL
    of the root's index.json where it has one (the folder's own URL is 404, as every folder's),
    and with `search` the URL that answers questions."""
    every = ipaddress.ip_address(host.split("%")[0]).is_unspecified
    shown = ("::1" if ":" in host else "127.0.0.1") if every else host
    url = f"http://{f'[{shown}]' if ':' in shown else shown}:{port}/"
    index = f"its index: {url}{INDEX}; " if os.path.isfile(os.path.join(directory, INDEX)) else ""
    if search:
        index += f"questions: {url}{SEARCH_PATH.lstrip('/')}?q=...; "
    if every:
        who = f"on every address of this machine: anyone who can reach it can read {directory}"
        return f"serving {directory} at {url} and {who} ({index}Ctrl-C stops)"
    return f"serving {directory} at {url} ({index}Ctrl-C stops)"


class ServeStopped(BaseException):
    """SIGTERM while `mdindex serve` serves: its ordinary stop (`systemctl stop`, `kill`). Not an
    Exception, as KeyboardInterrupt is not: socketserver takes an Exception raised as it starts
    a connection's thread for that request's error, and served on."""


def _raise_serve_stopped(signum: int, frame) -> None:
    raise ServeStopped


@contextlib.contextmanager
def _sigterm_stops_serving() -> Iterator[None]:
    """Within the block SIGTERM raises `ServeStopped`; the caller's handler is put back after. In
    the main thread only (elsewhere Python takes no handler, and the block changes nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = signal.signal(signal.SIGTERM, _raise_serve_stopped)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)


def served_folder(directory: str) -> str:
    """The local folder that `mdindex serve DIRECTORY` serves, `DIRECTORY` taken as `query` and
    `build` take a place: a path, `~/site` (quoted, as a systemd unit's ExecStart leaves it) or a
    file:// URI, which were "not a directory"; NotADirectoryError naming a remote root (s3://,
    http://), which it cannot serve (it said "not a directory" too)."""
    from embedding.files import LOCAL_PROTOCOLS, protocol_of, strip_protocol

    if protocol_of(directory) not in LOCAL_PROTOCOLS:
        raise NotADirectoryError(
            f"{directory} is no local folder: serve serves one (copy the index to one first); "
            f"mdindex query {directory} reads it where it is"
        )
    return os.path.expanduser(strip_protocol(directory))


def run_serve(args: argparse.Namespace) -> int:
    """`mdindex serve`: serve until stopped; 2 when the directory does not exist or its address
    cannot be listened on (one line naming it). A stop by SIGTERM (systemd's) or Ctrl-C is the
    server's ordinary end: exit 0, after one line saying which. SIGTERM exited 143 without a word,
    which systemd counts a failure ("status=143", the unit failed) unless told otherwise."""
    try:
        directory = served_folder(args.directory)
        search = question_search(directory) if args.search else None
        server = make_server(directory, args.host, args.port, search=search)
    except NotADirectoryError as error:
        print(f"mdindex serve: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # the address: in use, not this machine's, a host name unknown
        print(
            f"mdindex serve: cannot listen on {args.host} port {args.port}: {error}",
            file=sys.stderr,
        )
        return 2
    host, port = server.server_address[:2]
    try:
        with _sigterm_stops_serving():
            print(banner(directory, host, port, args.search), flush=True)
            server.serve_forever()
    except KeyboardInterrupt:
        stopped_by = "Ctrl-C"
    except ServeStopped:
        stopped_by = "SIGTERM"
    finally:
        server.server_close()
    print(f"mdindex serve: stopped ({stopped_by})", file=sys.stderr, flush=True)
    return 0
