"""RFC 6902 JSON patches: building paths and applying them without copying whole objects.

Rules emit `add` operations on JSON pointers built here; the engine applies them with
`apply_patch`, which copies only the containers along each path so that evaluating a large
object stays cheap; `check --fix` applies the same operations to its round-trip YAML nodes
with `apply_in_place`; `difference` says what a patch from one object to another would be
(`quickq-guard test` shows it when a patched resource is not the expected one).
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy
from typing import Any

Path = tuple[str | int, ...]
Operation = dict[str, Any]


class PatchError(ValueError):
    """A patch does not apply to the object it was built for."""


def escape(segment: str | int) -> str:
    """One JSON-pointer reference token (RFC 6901: `~` is `~0`, `/` is `~1`)."""
    return str(segment).replace("~", "~0").replace("/", "~1")


def pointer(path: Path) -> str:
    """The JSON pointer of a path: ("metadata", "labels", "app.kubernetes.io/name") ->
    /metadata/labels/app.kubernetes.io~1name."""
    return "".join("/" + escape(segment) for segment in path)


def unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def split_pointer(text: str) -> tuple[str, ...]:
    """The reference tokens of a JSON pointer."""
    if text == "":
        return ()
    if not text.startswith("/"):
        raise PatchError(f"JSON pointer {text!r} does not start with '/'")
    return tuple(unescape(token) for token in text[1:].split("/"))


def value_at(obj: Any, path: Path) -> Any:
    """The value at `path` (an int steps into a list), or None where a level is missing or
    is not a mapping or list."""
    for key in path:
        if obj.__class__ is dict or isinstance(obj, Mapping):  # see schema.is_mapping
            obj = obj.get(key)
        elif isinstance(obj, list) and isinstance(key, int) and 0 <= key < len(obj):
            obj = obj[key]
        else:
            return None
    return obj


def add(path: Path, value: Any) -> Operation:
    return {"op": "add", "path": pointer(path), "value": value}


def apply_patch(document: Any, operations: list[Operation]) -> Any:
    """The document with the operations applied; the input is never modified.

    Supports add, replace and remove, the operations quickq-guard's rules emit, with RFC 6902
    semantics: an `add` whose parent is missing fails instead of inventing it.
    """
    for operation in operations:
        document = _apply_one(document, operation, copy=True)
    return document


def apply_in_place(document: Any, operations: list[Operation]) -> None:
    """The same operations applied to `document` itself: for ruamel.yaml's round-trip nodes
    (`check --fix`), whose comments and formatting a copy would lose. Each value is inserted
    as a deep copy, never an alias of the operation's."""
    for operation in operations:
        if not split_pointer(operation.get("path", "")):
            raise PatchError(f"cannot {operation.get('op')} the whole document in place")
        if "value" in operation:
            operation = {**operation, "value": deepcopy(operation["value"])}
        _apply_one(document, operation, copy=False)


def _apply_one(document: Any, operation: Operation, copy: bool) -> Any:
    op = operation.get("op")
    tokens = split_pointer(operation.get("path", ""))
    if not tokens:
        if op in ("add", "replace"):
            return operation["value"]
        raise PatchError(f"cannot {op} the whole document")
    root = _shallow_copy(document) if copy else document
    parent = root
    for token in tokens[:-1]:
        parent = _copy_child(parent, token, operation) if copy else \
            _child(parent, token, operation)
    last = tokens[-1]
    if op == "add":
        if isinstance(parent, list):
            if last == "-":
                parent.append(operation["value"])
            else:
                index = _index(parent, last, operation, allow_end=True)
                parent.insert(index, operation["value"])
        elif isinstance(parent, dict):
            parent[last] = operation["value"]
        else:
            raise PatchError(f"{operation['path']}: parent is not an object or array")
    elif op == "replace":
        _child(parent, last, operation)
        _set(parent, last, operation["value"])
    elif op == "remove":
        _child(parent, last, operation)
        if isinstance(parent, list):
            del parent[_index(parent, last, operation)]
        else:
            del parent[last]
    else:
        raise PatchError(f"unsupported patch operation {op!r}")
    return root


def _copy_child(parent: Any, token: str, operation: Operation) -> Any:
    """The child at `token`, put back into `parent` as a shallow copy and returned: a patch
    changes copies only, of the containers along its path."""
    if isinstance(parent, dict) and token in parent:  # most steps: a field of an object
        copied = parent[token] = _shallow_copy(parent[token])
        return copied
    copied = _shallow_copy(_child(parent, token, operation))
    _set(parent, token, copied)
    return copied


def _shallow_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, list):
        return list(value)
    return value


def _is_array_index(token: str) -> bool:
    """RFC 6901: ASCII digits, no leading zero. Not str.isdigit() alone: it takes "\u0661"
    (int() reads it as 1) and "\u00b2" (int() refuses)."""
    return token.isascii() and token.isdigit() and (token == "0" or token[0] != "0")


