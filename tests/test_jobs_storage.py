"""jobs.storage on real filesystems: local disk, memory:// and S3 (moto server through s3fs)."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from jobs_support import s3_options

from jobs.plan import keep_directory
from jobs.reindex import main
from jobs.storage import FileInfo, OutsideRoot, SkippedLink, Storage, SymlinkRefused


def _exercise(store: Storage) -> None:
    store.write_bytes("a/b/one.md", b"one")
    store.write_bytes("a/two.md", b"two")
    store.write_bytes("a/_chunks/two-0.md", b"chunk")
    store.write_bytes(".cache/x.bin", b"x")
    assert store.read_bytes("a/b/one.md") == b"one"
    assert store.read_optional("missing.md") is None
    assert store.list_files("a") == ["a/two.md"]
    assert store.list_files("no/such/dir") == []
    found = store.read_many(["a/two.md", "a/missing.md"])
    assert found["a/two.md"] == b"two"
    assert isinstance(found["a/missing.md"], Exception)
    asked = ["a/two.md", "a/_chunks/two-0.md", "a/missing.md", "no/such/dir/x.md"]
    assert store.existing(asked) == {"a/two.md", "a/_chunks/two-0.md"}
    listed = {f.path: f for f in store.walk(keep_directory)}
    assert sorted(listed) == ["a/b/one.md", "a/two.md"]  # "_chunks" and ".cache" pruned
    assert listed["a/two.md"].size == 3 and listed["a/two.md"].version
    assert store.write_if_changed("a/two.md", b"two") is False
    assert store.write_if_changed("a/two.md", b"TWO") is True
    assert store.read_bytes("a/two.md") == b"TWO"
    store.delete(["a/two.md", "a/never-existed.md"])
    assert store.read_optional("a/two.md") is None


def test_local_storage_leaves_no_temporary_and_lists_relative_paths(tmp_path):
    """(That a write is atomic: `test_a_failed_local_write_keeps_the_old_file_and_no_temporary`.)"""
    store = Storage(str(tmp_path / "root"))
    _exercise(store)
    leftovers = [n for _, _, files in os.walk(tmp_path) for n in files if n.startswith(".tmp-")]
    assert leftovers == []
    store.write_bytes("top.md", b"top")
    os.symlink(tmp_path / "root" / "top.md", tmp_path / "root" / "a" / "link.md")
    os.symlink(tmp_path / "nowhere.md", tmp_path / "root" / "a" / "dangling.md")
    assert store.list_files("") == ["top.md"]
    assert store.list_files("a/") == store.list_files("a") == ["a/link.md"]
    assert store.list_files("top.md") == []
    assert store.uri("a/b/one.md") == str(tmp_path / "root" / "a/b/one.md")


def test_a_failed_local_write_keeps_the_old_file_and_no_temporary(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("a/x.json", b"old")
    with pytest.raises(TypeError):
        store.write_bytes("a/x.json", "text, not bytes")  # fails after the temporary file exists
    assert (tmp_path / "a" / "x.json").read_bytes() == b"old"
    assert os.listdir(tmp_path / "a") == ["x.json"]


def test_local_writes_take_the_umask_and_keep_an_existing_files_mode(tmp_path):
    store = Storage(str(tmp_path))
    mask = os.umask(0o027)
    try:
        store.write_bytes("a/new.json", b"{}")
        store.write_many({f"a/many-{i}.md": b"x" for i in range(3)}, in_place=True)
    finally:
        os.umask(mask)
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "new.json").st_mode) == 0o640
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "many-0.md").st_mode) == 0o640
    os.chmod(tmp_path / "a" / "new.json", 0o604)
    store.write_bytes("a/new.json", b"[]")
    assert stat.S_IMODE(os.stat(tmp_path / "a" / "new.json").st_mode) == 0o604


def test_file_uri_storage(tmp_path):
    _exercise(Storage(f"file://{tmp_path}/root"))
    # `file://localhost/p` (RFC 8089) is `/p`, not the folder `localhost/p` under this one.
    assert Storage(f"file://localhost{tmp_path}/root").full_path("a") == f"{tmp_path}/root/a"


def test_memory_storage():
    _exercise(Storage("memory://jobs-storage-test/root"))


def test_s3_storage_paths_come_back_without_scheme(s3_server):
    bucket = s3_server.make_bucket("jobs-storage")
    store = Storage(f"{bucket}/root", s3_server.storage_options)
    _exercise(store)
    assert store.uri("a/b/one.md") == "s3://jobs-storage/root/a/b/one.md"
    listed = list(store.walk(keep_directory))
    assert all(not f.path.startswith(("s3:", "jobs-storage")) for f in listed)


def test_s3_listings_show_what_another_client_changed_since_the_last_one(s3_server):
    """fsspec keeps one filesystem per process and options: a second build in the same process
    (a program calling the job twice, a Ray worker kept between builds) lists the store again,
    and sees the objects another client wrote, rewrote and deleted since."""
    bucket = s3_server.make_bucket("jobs-storage-listings")
    store = Storage(f"{bucket}/root", s3_server.storage_options)
    store.write_many({"t/a.md": b"a", "t/b.md": b"b"})
    before = {f.path: f.fingerprint for f in store.walk()}
    assert sorted(before) == store.list_files("t") == ["t/a.md", "t/b.md"]
    other = s3_server.filesystem()
    other.pipe("jobs-storage-listings/root/t/a.md", b"edited")
    other.pipe("jobs-storage-listings/root/t/c.md", b"c")
    other.rm("jobs-storage-listings/root/t/b.md")
    other.pipe("jobs-storage-listings/new/t/d.md", b"d")
    again = Storage(f"{bucket}/root", s3_server.storage_options)
    assert again.filesystem() is store.filesystem()  # the same instance, as in one process
    after = {f.path: f.fingerprint for f in again.walk()}
    assert again.list_files("t") == sorted(after) == ["t/a.md", "t/c.md"]
    assert after["t/a.md"] != before["t/a.md"]
    assert [f.path for f in Storage(f"{bucket}/new", s3_server.storage_options).walk()] == [
        "t/d.md"
    ]


def test_walk_of_missing_root_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(Storage(str(tmp_path / "absent")).walk())


@pytest.mark.parametrize("s3_behind", ["refuses listings"], indirect=True)
def test_an_s3_folder_whose_listing_fails_fails_the_walk(s3_behind, request):
    """fsspec's walk leaves out a folder below the top whose listing fails (a 403 from an IAM
    policy limiting s3:prefix, a 503 past the retries), so its sources read as deleted and the
    build deleted their topics, exit 0. The walk fails now, naming nothing it did not list."""
    server, layer = s3_behind
    bucket = server.make_bucket(f"listings-{abs(hash(request.node.nodeid)) % 10**8}")
    fs = server.filesystem()
    fs.pipe({f"{bucket}/docs/t/a.md": b"a", f"{bucket}/docs/locked/b.md": b"b"})
    store = Storage(f"{bucket}/docs", server.storage_options)
    assert sorted(f.path for f in store.walk()) == ["locked/b.md", "t/a.md"]
    layer.refused = [f"{bucket.split('/')[-1]}/docs/locked/", "docs/locked/"]
    with pytest.raises(PermissionError):
        list(store.walk())


def test_s3_folder_markers_are_no_files(s3_server):
    """The S3 console's "Create folder" leaves an empty object `name/`: it was listed as a file
    named like the folder (`guide.md`: a source that always failed READ_FAILED). An object
    `name/` that holds bytes is no marker: listed as `name/` (it was dropped unsaid), for the plan
    to report."""
    bucket = s3_server.make_bucket("jobs-storage-markers")
    fs = s3_server.filesystem()
    fs.pipe({f"{bucket}/docs/guide.md/": b"", f"{bucket}/docs/guide.md/intro.md": b"intro"})
    fs.pipe({f"{bucket}/docs/t/": b"", f"{bucket}/docs/t/a.md": b"a"})
    fs.pipe({f"{bucket}/docs/t/notes.md/": b"notes", f"{bucket}/docs/a//n.md/": b"n"})
    listed = [f.path for f in Storage(f"{bucket}/docs", s3_server.storage_options).walk()]
    assert sorted(listed) == ["a//n.md/", "guide.md/intro.md", "t/a.md", "t/notes.md/"]


def test_s3_keys_with_an_empty_folder_name_are_listed_as_they_are(s3_server):
    """A key with `//` (`docs/a//b.md`; `docs//lead.md`, or `/top.md` at a bucket's root: a
    key starting with `/` below the root) lies under a prefix that s3fs lists as the folder
    itself: the walk skipped it, and the build neither read nor reported such a source. It is
    listed under its own name now, for the plan to report (INVALID_FILE_NAME); pruned folders
    and folder markers below it stay out."""
    bucket = s3_server.make_bucket("jobs-storage-slashes")
    fs = s3_server.filesystem()
    keys = ["t/a.md", "a//b.md", "/lead.md", "t//x/y.md", "z///q.md", "a//_chunks/c.md", "a//m/"]
    fs.pipe({f"{bucket}/docs/{key}": b"x" for key in keys} | {f"{bucket}//top.md": b"top"})
    fs.pipe(f"{bucket}/docs/a//m/", b"")  # a folder marker
    options = s3_server.storage_options
    listed = [f.path for f in Storage(f"{bucket}/docs", options).walk(keep_directory)]
    assert sorted(listed) == ["/lead.md", "a//b.md", "t//x/y.md", "t/a.md", "z///q.md"]
    at_root = {f.path: f for f in Storage(bucket, options).walk(keep_directory)}
    assert sorted(at_root) == ["/top.md", *(f"docs/{path}" for path in sorted(listed))]
    assert at_root["/top.md"].size == 3 and at_root["/top.md"].version


LOCKED_WALK = """
import json, os, sys
from jobs.storage import Storage
os.setegid(65534)
os.seteuid(65534)
try:
    print(json.dumps(sorted(f.path for f in Storage(sys.argv[1]).walk())))
