"""Code hygiene (issue 12), checked on the source itself: no pickle, YAML through `yaml.safe_load`
only, no eval/exec, no shell=True, trust_remote_code off by default and never taken from an
index, and `mdindex serve` bound to the loopback unless told otherwise."""

from __future__ import annotations

import argparse
import ast
import inspect
from pathlib import Path

import pytest
import yaml

from chunking.normalize import _FrontMatterLoader
from chunking.yaml_keys import UniqueKeyLoader
from embedding import keys
from indexing import client
from indexing.cli import register
from indexing.server import make_server
from jobs.config import EmbeddingConfig

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("chunking", "embedding", "indexing", "plugins", "jobs", "benchmarks", "examples")
SOURCES = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def trees() -> list[tuple[str, ast.AST]]:
    return [(p.relative_to(ROOT).as_posix(), ast.parse(p.read_text(), str(p))) for p in SOURCES]


def calls(tree: ast.AST) -> list[ast.Call]:
    return [node for node in ast.walk(tree) if isinstance(node, ast.Call)]


def dotted(node: ast.AST) -> str:
    """`a.b.c` of a call's function ("" for anything else)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = dotted(node.value)
        return f"{base}.{node.attr}" if base else ""
    return ""


def test_the_sources_are_found():
    assert len(SOURCES) > 50 and any(p.name == "normalize.py" for p in SOURCES)


def imported(tree: ast.AST) -> list[str]:
    """Every module `tree` imports, at its top or inside a function."""
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names.append(node.module or "")
    return names


def test_no_pickle():
    for path, tree in trees():
        assert not any("pickle" in name for name in imported(tree)), path


def test_the_libraries_import_neither_ray_nor_the_job():
    """chunking, embedding and indexing are plain libraries: `mdindex query` printed its
    results with `jobs.logs.printable`, and importing `jobs.logs` started Ray's import."""
    for path, tree in trees():
        if path.split("/")[0] in ("chunking", "embedding", "indexing", "plugins"):
            roots = {name.split(".")[0] for name in imported(tree)}
            assert not roots & {"ray", "jobs"}, path


def test_yaml_is_read_with_safe_load_only():
    """`yaml.safe_load`, or `yaml.load` with one of our loaders, each a `yaml.SafeLoader`: the
    one refusing a key given twice (configs) and front matter's YAML 1.2 reading of it."""
    used = {
        (path, dotted(call.func), loader)
        for path, tree in trees()
        for call in calls(tree)
        if dotted(call.func).startswith("yaml.")
        for loader in [next((dotted(k.value) for k in call.keywords if k.arg == "Loader"), None)]
    }
    safe = {"yaml.safe_load", "yaml.safe_dump", "yaml.constructor.ConstructorError"}
    safe.add("yaml.SafeLoader.yaml_implicit_resolvers.items")  # front matter's, read
    loaders = {"UniqueKeyLoader": UniqueKeyLoader, "_FrontMatterLoader": _FrontMatterLoader}
    unsafe = {u for u in used if u[1] not in safe and not (u[1] == "yaml.load" and u[2] in loaders)}
    assert used and not unsafe, unsafe
    assert all(issubclass(loader, yaml.SafeLoader) for loader in loaders.values())


def test_no_eval_or_exec():
    for path, tree in trees():
        for call in calls(tree):
            assert dotted(call.func) not in ("eval", "exec", "builtins.eval", "compile"), path


def test_no_shell_true():
    for path, tree in trees():
        for call in calls(tree):
            for keyword in call.keywords:
                shell = keyword.arg == "shell" and not (
                    isinstance(keyword.value, ast.Constant) and keyword.value.value is False
                )
                assert not shell, (path, call.lineno)
            assert dotted(call.func) not in ("os.system", "os.popen"), path


def test_trust_remote_code_is_off_by_default_and_never_taken_from_an_index():
    assert EmbeddingConfig().trust_remote_code is False
    # what load_embedder (and model_keys) resolve from the options, before transformers loads
    assert keys.resolve_options("minilm", "cpu", {}).trust is False
    assert keys.resolve_options("minilm", "cpu", {"trust_remote_code": None}).trust is False
    assert "trust_remote_code" not in client.VECTOR_OPTIONS
    source = inspect.getsource(client.query_embedder)
    assert "if k in VECTOR_OPTIONS" in source  # the recorded options are filtered through it


@pytest.mark.parametrize("argv", [["serve", "."]])
def test_serve_binds_the_loopback_by_default(argv):
    parser = argparse.ArgumentParser(prog="mdindex")
    register(parser.add_subparsers(dest="command", required=True))
    assert parser.parse_args(argv).host == "127.0.0.1"
    assert inspect.signature(make_server).parameters["host"].default == "127.0.0.1"
