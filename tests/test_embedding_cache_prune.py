"""Pruning the embedding cache (`embedding.prune`, `mdindex cache prune`): an edited source left
the entry of its old bytes for ever, a chunking settings change a whole folder of old keys; a
cache built every day for a year grew by every edit (5% edits of 300 tldr pages: 15 entries, about
190 KB on disk, a run)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np
from s3fs import S3FileSystem

from embedding.cache import CacheEntry, CacheKey, EmbeddingCache
from embedding.prune import Needed, cache_entries, plan_prune, prune
from jobs.cache_cli import plan_lines
from jobs.cli import main
from tests.environment_support import without_aws_credentials

CONFIG = str(Path(__file__).resolve().parent.parent / "configs" / "local.yaml")
DAY = 86_400.0
STRATEGY, MODEL = "semantic-150-250-0000", "model-a"


def digest(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def put(cache: EmbeddingCache, strategy: str, model: str, name: str) -> CacheKey:
    """Write a two-chunk entry for the bytes `name` under `strategy`/`model`."""
    key = CacheKey(strategy, model, digest(name))
    vectors = np.arange(8, dtype=np.float32).reshape(2, 4)
    assert cache.put(CacheEntry(key, (digest("c0"), digest("c1")), vectors)) == ""
    return key


def age(cache: EmbeddingCache, key: CacheKey, seconds: float) -> None:
    """Make a local entry's files `seconds` old."""
    folder = Path(cache.entry_path(key))
    for path in folder.iterdir():
        os.utime(path, (time.time() - seconds, time.time() - seconds))


def test_a_local_prune_removes_old_unneeded_entries_and_keeps_needed_recent_and_foreign_files(
    tmp_path,
):
    cache = EmbeddingCache(str(tmp_path / "cache"))
    needed = put(cache, STRATEGY, MODEL, "v2")
    old = put(cache, STRATEGY, MODEL, "v1")  # the source's bytes before its edit
    recent = put(cache, STRATEGY, MODEL, "v3")  # a running build's, not in a manifest yet
    settings = put(cache, "semantic-100-200-1111", MODEL, "v2")  # chunking settings since changed
    edited = put(cache, STRATEGY, MODEL, "w2")  # another source, edited since the model changed
    model = put(cache, STRATEGY, "model-old", "v2")  # the model before, which lacks w2
    for key in (needed, old, settings, edited, model):
        age(cache, key, 2 * DAY)
    stray = tmp_path / "cache" / STRATEGY / "notes.txt"
    stray.write_text("not an entry")
    outside = tmp_path / "elsewhere" / "0123456789abcdef"
    outside.mkdir(parents=True)
    (outside / "metadata.json").write_text("{}")
    os.utime(outside / "metadata.json", (0, 0))
    (tmp_path / "cache" / STRATEGY / MODEL / "0123456789abcdef").symlink_to(outside)

    wanted = Needed(frozenset({digest("v2")[:16], digest("w2")[:16]}), frozenset({STRATEGY}))
    plan = plan_prune(cache_entries(cache), [wanted], DAY, time.time())
    assert sorted(e.relpath for e in plan.needed) == sorted([needed.relpath, edited.relpath])
    assert [e.relpath for e in plan.young] == [recent.relpath]
    removed = [old.relpath, settings.relpath, model.relpath]
    assert sorted(e.relpath for e in plan.remove) == sorted(removed)
    assert plan_lines(plan)[-1].startswith("3 entries to remove (0.0 MB in 9 files); 3 kept")
    # before the edit both model folders held every source: both kept, neither known stale
    before = [e for e in cache_entries(cache) if e.relpath != edited.relpath]
    assert model.relpath not in {e.relpath for e in plan_prune(before, [wanted], DAY, 0).remove}
    prune(cache, plan.remove)

    fresh = EmbeddingCache(str(tmp_path / "cache"))
    assert fresh.get(needed, 4) is not None and fresh.get(recent, 4) is not None
    assert not Path(cache.entry_path(old)).exists()
    assert not (tmp_path / "cache" / "semantic-100-200-1111").exists()  # its empty folders too
    assert not (tmp_path / "cache" / STRATEGY / "model-old").exists()
    assert stray.read_text() == "not an entry"
    assert (outside / "metadata.json").read_text() == "{}"  # a link is never followed out