except PermissionError as exc:
    print(json.dumps(str(exc)))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
def test_a_local_folder_that_cannot_be_listed_fails_the_walk():
    """A folder of the input the build cannot read (mode 0700, another owner) was taken as empty:
    its sources read as deleted, and the build deleted their topics, exit 0."""
    docs = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own folders are private to root
    try:
        for path in ("t/a.md", "locked/b.md"):
            (docs / path).parent.mkdir(parents=True, exist_ok=True)
            (docs / path).write_text("text")
        for folder in (docs, docs / "t"):
            folder.chmod(0o755)
        (docs / "locked").chmod(0o700)
        done = subprocess.run(
            [sys.executable, "-c", LOCKED_WALK, str(docs)],
            capture_output=True, text=True, check=True, cwd=Path(__file__).resolve().parents[1],
        )  # fmt: skip
    finally:
        shutil.rmtree(docs)
    expected = f"[Errno 13] cannot list the input folder: Permission denied: '{docs}/locked'"
    assert json.loads(done.stdout) == expected


def test_a_link_to_a_fifo_is_skipped_and_a_fifo_never_read(tmp_path):
    """With `follow_symlinks`, a link to a FIFO (or a device) was listed as a source whose read
    waited for a writer for ever (a device's, /dev/zero's, filled the memory); a FIFO where a
    file is read (a topic's topic-spec.md) hung its reduce the same way."""
    root = tmp_path / "root"
    (root / "t").mkdir(parents=True)
    (root / "t" / "a.md").write_text("a")
    os.mkfifo(root / "t" / "pipe")
    (root / "t" / "pipe.md").symlink_to(root / "t" / "pipe")
    (root / "t" / "zero.md").symlink_to("/dev/zero")
    os.mkfifo(root / "t" / "topic-spec.md")
    store = Storage(str(root), follow_symlinks=True)
    listed = list(store.walk())
    assert [f.path for f in listed if isinstance(f, FileInfo)] == ["t/a.md"]
    skipped = sorted(f.path for f in listed if isinstance(f, SkippedLink))
    assert skipped == ["t/pipe.md", "t/zero.md"]
    with pytest.raises(OSError, match="not a regular file"):
        store.read_optional("t/topic-spec.md")


