"""jobs.storage on real filesystems: local disk, memory:// and S3 (moto server through s3fs)."""

from __future__ import annotations

import os

import pytest

from jobs.plan import keep_directory
from jobs.storage import Storage


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
    listed = {f.path: f for f in store.walk(keep_directory)}
    assert sorted(listed) == ["a/b/one.md", "a/two.md"]  # "_chunks" and ".cache" pruned
    assert listed["a/two.md"].size == 3 and listed["a/two.md"].version
    assert store.write_if_changed("a/two.md", b"two") is False
    assert store.write_if_changed("a/two.md", b"TWO") is True
    assert store.read_bytes("a/two.md") == b"TWO"
    store.delete(["a/two.md", "a/never-existed.md"])
    assert store.read_optional("a/two.md") is None


def test_local_storage_is_atomic_and_lists_relative_paths(tmp_path):
    store = Storage(str(tmp_path / "root"))
    _exercise(store)
    leftovers = [n for _, _, files in os.walk(tmp_path) for n in files if n.startswith(".tmp-")]
    assert leftovers == []
    assert store.uri("a/b/one.md") == str(tmp_path / "root" / "a/b/one.md")


def test_a_failed_local_write_keeps_the_old_file_and_no_temporary(tmp_path):
    store = Storage(str(tmp_path))
    store.write_bytes("a/x.json", b"old")
    with pytest.raises(TypeError):
        store.write_bytes("a/x.json", "text, not bytes")  # fails after the temporary file exists
    assert (tmp_path / "a" / "x.json").read_bytes() == b"old"
    assert os.listdir(tmp_path / "a") == ["x.json"]


def test_file_uri_storage(tmp_path):
    _exercise(Storage(f"file://{tmp_path}/root"))


def test_memory_storage():
    _exercise(Storage("memory://jobs-storage-test/root"))


def test_s3_storage_paths_come_back_without_scheme(s3_server):
    bucket = s3_server.make_bucket("jobs-storage")
    store = Storage(f"{bucket}/root", s3_server.storage_options)
    _exercise(store)
    assert store.uri("a/b/one.md") == "s3://jobs-storage/root/a/b/one.md"
    listed = list(store.walk(keep_directory))
    assert all(not f.path.startswith(("s3:", "jobs-storage")) for f in listed)


def test_walk_of_missing_root_raises(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(Storage(str(tmp_path / "absent")).walk())
