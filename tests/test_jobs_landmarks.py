"""Local folders on a cluster of several machines (`jobs.landmarks`): what the driver's folders
hold, and a worker's check of its own. The check in a build whose driver sees another folder
than its workers is in `test_jobs_submit`."""

from __future__ import annotations

import sys

import pyarrow as pa
import pytest

from jobs.landmarks import (
    BACKEND,
    STRATEGY,
    NotTheDriversFolder,
    Plugin,
    PluginNotOnNode,
    check_landmarks,
    landmarks,
)
from jobs.lock import LOCK_PATH, output_lock
from jobs.reduce import _reduce_topic
from jobs.stages.chunk import read_and_chunk
from jobs.stages.topic import TopicContext
from jobs.storage import Storage


def test_a_local_output_is_marked_by_its_lock_and_a_separate_input_by_its_folder(tmp_path):
    docs, out = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    with output_lock(Storage(str(out))):
        marks = landmarks(Storage(str(docs)), Storage(str(out)))
        assert [(m.folder, m.relpath) for m in marks] == [(str(out), LOCK_PATH), (str(docs), "")]
        check_landmarks(marks)  # the driver's own machine
        assert landmarks(Storage(str(out)), Storage(str(out))) == marks[:1]  # in place: one
        assert landmarks(Storage("memory://in"), Storage("memory://out")) == ()


def test_another_builds_lock_file_is_not_this_builds_output(tmp_path):
    """A worker whose folder at the output's path holds another build's lock file (its own
    machine's disk, where a build once ran) stops before it reads or writes anything."""
    out = tmp_path / "out"
    out.mkdir()
    with output_lock(Storage(str(out))):
        driver = landmarks(Storage("memory://in"), Storage(str(out)))
    with output_lock(Storage(str(out))):  # another build's record in the same file
        with pytest.raises(NotTheDriversFolder) as refused:
            check_landmarks(driver)
    message = str(refused.value)
    assert message.startswith(f"{out} is not the driver's folder on the machine of this Ray worker")
    assert f"its {LOCK_PATH} does not name this build" in message
    assert "a filesystem that every node mounts at the same path" in message
    with pytest.raises(NotTheDriversFolder, match="does not name this build"):
        check_landmarks(driver)  # no lock file at all: emptied at the end


def test_an_input_folder_missing_on_a_workers_machine_stops_the_build(tmp_path):
    docs, out = tmp_path / "docs", tmp_path / "out"
    docs.mkdir()
    with output_lock(Storage(str(out))):
        marks = landmarks(Storage(str(docs)), Storage(str(out)))
        docs.rmdir()
        with pytest.raises(
            NotTheDriversFolder, match=f"^{docs} is not the driver's folder.*it is not there"
        ):
            check_landmarks(marks)


def test_chunk_tasks_and_reduces_check_the_landmarks_before_anything_else(tmp_path):
    """Nodes that join the cluster after the build's start are checked by their first task, for
    the driver's folders and its third-party classes alike."""
    out = tmp_path / "out"
    with output_lock(Storage(str(out))):
        elsewhere = landmarks(Storage("memory://in"), Storage(str(out)))
    batch = pa.table({"path": ["t/a.md"]})  # never read: the check comes first
    with pytest.raises(NotTheDriversFolder):
        read_and_chunk(batch, source=None, output=None, settings=None, landmarks=elsewhere)
    context = TopicContext(None, None, None, None, landmarks=elsewhere)
    with pytest.raises(NotTheDriversFolder):
        _reduce_topic("t", [], context=context)
    # and a third-party class the driver found, which this process cannot import: the first
    # chunk task said "unknown chunking strategy" under Ray's traceback
    missing = (Plugin(STRATEGY, "mdx_nowhere"),)
    with pytest.raises(PluginNotOnNode, match="^the chunking strategy 'mdx_nowhere', which the"):
        read_and_chunk(batch, source=None, output=None, settings=None, landmarks=missing)
    with pytest.raises(PluginNotOnNode, match="no entry point 'mdx_nowhere' of 'mdindex.strat"):
        _reduce_topic("t", [], context=TopicContext(None, None, None, None, landmarks=missing))


def test_a_backend_is_found_on_a_node_without_being_imported(monkeypatch):
    """Only the embedding actors import a backend: a chunk task or reduce finds its module (the
    check imported it, torch and the like, in every worker); one that is not there is refused."""
    module = "tests.fixtures.plugins.mdx_hashing"
    monkeypatch.delitem(sys.modules, module, raising=False)
    check_landmarks((Plugin(BACKEND, f"{module}:HashingEmbedder"),))
    assert module not in sys.modules
    with pytest.raises(PluginNotOnNode, match="no module 'mdx_nowhere.backend' is found here"):
        check_landmarks((Plugin(BACKEND, "mdx_nowhere.backend:Embedder"),))