def _outside_and_root(tmp_path):
    """A root whose `t/_chunks` is a symbolic link to an outside folder holding `precious-1.md`."""
    outside, root = tmp_path / "outside", tmp_path / "root"
    outside.mkdir()
    (outside / "precious-1.md").write_text("precious")
    (root / "t").mkdir(parents=True)
    (root / "t" / "_chunks").symlink_to(outside, target_is_directory=True)
    return outside, root


def test_local_writes_and_deletes_never_leave_the_root_through_a_link(tmp_path):
    outside, root = _outside_and_root(tmp_path)
    store = Storage(str(root))
    with pytest.raises(OutsideRoot, match=r"refusing to write .*t/_chunks/a-0\.md"):
        store.write_bytes("t/_chunks/a-0.md", b"chunk")
    with pytest.raises(OutsideRoot, match="outside the root"):
        store.delete(["t/_chunks/precious-1.md"])
    with pytest.raises(OutsideRoot):
        store.write_bytes("../escape.md", b"x")  # a path naming "..", not only links
    assert sorted(os.listdir(outside)) == ["precious-1.md"]
    assert (outside / "precious-1.md").read_text() == "precious"


def test_a_delete_or_write_reaching_outside_through_one_folder_touches_no_file(tmp_path):
    outside, root = _outside_and_root(tmp_path)
    (root / "t" / "keep.md").write_text("kept")
    store = Storage(str(root))
    with pytest.raises(OutsideRoot, match=r"refusing to delete .*t/_chunks/precious-1\.md"):
        store.delete(["t/keep.md", "t/_chunks/precious-1.md"])
    with pytest.raises(OutsideRoot, match=r"refusing to write .*t/_chunks/b-0\.md"):
        store.write_many({"t/new.md": b"n", "t/_chunks/b-0.md": b"b", "t/_chunks/c-0.md": b"c"})
    assert (root / "t" / "keep.md").read_text() == "kept"
    assert not (root / "t" / "new.md").exists()
    assert sorted(os.listdir(outside)) == ["precious-1.md"]