def _index(array: list[Any], token: str, operation: Operation, allow_end: bool = False) -> int:
    if not _is_array_index(token):
        append = ", or '-' to append" if allow_end else ""
        raise PatchError(f"{operation['path']}: {token!r} is not an array index (ASCII "
                         f"digits without leading zeros{append})")
    index = int(token)
    limit = len(array) if allow_end else len(array) - 1
    if index > limit:
        raise PatchError(f"{operation['path']}: index {index} is out of range")
    return index


def _child(parent: Any, token: str, operation: Operation) -> Any:
    if isinstance(parent, dict):
        if token not in parent:
            raise PatchError(f"{operation['path']}: member {token!r} does not exist")
        return parent[token]
    if isinstance(parent, list):
        return parent[_index(parent, token, operation)]
    raise PatchError(f"{operation['path']}: cannot descend into a scalar")


def _set(parent: Any, token: str, value: Any) -> None:
    """Set a member or an element; `_child` has checked the token is a valid index."""
    if isinstance(parent, dict):
        parent[token] = value
    else:
        parent[int(token)] = value


def _plain(segment: str) -> bool:
    """A segment written after a dot: an ASCII letter or `_`, then letters, digits, `_`, `-`
    (string methods: the segment may be an object's key, of any length)."""
    rest = segment.replace("-", "").replace("_", "")
    return segment.isascii() and (segment[:1].isalpha() or segment[:1] == "_") \
        and (rest == "" or rest.isalnum())


def difference(source: Any, target: Any, path: Path = ()) -> list[Operation]:
    """A patch that turns `source` into `target` (apply_patch(source, it) == target): objects
    key by key, lists item by item with the extra items added or removed at the end, any
    other change a `replace` of the value."""
    if type(source) is dict and type(target) is dict:
        operations = [{"op": "remove", "path": pointer((*path, key))}
                      for key in source if key not in target]
        for key, value in target.items():
            if key not in source:
                operations.append(add((*path, key), value))
            else:
                operations += difference(source[key], value, (*path, key))
        return operations
    if type(source) is list and type(target) is list:
        common = min(len(source), len(target))
        operations = [operation for index in range(common)
                      for operation in difference(source[index], target[index], (*path, index))]
        operations += [add((*path, index), target[index])
                       for index in range(common, len(target))]
        operations += [{"op": "remove", "path": pointer((*path, index))}
                       for index in reversed(range(common, len(source)))]
        return operations
    if source == target and type(source) is type(target):
        return []
    return [{"op": "replace", "path": pointer(path), "value": target}]


def dotted(path: Path) -> str:
    """A path as people read it: spec.containers[0].resources.limits[nvidia.com/gpu]."""
    text = ""
    for segment in path:
        if isinstance(segment, int):
            text += f"[{segment}]"
        elif _plain(segment):
            text += f".{segment}" if text else segment
        else:
            text += f"[{segment}]"
    return text





def rebase(operations: list[Operation], written: Any) -> list[Operation]:
    """The operations of a patch made for the object as the API server hands it (defaulted,
    its empty values and nulls dropped: webhook.engine.normalize) rewritten for the object as
    written, so that `check --fix` adds what the policies add and nothing the server would
    default: a parent the written object lacks (or holds as null) is added as `{}` or `[]`,
    a `replace` of a field it lacks is an `add`, a `remove` of one it lacks is left out, and
    a list index past its end appends. An operation that does not fit the written object at
    all is kept as it is (applying it then fails, as it should)."""
    rebased: list[Operation] = []
    current = written
    for operation in operations:
        steps = _rebased(operation, current)
        if steps:
            current = apply_patch(current, steps)
        rebased += steps
    return rebased


def _rebased(operation: Operation, written: Any) -> list[Operation]:
    op = operation.get("op")
    tokens = split_pointer(operation.get("path", ""))
    if op not in ("add", "replace", "remove") or not tokens:
        return [operation]
    steps: list[Operation] = []
    done: list[str] = []
    node = written
    for position, token in enumerate(tokens[:-1]):
        if isinstance(node, list) and _is_array_index(token) and int(token) < len(node):
            child = node[int(token)]
        elif isinstance(node, dict):
            child = node.get(token)
        else:
            return [operation]
        done.append(token)
        if child is None:  # missing, or null: the server saw no value there
            if op == "remove":
                return []
            following = tokens[position + 1]
            child = [] if following == "-" or _is_array_index(following) else {}
            steps.append({"op": "add", "path": pointer(tuple(done)), "value": child})
        node = child
    last = tokens[-1]
    if isinstance(node, list):
        index = _is_array_index(last)  # ASCII digits only, as apply_patch reads them
        there = index and int(last) < len(node)
        if op == "add" and index and not there:
            last = "-"
    elif isinstance(node, dict):
        there = last in node
    else:
        return [operation]
    if not there and op == "remove":
        return steps
    if not there and op == "replace":
        op = "add"
    steps.append({**operation, "op": op, "path": pointer((*done, last))})
    return steps
