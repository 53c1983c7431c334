"""Classes of a third party named where a built-in's name goes: a chunking strategy
(`chunking.strategy`) or an embedding backend (`embedding.models`).

A class is named by an entry point of an installed package (`[project.entry-points."<group>"]`,
the entry point's name being the class's `name`) or by its dotted path `package.module:Class`.
Nothing is registered on import: each process (the driver, every Ray worker) looks the name up
itself. The class's `name` and `version` head cache keys and folder names, so both are checked.
"""

from __future__ import annotations

import re
from importlib import import_module
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Collection

NAME = re.compile(r"[a-z0-9][a-z0-9_.]*")
VERSION = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+]*")


def named_class(
    name: str,
    *,
    group: str,
    kind: str,
    base: type | None,
    reserved: Collection[str],
    version_use: str,
    error: type[ValueError] = ValueError,
) -> Any | None:
    """The class `name` names (a dotted path, or the one entry point of `group` by that name),
    checked: a class (a subclass of `base`, where given) whose `name` matches `NAME`, is none of
    the built-in names (`reserved`) and is its entry point's, with a `version` matching `VERSION`
    (`version_use`: when it must change). None where `name` is no dotted path and no entry point
    of `group` has it. `error`, naming `kind` ("chunking strategy"), for one that does not import
    or does not pass."""
    if ":" in name:
        module, _, attribute = name.partition(":")
        where, entry_name = repr(name), None
        try:
            loaded = getattr(import_module(module), attribute)
        except (ImportError, AttributeError, ValueError) as exc:
            raise error(f"{kind} {where}: cannot import it ({type(exc).__name__}: {exc})") from exc
    else:
        points = {point.value: point for point in entry_points(group=group, name=name)}
        if not points:
            return None
        if len(points) > 1:
            raise error(
                f"{kind} {name!r}: several entry points of {group!r} have that name "
                f"({', '.join(sorted(points))})"
            )
        [point] = points.values()
        where, entry_name = f"{name!r} (entry point {point.value})", name
        try:
            loaded = point.load()
        except (ImportError, AttributeError) as exc:
            raise error(f"{kind} {where}: cannot import it ({type(exc).__name__}: {exc})") from exc
    own, version = getattr(loaded, "name", None), getattr(loaded, "version", None)
    problem = None
    if not isinstance(loaded, type):
        problem = f"{loaded!r} is no class"
    elif base is not None and not issubclass(loaded, base):
        problem = f"{loaded!r} is no subclass of {base}"
    elif not (isinstance(own, str) and NAME.fullmatch(own)) or own in reserved:
        problem = (
            f"its name {own!r} must be lowercase letters, digits, '_' and '.', and no built-in "
            f"name ({', '.join(sorted(reserved))})"
        )
    elif entry_name is not None and own != entry_name:
        problem = f"its name {own!r} is not its entry point's, {entry_name!r}"
    elif not (isinstance(version, str) and VERSION.fullmatch(version)):
        problem = (
            f"its version {version!r} must be set: letters, digits, '_', '.' and '+' (change it "
            f"{version_use})"
        )
    if problem:
        raise error(f"{kind} {where}: {problem}")
    return loaded