def test_only_an_empty_folder_inside_the_root_is_removed(tmp_path):
    """`remove_empty_folder`: an empty folder goes; one with a file in it, a symbolic link to an
    empty folder, a missing folder and a file stay as they are; a folder reached through a link
    that leads out of the root is refused."""
    outside, root = _outside_and_root(tmp_path)
    (outside / "empty").mkdir()
    for folder in ("gone/_chunks", "kept/_chunks"):
        (root / folder).mkdir(parents=True)
    (root / "kept" / "_chunks" / "notes.txt").write_text("mine")
    (root / "linked").symlink_to(outside / "empty", target_is_directory=True)
    store = Storage(str(root))
    for folder in ("gone/_chunks", "kept/_chunks", "linked", "missing/_chunks", "t/_chunks"):
        store.remove_empty_folder(folder)
    assert not (root / "gone" / "_chunks").exists() and (root / "gone").is_dir()
    assert (root / "kept" / "_chunks" / "notes.txt").read_text() == "mine"
    assert (root / "linked").is_symlink() and (outside / "empty").is_dir()
    assert (root / "t" / "_chunks").is_symlink()
    with pytest.raises(OutsideRoot, match=r"refusing to delete .*t/_chunks/empty"):
        store.remove_empty_folder("t/_chunks/empty")
    assert (outside / "empty").is_dir()
    Storage("memory://no-folders").remove_empty_folder("a/_chunks")  # no folders: nothing to do


def test_a_link_inside_the_root_is_replaced_by_a_write_never_written_through(tmp_path):
    outside, root = _outside_and_root(tmp_path)
    (root / "t" / "index.json").symlink_to(outside / "precious-1.md")
    inner = root / "real"
    inner.mkdir()
    (root / "alias").symlink_to(inner, target_is_directory=True)  # a folder link inside the root
    store = Storage(str(root))
    store.write_bytes("t/index.json", b"{}")
    store.write_bytes("alias/x.md", b"x")
    assert not (root / "t" / "index.json").is_symlink()
    assert (outside / "precious-1.md").read_text() == "precious"
    assert (inner / "x.md").read_bytes() == b"x"


def test_a_link_replaced_by_a_write_gives_its_file_the_umask_not_its_targets_mode(tmp_path):
    """The replacing file took the mode of the link's target (`stat` follows links: a setuid
    program's 4751 on an `index.json`), and a link to itself failed the write (ELOOP). Both give
    a plain file with the mode a new one gets; a file's setuid bit is not kept either."""
    outside, root = _outside_and_root(tmp_path)
    program = outside / "program"
    program.write_text("#!/bin/sh\n")
    program.chmod(0o4751)
    (root / "t" / "index.json").symlink_to(program)
    (root / "t" / "loop.json").symlink_to("loop.json")
    (root / "t" / "setuid.json").write_text("{}")
    (root / "t" / "setuid.json").chmod(0o4755)
    store = Storage(str(root))
    mask = os.umask(0o022)
    try:
        store.write_many(
            {f"t/{name}": b"{}" for name in ("index.json", "loop.json", "setuid.json")}
        )
    finally:
        os.umask(mask)
    for name, mode in {"index.json": 0o644, "loop.json": 0o644, "setuid.json": 0o755}.items():
        found = os.lstat(root / "t" / name)
        assert stat.S_ISREG(found.st_mode) and stat.S_IMODE(found.st_mode) == mode, name
    assert stat.S_IMODE(program.stat().st_mode) == 0o4751
    assert program.read_text() == "#!/bin/sh\n"