def test_a_prune_on_s3_removes_what_no_output_needs_under_any_strategy_when_unknown(s3_server):
    bucket = s3_server.make_bucket("prune-cache")
    cache = EmbeddingCache(f"{bucket}/shared", s3_server.storage_options)
    first = put(cache, STRATEGY, MODEL, "a")
    second = put(cache, "questions", MODEL, "b")
    gone = put(cache, STRATEGY, MODEL, "c")
    outputs = [  # two outputs share the cache; one's strategy keys could not be read
        Needed(frozenset({digest("a")[:16]}), frozenset({STRATEGY})),
        Needed(frozenset({digest("b")[:16]}), None),
    ]
    later = time.time() + 2 * DAY  # S3 sets LastModified itself: the prune runs two days later
    plan = plan_prune(cache_entries(cache), outputs, DAY, later)
    assert [e.relpath for e in plan.remove] == [gone.relpath]
    assert plan_prune(cache_entries(cache), outputs, DAY, time.time()).remove == ()
    prune(cache, plan.remove)
    fresh = EmbeddingCache(f"{bucket}/shared", s3_server.storage_options)
    assert fresh.get(first, 4) is not None and fresh.get(second, 4) is not None
    assert s3_server.filesystem().find(f"prune-cache/shared/{gone.relpath}") == []


