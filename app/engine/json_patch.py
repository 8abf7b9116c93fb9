"""RFC 6902 JSON Patch (``add``, ``remove``, ``replace``, ``move``, ``copy``, ``test``) over
RFC 6901 JSON Pointers, applied all or nothing: a patch that fails at any operation leaves the
document as it was (``PatchError`` names the operation). What AG-UI's ``STATE_DELTA`` carries.
"""

from __future__ import annotations

import copy
from typing import Any

_OPS = frozenset({"add", "remove", "replace", "move", "copy", "test"})


class PatchError(ValueError):
    """A malformed patch, or one that does not apply to the document."""


def apply_patch(document: Any, patch: list[dict[str, Any]]) -> Any:
    """The document after ``patch`` (a new value: ``document`` is not changed)."""
    if not isinstance(patch, list):
        raise PatchError("a JSON Patch is a list of operations")
    root = {"": copy.deepcopy(document)}  # a parent for the whole document's pointer ""
    for i, op in enumerate(patch):
        try:
            _apply(root, op)
        except PatchError as exc:
            raise PatchError(f"operation {i}: {exc}") from None
    return root[""]


def _apply(root: dict[str, Any], op: Any) -> None:
    if not isinstance(op, dict) or op.get("op") not in _OPS or not isinstance(op.get("path"),
                                                                               str):
        raise PatchError("needs an op (add, remove, replace, move, copy, test) and a path")
    kind, path = op["op"], op["path"]
    if kind in ("add", "replace", "test") and "value" not in op:
        raise PatchError(f"{kind} needs a value")
    if kind == "test":
        if _get(root, path) != op["value"]:
            raise PatchError(f"test failed at {path!r}")
    elif kind == "add":
        _add(root, path, copy.deepcopy(op["value"]))
    elif kind == "remove":
        _remove(root, path)
    elif kind == "replace":
        _remove(root, path)
        _add(root, path, copy.deepcopy(op["value"]))
    else:
        source = op.get("from")
        if not isinstance(source, str):
            raise PatchError(f"{kind} needs from")
        if kind == "move" and (path + "/").startswith(source + "/") and path != source:
            raise PatchError("cannot move a value into itself")
        value = copy.deepcopy(_get(root, source))
        if kind == "move":
            _remove(root, source)
        _add(root, path, value)


def _tokens(pointer: str) -> list[str]:
    """``/a/b~1c`` → ``["", "a", "b/c"]`` (the leading "" is the root's key)."""
    if pointer and not pointer.startswith("/"):
        raise PatchError(f"{pointer!r} is not a JSON Pointer")
    return [""] + [t.replace("~1", "/").replace("~0", "~") for t in pointer.split("/")[1:]]


def _parent(root: dict[str, Any], pointer: str) -> tuple[Any, str]:
    tokens = _tokens(pointer)
    node: Any = root
    for token in tokens[:-1]:
        node = _child(node, token, pointer)
    return node, tokens[-1]


def _child(node: Any, token: str, pointer: str) -> Any:
    if isinstance(node, dict) and token in node:
        return node[token]
    if isinstance(node, list) and _index(token, len(node) - 1) is not None:
        return node[int(token)]
    raise PatchError(f"{pointer!r} does not exist")


def _index(token: str, last: int) -> int | None:
    """A list index in ``0..last``, or None."""
    if not token.isdigit() or (token.startswith("0") and token != "0"):
        return None
    return int(token) if int(token) <= last else None


def _get(root: dict[str, Any], pointer: str) -> Any:
    parent, key = _parent(root, pointer)
    return _child(parent, key, pointer)


def _add(root: dict[str, Any], pointer: str, value: Any) -> None:
    parent, key = _parent(root, pointer)
    if isinstance(parent, dict):
        parent[key] = value
    elif isinstance(parent, list):
        at = len(parent) if key == "-" else _index(key, len(parent))
        if at is None:
            raise PatchError(f"{pointer!r}: no index {key!r} to add at")
        parent.insert(at, value)
    else:
        raise PatchError(f"{pointer!r}: the parent is not an object or array")


def _remove(root: dict[str, Any], pointer: str) -> None:
    parent, key = _parent(root, pointer)
    if pointer == "":
        root[""] = None
        return
    if isinstance(parent, dict) and key in parent:
        del parent[key]
    elif isinstance(parent, list) and (at := _index(key, len(parent) - 1)) is not None:
        del parent[at]
    else:
        raise PatchError(f"{pointer!r} does not exist")