def test_reads_refuse_symbolic_links_unless_following(tmp_path):
    outside, root = _outside_and_root(tmp_path)
    (root / "t" / "x.md").symlink_to(outside / "precious-1.md")
    (root / "t" / "y.md").write_text("y")
    strict = Storage(str(root))  # not following: the default
    with pytest.raises(SymlinkRefused, match="not followed"):
        strict.read_bytes("t/x.md")
    assert strict.read_optional("t/missing.md") is None
    found = strict.read_many(["t/x.md", "t/y.md", "t/missing.md"])
    assert isinstance(found["t/x.md"], SymlinkRefused) and found["t/y.md"] == b"y"
    assert isinstance(found["t/missing.md"], FileNotFoundError)
    assert Storage(str(root), follow_symlinks=True).read_bytes("t/x.md") == b"precious"


def _linked_corpus(tmp_path):
    """A corpus with a file link, a folder link, a link to itself, a folder loop and a dead link."""
    root, secret = tmp_path / "docs", tmp_path / "secret.md"
    secret.write_text("secret")
    (root / "t").mkdir(parents=True)
    (root / "t" / "a.md").write_text("a")
    (root / "shared").mkdir()
    (root / "shared" / "s.md").write_text("s")
    (root / "t" / "x.md").symlink_to(secret)
    (root / "t" / "more").symlink_to(root / "shared", target_is_directory=True)
    (root / "t" / "self.md").symlink_to(root / "t" / "self.md")
    (root / "t" / "up").symlink_to(root, target_is_directory=True)
    (root / "t" / "dead.md").symlink_to(tmp_path / "nowhere.md")
    (root / "t" / "_chunks").symlink_to(tmp_path, target_is_directory=True)  # pruned
    return root


@pytest.mark.timeout(60)
def test_walk_skips_symbolic_links_by_default(tmp_path):
    listing = list(
        Storage(str(_linked_corpus(tmp_path)), follow_symlinks=False).walk(keep_directory)
    )
    files = sorted(f.path for f in listing if isinstance(f, FileInfo))
    skipped = {f.path: f.directory for f in listing if isinstance(f, SkippedLink)}
    assert files == ["shared/s.md", "t/a.md"]
    assert skipped == {
        "t/x.md": False,
        "t/more": True,
        "t/self.md": False,
        "t/up": True,
        "t/dead.md": False,
    }


@pytest.mark.timeout(60)
def test_walk_follows_symbolic_links_when_asked_but_never_around_a_loop(tmp_path):
    root = _linked_corpus(tmp_path)
    listing = list(Storage(str(root), follow_symlinks=True).walk(keep_directory))
    files = {f.path: f for f in listing if isinstance(f, FileInfo)}
    skipped = {f.path: f.reason for f in listing if isinstance(f, SkippedLink)}
    assert sorted(files) == ["shared/s.md", "t/a.md", "t/more/s.md", "t/x.md"]
    assert files["t/x.md"].size == len("secret")
    assert sorted(skipped) == ["t/dead.md", "t/self.md", "t/up"]
    assert "loop" in skipped["t/up"] and "cannot be followed" in skipped["t/self.md"]


def test_local_existing_reads_each_folder_once_and_asks_only_about_what_it_lacks(
    tmp_path, monkeypatch
):
    """A warm build checks every chunk file its kept topics' last build wrote: one directory read
    per folder, not a stat per file (a round trip each on a network filesystem). A dangling link
    counts as there, as `exists` says; a name the listing lacks is asked about on its own."""
    store = Storage(str(tmp_path))
    store.write_many({f"t/_chunks/c-{n}.md": b"x" for n in range(200)} | {"t/index.json": b"{}"})
    os.symlink(tmp_path / "nowhere", tmp_path / "t" / "dangling.md")
    asked = [f"t/_chunks/c-{n}.md" for n in range(200)] + ["t/index.json", "t/dangling.md"]
    gone = ["t/_chunks/c-999.md", "u/_chunks/c-0.md", "t/index.json/below.md"]
    checks = []
    lexists = os.path.lexists
    monkeypatch.setattr(os.path, "lexists", lambda path: checks.append(path) or lexists(path))
    assert store.existing(asked + gone) == set(asked)
    assert checks == [str(tmp_path / "t/_chunks/c-999.md")]  # folders that are none: not asked