def test_mdindex_cache_prune_keeps_what_the_outputs_manifest_and_tables_name(tmp_path, capsys):
    """A real build's output: the entries of its sources' bytes under its strategy key stay;
    an edited source's old entry and another strategy's go once older than --min-age, a dry run
    removes nothing, and an output without a manifest (a mistyped path) removes nothing."""
    docs, out = tmp_path / "docs", tmp_path / "out"
    texts = {"t/alpha.md": "# Alpha\n\nAlpha text.\n", "t/beta.md": "# Beta\n\nBeta text.\n"}
    for path, text in texts.items():
        (docs / path).parent.mkdir(parents=True, exist_ok=True)
        (docs / path).write_text(text)
    assert main(["build", "--config", CONFIG, "--input", str(docs), "--output", str(out)]) == 0
    cache = EmbeddingCache(str(out / ".embedding-cache"))
    [built] = cache_entries(cache)[:1]
    strategy, model = built.relpath.split("/")[:2]
    old = put(cache, strategy, model, "# Alpha\n\nAlpha text before its edit.\n")
    other = put(cache, "semantic-1-2-ffff", model, texts["t/alpha.md"])
    young = put(cache, strategy, model, "written by a build still running")
    for key in (old, other):
        age(cache, key, 2 * DAY)
    capsys.readouterr()

    assert main(["cache", "prune", "--output", str(tmp_path / "typo")]) == 2
    assert "no manifest this version reads" in capsys.readouterr().err
    # NaN hours passed the check, and no entry was young: a running build's were removed
    assert main(["cache", "prune", "--output", str(out), "--min-age", "nan"]) == 2
    assert "--min-age must be 0 or more hours" in capsys.readouterr().err
    # the build recorded its output in the cache: a prune keeps its entries, named or not
    [record] = (out / ".embedding-cache" / "_outputs").iterdir()
    recorded = json.loads(record.read_text())
    assert (recorded["output"], recorded["strategies"]) == (
        str(out),
        sorted([strategy, "questions"]),
    )
    assert recorded["sources"] == sorted(
        hashlib.sha256(text.encode()).hexdigest()[:16] for text in texts.values()
    )
    assert main(["cache", "prune", "--output", str(out), "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert f"cache {out / '.embedding-cache'}, for 1 output:" in said
    assert "2 entries to remove" in said and said.endswith("dry run: nothing removed\n")
    assert len(cache_entries(cache)) == 5

    assert main(["cache", "prune", "--output", str(out)]) == 0
    assert capsys.readouterr().out.endswith("removed 2 entries\n")
    sources = {hashlib.sha256(text.encode()).hexdigest()[:16] for text in texts.values()}
    left = {e.relpath for e in cache_entries(cache)}
    assert left == {f"{strategy}/{model}/{prefix}" for prefix in sources} | {young.relpath}

    # a run that changes nothing leaves the record as it is (every source's hash was written
    # again on each run); one that rebuilds a topic writes it again
    record.write_text(json.dumps(dict(recorded, finished_at="the first build")))
    build = ["build", "--config", CONFIG, "--input", str(docs), "--output", str(out)]
    assert main(build) == 0
    assert json.loads(record.read_text())["finished_at"] == "the first build"
    (docs / "t" / "beta.md").write_text(texts["t/beta.md"] + "\nMore.\n")
    assert main(build) == 0
    assert json.loads(record.read_text())["finished_at"] != "the first build"


def s3_output(s3_server, uri: str, names: list[str], strategy: str) -> None:
    """An output on S3 as a build leaves it: a manifest naming the sources `names` (their bytes'
    hashes) in topic `t`, and its documents table under `strategy`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from indexing.paths import document_table_path
    from jobs.manifest import MANIFEST_PATH, Manifest, SourceEntry, TopicEntry

    table = document_table_path("t")
    manifest = Manifest(
        config_key="k",
        sources={f"t/{name}.md": SourceEntry("1-2", digest(name)) for name in names},
        topics={"t": TopicEntry(inputs="i", children=(), files=(table,))},
    )
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"strategy": [strategy]}), sink)
    fs = s3_server.filesystem()
    fs.pipe(f"{uri.removeprefix('s3://')}/{MANIFEST_PATH}", manifest.to_json())
    fs.pipe(f"{uri.removeprefix('s3://')}/{table}", sink.getvalue().to_pybytes())


def test_a_prune_keeps_the_entries_of_every_output_its_builds_recorded_in_the_cache(
    s3_server, capsys
):
    """Two outputs share a cache on S3: a prune naming one removed the other's entries, to be
    embedded again (on a GPU). Each build records in the cache its output and what it needs now,
    and a prune keeps every recorded output's entries, named or not, reachable or not (a CI
    runner's folder), until `--forget` names it."""
    from jobs.cache_cli import record_output
    from jobs.config import JobConfig

    bucket = s3_server.make_bucket("prune-records")
    cache_uri, first, second = (f"{bucket}/{name}" for name in ("cache", "out-a", "out-b"))
    cache = EmbeddingCache(cache_uri, s3_server.storage_options)
    strategy = JobConfig().chunking.key
    keys = {name: put(cache, strategy, MODEL, name) for name in ("a", "b", "old")}
    for output, name in ((first, "a"), (second, "b")):
        s3_output(s3_server, output, [name], strategy)
        config = JobConfig(
            input=output, output=output, cache=cache_uri, storage_options=s3_server.storage_options
        )
        record_output(config, {"finished_at": "2026-11-30T10:00:00+00:00"})
    options = ["--min-age", "0", "--storage-options", json.dumps(s3_server.storage_options)]
    options += ["--cache", cache_uri]
    capsys.readouterr()

    def left() -> set[str]:
        return {e.relpath for e in cache_entries(cache)}

    assert main(["cache", "prune", "--output", first, *options]) == 0
    said = capsys.readouterr().out
    assert f"kept for {second}: recorded in the cache by its build of 2026-11-30T10:00" in said
    assert left() == {keys["a"].relpath, keys["b"].relpath}  # the old bytes' entry alone went

    # the second output out of reach (removed, or on another machine): its record keeps its
    # entries until it is forgotten
    s3_server.filesystem().rm(f"{second.removeprefix('s3://')}", recursive=True)
    assert main(["cache", "prune", "--output", first, *options]) == 0
    assert left() == {keys["a"].relpath, keys["b"].relpath}
    assert main(["cache", "prune", "--output", first, "--forget", f"{bucket}/typo", *options]) == 2
    assert "not an output the cache records" in capsys.readouterr().err
    # the cache alone, every output forgotten or none recorded: refused, as every entry would go
    # (it said "the cache records no output that uses it" while it records both)
    assert main(["cache", "prune", "--forget", first, "--forget", second, *options]) == 2
    assert "--forget names every output the cache records" in capsys.readouterr().err
    # a mistyped cache bucket (found by use: a cron line's prune printed "removed 0 entries", 0,
    # every night): refused as the build refuses it, named or not with outputs
    for named in (["--output", first], []):
        typo = ["--cache", "s3://no-such-prune-bucket/cache"]
        assert main(["cache", "prune", *named, *options, *typo]) == 2
        assert capsys.readouterr().err == (
            "mdindex cache prune: cache s3://no-such-prune-bucket/cache: no such bucket (nothing "
            "removed)\n"
        )
    assert main(["cache", "prune", "--forget", second, *options]) == 0
    assert f"forgotten: {second}" in capsys.readouterr().out
    assert left() == {keys["a"].relpath}
    # its record went with it; the first's stays, and a prune of the cache alone keeps its entries
    assert main(["cache", "prune", *options, "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert f"cache {cache_uri}, for 1 output:\n  kept for {first}:" in said
    assert "0 entries to remove" in said


def deny_deletes(s3_server, bucket: str) -> None:
    """A bucket policy that denies `s3:DeleteObject` in `bucket`, as read-only credentials have
    it: S3 answers a DeleteObjects request 200, with an AccessDenied per key."""
    import boto3

    client = boto3.client("s3", endpoint_url=s3_server.endpoint_url, region_name="us-east-1")
    deny = {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject"}
    statement = {**deny, "Resource": f"arn:aws:s3:::{bucket}/*"}
    policy = {"Version": "2012-10-17", "Statement": [statement]}
    client.put_bucket_policy(Bucket=bucket, Policy=json.dumps(policy))


def test_a_prune_names_in_one_line_the_store_it_could_not_read_or_write(
    s3_server, monkeypatch, tmp_path, capsys
):
    """Found by a cron operator: no credentials, an endpoint down and a store's AccessDenied
    said "mdindex cache prune: NoCredentialsError: Unable to locate credentials", naming neither
    the cache nor the output; and credentials that may not delete (S3 answers DeleteObjects 200
    with an error per key, which s3fs drops) printed "removed 1 entries", exit 0, every night,
    removing nothing."""
    bucket = s3_server.make_bucket("prune-denied")
    cache_uri, out = f"{bucket}/cache", f"{bucket}/out"
    cache = EmbeddingCache(cache_uri, s3_server.storage_options)
    kept, old = put(cache, STRATEGY, MODEL, "a"), put(cache, STRATEGY, MODEL, "old")
    s3_output(s3_server, out, ["a"], STRATEGY)
    deny_deletes(s3_server, "prune-denied")
    options = ["--storage-options", json.dumps(s3_server.storage_options)]
    prune = ["cache", "prune", "--output", out, "--cache", cache_uri, "--min-age", "0"]
    capsys.readouterr()

    assert main([*prune, *options]) == 1
    assert capsys.readouterr() == (
        "",
        f"mdindex cache prune: cache {cache_uri}: PermissionError: the store removed 0 of 1 "
        f"objects, AccessDenied: Access Denied ({cache_uri}/{old.relpath}/metadata.json)\n",
    )
    assert {e.relpath for e in cache_entries(cache)} == {kept.relpath, old.relpath}

    # an endpoint that refuses connections, and no credentials: the store each request was to
    down = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:1"}}
    down["config_kwargs"] = {"retries": {"max_attempts": 1}}
    keys = {"key": "testing", "secret": "testing"}
    unreachable = ["--storage-options", json.dumps({**down, **keys})]
    assert main([*prune, *unreachable]) == 1
    error = capsys.readouterr().err
    assert error.startswith(f"mdindex cache prune: cache {cache_uri}: EndpointConnectionError: ")
    assert error.count("\n") == 1
    assert (
        main(["cache", "prune", "--output", out, *unreachable]) == 1
    )  # its report names the cache
    assert capsys.readouterr().err.startswith(
        f"mdindex cache prune: output {out}: EndpointConnectionError: Could not connect"
    )
    without_aws_credentials(monkeypatch, tmp_path)
    # as a new process (cron's) has them: no S3 filesystem made in this one while the session's
    # credentials were in the environment (fsspec keeps one per options: a test of this process
    # that made one without options, before, gave this prune its credentials)
    S3FileSystem.clear_instance_cache()
    assert main([*prune]) == 1
    assert capsys.readouterr().err == (
        f"mdindex cache prune: cache {cache_uri}: NoCredentialsError: Unable to locate "
        "credentials\n"
    )


def test_a_cache_path_that_holds_no_cache_is_refused_and_a_real_one_counts_in_words(
    s3_server, tmp_path, capsys
):
    """A mistyped --cache prefix in a bucket that exists, or a local folder that is no cache
    (the output's own, a docs folder, one not there), printed "0 kept", exit 0, every night:
    refused as a missing bucket is, while a cache that holds records and no entry is one. An
    output whose build is running was pruned for a cache it does not use. And one entry was
    "1 entries"."""
    from jobs.cache_cli import record_output
    from jobs.config import JobConfig

    bucket = s3_server.make_bucket("prune-typo")
    cache_uri, out = f"{bucket}/cache", f"{bucket}/out"
    strategy = JobConfig().chunking.key  # the build's, which its record names
    s3_output(s3_server, out, ["a"], strategy)
    config = JobConfig(
        input=out, output=out, cache=cache_uri, storage_options=s3_server.storage_options
    )
    record_output(config, {"finished_at": "2026-12-01T10:00:00+00:00"})
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text("# Guide\n")
    options = ["--storage-options", json.dumps(s3_server.storage_options)]
    capsys.readouterr()
    for typo in (f"{bucket}/cahce", out, str(tmp_path / "docs"), str(tmp_path / "none")):
        assert main(["cache", "prune", "--output", out, "--cache", typo, *options]) == 2
        assert capsys.readouterr() == (
            "",
            f"mdindex cache prune: cache {typo}: no embedding cache there (no entry "
            "{strategy}/{model}/{16 hex}/ and no output's record in _outputs/; nothing "
            "removed)\n",
        )

    # a build of the output running (or failed): its report names no cache, and the prune took
    # the output's own .embedding-cache (which a cache shared since may still hold)
    report = {"status": "unfinished", "exit_code": None, "output": out}
    s3_server.filesystem().pipe(
        f"{out.removeprefix('s3://')}/_reindex/report.json", json.dumps(report).encode()
    )
    assert main(["cache", "prune", "--output", out, *options]) == 2
    assert capsys.readouterr().err == (
        f"mdindex cache prune: output {out}: its last build is unfinished, and its report does "
        "not say which cache it uses: give --cache (nothing removed)\n"
    )

    assert main(["cache", "prune", "--cache", cache_uri, *options]) == 0  # a record, no entry
    assert "0 entries to remove (0.0 MB in 0 files); 0 kept" in capsys.readouterr().out
    cache = EmbeddingCache(cache_uri, s3_server.storage_options)
    put(cache, strategy, MODEL, "a")
    put(cache, strategy, MODEL, "old")
    assert main(["cache", "prune", "--cache", cache_uri, "--min-age", "0", *options]) == 0
    assert capsys.readouterr().out == (
        f"cache {cache_uri}, for 1 output:\n"
        f"  kept for {out}: recorded in the cache by its build of 2026-12-01T10:00:00+00:00\n"
        f"  {strategy}/{MODEL}: 2 entries, 1 needed, 0 not needed but recent, 1 to remove "
        "(0.0 MB)\n"
        "1 entry to remove (0.0 MB in 3 files); 1 kept (0.0 MB)\n"
        "removed 1 entry\n"
    )
    assert main(["cache", "prune", "--cache", cache_uri, "--min-age", "0", *options]) == 0
    assert f"  {strategy}/{MODEL}: 1 entry, 1 needed, " in capsys.readouterr().out


def test_a_prune_of_a_uri_no_store_can_be_made_for_is_one_line_of_bad_usage(capsys):
    """A scheme's typo, and options or an environment no S3 client takes: tracebacks, exit 1."""
    cases = [
        (["--cache", "S3://b/cache"], "S3://b/cache: Protocol not known: S3; did you mean s3://"),
        (["--output", "s3:/b/out"], "s3:/b/out reads as a local folder s3:; did you mean"),
        (
            ["--cache", "s3://b/cache", "--storage-options", '{"bogus": 1}'],
            "s3://b/cache: no S3 client with --storage-options and the environment: TypeError:",
        ),
    ]
    for given, said in cases:
        assert main(["cache", "prune", *given]) == 2
        error = capsys.readouterr().err
        assert error.startswith(f"mdindex cache prune: {said}") and error.count("\n") == 1, error
