"""Reading YAML authoring files safely: UTF-8 only, no duplicate keys, no alias bombs, clean errors.

``load_yaml(path, what)`` is the one way ragassay reads a YAML file a user wrote (golden sets, pipeline
configs, gate policies). On top of PyYAML's safe loader it:

- decodes the bytes as UTF-8 (a UTF-8 byte-order mark is allowed) and otherwise fails with
  ``file: not UTF-8 text (byte 0xE9 at offset N)``;
- refuses a mapping key given twice (``file:line: key 'x' given twice (first at line M)``) — PyYAML keeps the
  last one silently;
- bounds alias expansion: anchors and aliases are allowed (``<<: *defaults`` is common in configs), but a
  document whose fully expanded size exceeds ``MAX_EXPANDED_NODES`` and ``EXPANSION_FACTOR`` times its
  written size is refused before anything walks it, so a 1 KB "billion laughs" file fails in milliseconds
  instead of growing to gigabytes. A recursive alias (a node containing itself) is refused too;
- turns every parse problem into an :class:`~ragassay.errors.InputError` with ``file:line``.

An empty file (or one holding only comments) loads as ``None``; callers say what they expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ragassay.errors import InputError

try:  # the C parser is ~10x faster on large files
    _Loader = yaml.CSafeLoader
except AttributeError:  # pragma: no cover - libyaml missing
    _Loader = yaml.SafeLoader

MAX_EXPANDED_NODES = 100_000
EXPANSION_FACTOR = 10
_MERGE_TAG = "tag:yaml.org,2002:merge"


def read_utf8(path: Path, what: str) -> str:
    """The text of ``path`` decoded as UTF-8 (BOM allowed), or an :class:`InputError` naming the byte."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except IsADirectoryError as e:
        raise InputError(f"{path}: is a folder; pass the {what} file") from e
    except FileNotFoundError as e:
        raise InputError(f"{path}: no such file; pass the {what} file") from e
    except OSError as e:
        raise InputError(f"{path}: cannot read the {what} ({e.strerror})") from e
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        bom = 3 if data.startswith(b"\xef\xbb\xbf") else 0
        raise InputError(
            f"{path}: not UTF-8 text (byte 0x{data[e.start + bom]:02X} at offset {e.start + bom}); "
            f"re-save the {what} as UTF-8"
        ) from e


def _where(path: Path, mark) -> str:
    return f"{path}:{mark.line + 1}" if mark is not None else str(path)


def _check_nodes(root: yaml.Node, path: Path, what: str) -> None:
    """Duplicate keys, recursive aliases and the expanded size, in one iterative pass over distinct nodes.

    Aliased nodes are the same object in PyYAML's graph, so sizes are memoized by identity: the walk costs
    the written size, whatever the expanded size is.
    """
    size: dict[int, int] = {}
    on_path: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        nid = id(node)
        if done:
            on_path.discard(nid)
            children = _children(node)
            size[nid] = 1 + sum(size[id(c)] for c in children)
            continue
        if nid in size:
            continue
        if nid in on_path:
            raise InputError(f"{_where(path, node.start_mark)}: recursive YAML alias (a node contains itself); "
                             f"write the {what} out without it")
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple[str, str], int] = {}
            for key, _ in node.value:
                if not isinstance(key, yaml.ScalarNode) or key.tag == _MERGE_TAG:
                    continue
                k = (key.tag, key.value)
                if k in seen:
                    raise InputError(f"{_where(path, key.start_mark)}: key {key.value!r} given twice "
                                     f"(first at line {seen[k]}); keep one")
                seen[k] = key.start_mark.line + 1
        on_path.add(nid)
        stack.append((node, True))
        stack.extend((c, False) for c in _children(node) if id(c) not in size)
    expanded = size[id(root)]
    limit = max(MAX_EXPANDED_NODES, EXPANSION_FACTOR * len(size))
    if expanded > limit:
        raise InputError(f"{path}: YAML aliases expand {len(size)} written nodes to {expanded:,} "
                         f"(limit {limit:,}); write the {what} out without nested aliases")


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [x for kv in node.value for x in kv]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def load_yaml_node(path: Path, what: str) -> tuple[Any, yaml.Node | None]:
    """Like :func:`load_yaml`, also returning the composed root node (for line numbers); ``(None, None)``
    for an empty document."""
    path = Path(path)
    text = read_utf8(path, what)
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None, None
        _check_nodes(node, path, what)
        return loader.construct_document(node), node
    except yaml.reader.ReaderError as e:
        line = text.count("\n", 0, e.position) + 1
        char = e.character if isinstance(e.character, int) else ord(e.character)
        raise InputError(f"{path}:{line}: control character U+{char:04X} at offset {e.position} is not "
                         f"allowed in YAML (binary or UTF-16 file?); save the {what} as UTF-8 text") from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = " ".join(str(getattr(e, "problem", None) or e).split())
        raise InputError(f"{_where(path, mark)}: invalid YAML in the {what} ({problem})") from e
    except RecursionError as e:
        raise InputError(f"{path}: YAML nested too deeply to read; flatten the {what}") from e
    finally:
        loader.dispose()


def load_yaml(path: Path, what: str) -> Any:
    """Parse the YAML file ``path`` (a ``what``, e.g. "golden set", "pipeline config") safely.

    Returns the document (``None`` when empty). Raises :class:`InputError` with ``file`` or ``file:line`` for
    non-UTF-8 bytes, invalid YAML, a duplicate key, a recursive alias or an alias expansion past the bound.
    """
    return load_yaml_node(path, what)[0]


def line_of(node: Any, loc: tuple) -> int | None:
    """The 1-based YAML line for a validation error at ``loc`` (a pydantic ``loc``) under the node tree of
    :func:`load_yaml_node`: the line of the deepest key of ``loc`` that exists, an index descending into a
    sequence; where a key is missing, the line where its enclosing node starts. None without a node."""
    line = None
    for key in loc:
        if node is None:
            break
        line = node.start_mark.line + 1
        nxt = None
        if hasattr(node, "value") and isinstance(node.value, list):
            if isinstance(key, int) and key < len(node.value) and not isinstance(node.value[key], tuple):
                nxt = node.value[key]
            else:
                for item in node.value:
                    if isinstance(item, tuple) and getattr(item[0], "value", None) == str(key):
                        line = item[0].start_mark.line + 1
                        nxt = item[1]
                        break
        node = nxt
    return line