@pytest.mark.parametrize("s3_behind", ["refuses listings"], indirect=True)
def test_an_s3_input_whose_listing_is_refused_is_named(s3_behind, tmp_path, capsys):
    """Credentials the store refuses for the input (revoked keys, a policy without its prefix)
    failed the build with "PermissionError: denied", naming no input: the output's and the
    cache's errors name theirs. The input is named now, in a dry run too (exit 1 both)."""
    server, layer = s3_behind
    bucket = server.make_bucket("refused-input")
    server.filesystem().pipe({f"{bucket[5:]}/docs/t/a.md": b"# a\n\ntext\n"})
    layer.refused = ["docs/"]
    command = ["--config", "configs/local.yaml", "--input", f"{bucket}/docs"]
    command += ["--output", str(tmp_path / "out")]
    command += ["--set", f"storage_options={s3_options(server.endpoint_url)}"]
    for extra in ([], ["--dry-run"]):
        assert main([*command, *extra]) == 1
        last = capsys.readouterr().err.splitlines()[-1]
        assert f"the input {bucket}/docs cannot be listed (AccessDenied: denied)" in last


def test_an_http_input_is_walked_into_its_folders_with_sizes_and_change_tags(tmp_path):
    """An http(s) corpus (a web server's folder listings) lost every folder below its top (a
    link `sub/` was taken for an S3 folder marker), and each page was listed as 0 bytes with no
    change tag: an edited page counted as unchanged, never read again. A page's name is its
    link's, decoded (`my%20doc.md` was the source `my%20doc`, its chunk files' links encoded
    twice). Python's http.server lists folders as a page of links, as a static site's does."""
    (tmp_path / "docs" / "sub").mkdir(parents=True)
    (tmp_path / "docs" / "a.md").write_text("# A\n")
    (tmp_path / "docs" / "sub" / "b.md").write_text("# B, longer\n")
    (tmp_path / "docs" / "sub" / "my doc é.md").write_text("# Mine\n")
    os.utime(tmp_path / "docs" / "a.md", (1_700_000_000, 1_700_000_000))
    with _served(tmp_path, SimpleHTTPRequestHandler) as site:
        store = Storage(f"{site}/docs")
        listed = {f.path: f for f in store.walk(keep_directory)}
        named = store.list_files("sub")
        read = store.read_many(["sub/my doc é.md"])
    assert sorted(listed) == ["a.md", "sub/b.md", "sub/my doc é.md"]
    assert named == ["sub/b.md", "sub/my doc é.md"] and read == {"sub/my doc é.md": b"# Mine\n"}
    assert (listed["a.md"].size, listed["sub/b.md"].size) == (4, 12)
    assert listed["a.md"].version == "Tue, 14 Nov 2023 22:13:20 GMT"


class _Untagged(SimpleHTTPRequestHandler):
    """Python's file server sending no Last-Modified (and, as it always does, no ETag)."""

    def send_header(self, keyword: str, value: str) -> None:
        if keyword != "Last-Modified":
            super().send_header(keyword, value)


def test_an_http_page_with_no_change_tag_is_told_changed_by_its_content(tmp_path, caplog):
    """A server that sends neither ETag nor Last-Modified: a page was listed by its size alone,
    so an edit that kept its size (a typo fixed) was never noticed, the page never read again.
    Such a page is read on every walk, its content's SHA-256 its change tag; a warning says so."""
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "a.md"
    page.write_text("# A typo\n")
    with _served(tmp_path, _Untagged) as site:
        [before] = Storage(f"{site}/docs").walk()
        page.write_text("# A type\n")
        [after] = Storage(f"{site}/docs").walk()
    assert before.size == after.size == 9 and before.fingerprint != after.fingerprint
    assert after.version == f"sha256:{hashlib.sha256(page.read_bytes()).hexdigest()}"
    assert (
        f"1 page of {site}/docs came with neither ETag nor Last-Modified from their server (a.md)"
    ) in caplog.text


@contextlib.contextmanager
def _served(folder: Path, handler: type[SimpleHTTPRequestHandler]) -> Iterator[str]:
    """`folder` served over http on a free port of this machine, as `http://127.0.0.1:port`."""
    serve = functools.partial(handler, directory=str(folder))
    with ThreadingHTTPServer(("127.0.0.1", 0), serve) as httpd:
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{httpd.server_address[1]}"
        finally:
            httpd.shutdown()
