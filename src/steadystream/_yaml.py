"""YAML files from users (a gateway configuration, a lab scenario), read with bounds.

The safe loader runs no code, but it still follows aliases: a few hundred bytes of anchors
nested a few levels deep (the "billion laughs") name a structure of billions of values, and
every walk over it (validation, an error quoting it) takes as long. A file here is read only
when it is a regular file (a FIFO would hang the reader, ``/dev/zero`` never end), of at
most :data:`MAX_BYTES`, UTF-8, and naming at most :data:`MAX_VALUES` values once its aliases
are followed; anything else is a :class:`ConfigError` naming the file.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

import yaml

from steadystream._exceptions import ConfigError

__all__ = ["MAX_BYTES", "MAX_VALUES", "load_yaml"]

MAX_BYTES = 1 << 20
MAX_VALUES = 100_000
_MERGE = "tag:yaml.org,2002:merge"


def load_yaml(path: Path, what: str) -> Any:
    """The YAML document in ``path`` (``what`` it should be, for messages)."""
    try:
        mode = path.stat().st_mode  # (exists() lets a folder it may not enter raise)
    except FileNotFoundError:
        raise ConfigError(f"{path}: cannot read the {what}: no such file") from None
    except OSError as exc:  # no permission, a name too long, a link loop
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(mode):
        found = "a folder" if stat.S_ISDIR(mode) else "not a regular file"
        raise ConfigError(f"{path}: {found}; expected a {what} (YAML)")
    try:
        with path.open("rb") as file:
            raw = file.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc.strerror or exc}") from exc
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{path}: larger than {MAX_BYTES} bytes; not a {what}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start}); not a {what}") from None
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_size(node, path, what)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: cannot read the {what}: {exc}") from exc
    except RecursionError:
        raise ConfigError(f"{path}: nested too deep to be a {what}") from None
    finally:
        loader.dispose()


def _check_size(root: yaml.Node, path: Path, what: str) -> None:
    """How many values ``root`` names with its aliases followed: at most MAX_VALUES."""
    sizes: dict[int, int] = {}
    open_: set[int] = set()  # nodes whose values are being counted (a depth-first path)
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        children = _children(node)
        if not done:
            if key in sizes:
                continue  # (an alias of a node counted already)
            if isinstance(node, yaml.MappingNode):
                _check_keys(node, path, what)
            open_.add(key)
            stack.append((node, True))
            for child in children:
                if id(child) in open_:
                    raise ConfigError(f"{path}: an alias refers to itself; not a {what}")
                if id(child) not in sizes:
                    stack.append((child, False))
            continue
        size = 1 + sum(sizes[id(child)] for child in children)
        if size > MAX_VALUES:
            raise ConfigError(
                f"{path}: its aliases name more than {MAX_VALUES} values; not a {what}"
            )
        sizes[key] = size
        open_.discard(key)


def _check_keys(node: yaml.MappingNode, path: Path, what: str) -> None:
    """A key given twice in one mapping is refused (YAML says keys are unique; the loader
    would keep the last one silently, and which one the user meant is anyone's guess).
    Merged keys (``<<: *base``) may be overridden, as YAML's merge says."""
    seen: dict[tuple[str, str], yaml.Node] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE:
            continue
        first = seen.get((key.tag, key.value))
        if first is not None:
            raise ConfigError(
                f"{path}: line {key.start_mark.line + 1}: key {key.value[:80]!r} is given twice"
                f" (first at line {first.start_mark.line + 1}); not a {what}"
            )
        seen[(key.tag, key.value)] = key


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return []
