"""Kubernetes' CEL refuses a list or map literal whose items (or keys, or values) differ in
type: `[1, 2.0]`, `[1, dyn(2)]`, `{'a': 1, 'b': 'x'}` do not compile there ("expected type
'int' but found 'double'"), while the runtime makes each a list or map of dyn. So that a
policy means the same here and in the API server, such a literal is refused when the policy
loads (`mixed_literal`), found in the runtime's type-checked expression (the CheckedExpr
protobuf its program serializes to, read below with the few field numbers of
cel/expr/checked.proto and syntax.proto it needs).

The rule, as the API server applies it (tests/cluster/test_cel_vs_vap.py probes it): every
item's type is the first's, where `dyn` is only `dyn` and a type left open (that of `[]` or
`optional.none()`) fits any; an optional item (`[?x]`, `{?k: v}`) counts by the type it
holds; a literal inside a `format()` call (`'%d %s'.format([1, 'a'])`) may mix types.
"""

from __future__ import annotations

from typing import Any

Fields = dict[int, list[Any]]

# Field numbers of cel.expr: Any, CheckedExpr, Expr and its kinds, Type, SourceInfo.
_ANY_VALUE = 2
_CHECKED_TYPE_MAP, _CHECKED_EXPR, _CHECKED_SOURCE = 3, 4, 5
_EXPR_ID, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION = 2, 5, 6, 7, 8, 9
_PRIMITIVES = {1: "bool", 2: "int", 3: "uint", 4: "double", 5: "string", 6: "bytes"}
_WELL_KNOWN = {1: "any", 2: "timestamp", 3: "duration"}
_TYPE_PARAM, _ABSTRACT = 10, 14


def _varint(data: bytes, index: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[index]
        index += 1
        result |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return result, index


def _fields(data: bytes) -> Fields:
    """A protobuf message's fields by number, each with its values in order (varints as
    ints, everything length-delimited as bytes)."""
    out: Fields = {}
    index = 0
    while index < len(data):
        key, index = _varint(data, index)
        number, wire = key >> 3, key & 7
        value: Any
        if wire == 0:
            value, index = _varint(data, index)
        elif wire == 2:
            size, index = _varint(data, index)
            value, index = data[index:index + size], index + size
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
            value, index = data[index:index + size], index + size
        else:
            raise ValueError(f"protobuf wire type {wire}")
        out.setdefault(number, []).append(value)
    return out


def _one(fields: Fields, number: int) -> Fields:
    return _fields(fields[number][0]) if number in fields else {}


def _packed(fields: Fields, number: int) -> set[int]:
    """A repeated int32 field, packed or not."""
    out: set[int] = set()
    for value in fields.get(number, []):
        if isinstance(value, int):
            out.add(value)
            continue
        index = 0
        while index < len(value):
            item, index = _varint(value, index)
            out.add(item)
    return out


def _kind(type_: bytes) -> tuple[int, Any]:
    fields = _fields(type_)
    number = min(fields) if fields else 1  # one field: the Type's kind
    return number, fields[number][0] if fields else b""


def _same(a: bytes, b: bytes) -> bool:
    """Whether two checked types are one for Kubernetes' literal rule."""
    if a == b:
        return True
    (kind_a, value_a), (kind_b, value_b) = _kind(a), _kind(b)
    if _TYPE_PARAM in (kind_a, kind_b):
        return True
    if kind_a != kind_b or kind_a not in (6, 7, 11, _ABSTRACT):
        return False
    if kind_a == 11:  # type(T)
        return _same(value_a, value_b)
    fields_a, fields_b = _fields(value_a), _fields(value_b)
    if kind_a == _ABSTRACT and fields_a.get(1) != fields_b.get(1):
        return False
    number = 2 if kind_a == _ABSTRACT else 1
    parts_a = fields_a.get(number, []) + (fields_a.get(2, []) if kind_a == 7 else [])
    parts_b = fields_b.get(number, []) + (fields_b.get(2, []) if kind_a == 7 else [])
    return len(parts_a) == len(parts_b) and all(
        _same(x, y) for x, y in zip(parts_a, parts_b, strict=True))


def _name(type_: bytes) -> str:
    """A checked type as Kubernetes writes it: int, list(string), map(string, int)."""
    kind, value = _kind(type_)
    if kind == 3:
        return _PRIMITIVES.get(value, "?")
    if kind == 4:
        return f"wrapper({_PRIMITIVES.get(value, '?')})"
    if kind == 5:
        return _WELL_KNOWN.get(value, "?")
    if kind == 2:
        return "null"
    if kind in (9, _TYPE_PARAM):
        return bytes(value).decode()
    if kind == 11:
        return f"type({_name(value)})"
    fields = _fields(value) if isinstance(value, bytes) else {}
    if kind == 6:
        return f"list({_name(fields[1][0])})"
    if kind == 7:
        return f"map({_name(fields[1][0])}, {_name(fields[2][0])})"
    if kind == _ABSTRACT:
        parameters = ", ".join(_name(p) for p in fields.get(2, []))
        name = bytes(fields[1][0]).decode()
        return f"{name}({parameters})" if parameters else name
    return "dyn"


def _unwrapped(type_: bytes) -> bytes:
    """The type an optional holds (optional_type(T): T)."""
    kind, value = _kind(type_)
    if kind == _ABSTRACT:
        fields = _fields(value)
        if fields.get(1) == [b"optional_type"] and fields.get(2):
            held: bytes = fields[2][0]
            return held
    return type_


def mixed_literal(program: Any, text: str) -> str | None:
    """Where a compiled expression has a literal of items of more than one type, what the
    API server says of it (`line 1, column 5: expected type 'int' but found 'double'`,
    with a hint), else None. `text` is what was compiled, for the position."""
    if program is None:
        return None
    checked = _fields(_fields(program.serialize())[_ANY_VALUE][0])
    types: dict[int, bytes] = {}
    for entry in checked.get(_CHECKED_TYPE_MAP, []):
        pair = _fields(entry)
        types[pair.get(1, [0])[0]] = pair[2][0]
    found = _first_mixed(_one(checked, _CHECKED_EXPR), types)
    if found is None:
        return None
    node, expected, actual = found
    source = _one(checked, _CHECKED_SOURCE)
    offset = 0
    for entry in source.get(4, []):  # positions: id -> offset in code points
        pair = _fields(entry)
        if pair.get(1, [0])[0] == node:
            offset = pair.get(2, [0])[0]
    line = text.count("\n", 0, offset) + 1
    column = offset - (text.rfind("\n", 0, offset) + 1) + 1
    return (f"line {line}, column {column}: expected type '{_name(expected)}' but found "
            f"'{_name(actual)}' (Kubernetes' CEL wants the items of a list literal, and the "
            "keys and the values of a map literal, of one type each; to mix types, write "
            "every one of them as dyn(...))")


def _first_mixed(expr: Fields, types: dict[int, bytes]) -> tuple[int, bytes, bytes] | None:
    """(the offending item's node, the type expected, the type found), depth first."""
    if _CALL in expr:
        call = _fields(expr[_CALL][0])
        if call.get(2) == [b"format"]:
            return None  # its argument list may mix types
        children = call.get(1, []) + call.get(3, [])
    elif _LIST in expr:
        listed = _fields(expr[_LIST][0])
        elements = [_fields(item) for item in listed.get(1, [])]
        optional = _packed(listed, 2)
        found = _mixed([(item, index in optional) for index, item in enumerate(elements)],
                       types)
        if found:
            return found
        children = listed.get(1, [])
    elif _STRUCT in expr:
        created = _fields(expr[_STRUCT][0])
        entries = [_fields(entry) for entry in created.get(2, [])]
        keys = [(_one(entry, 3), False) for entry in entries if 3 in entry]
        values = [(_one(entry, 4), bool(entry.get(5, [0])[0])) for entry in entries]
        if not created.get(1):  # a map literal, not a message
            found = _mixed(keys, types) or _mixed(values, types)
            if found:
                return found
        children = [entry[n][0] for entry in entries for n in (3, 4) if n in entry]
    elif _SELECT in expr:
        children = _fields(expr[_SELECT][0]).get(1, [])
    elif _COMPREHENSION in expr:
        comprehension = _fields(expr[_COMPREHENSION][0])
        children = [comprehension[n][0] for n in (2, 4, 5, 6, 7) if n in comprehension]
    else:
        return None
    for child in children:
        found = _first_mixed(_fields(child), types)
        if found:
            return found
    return None


def _mixed(items: list[tuple[Fields, bool]], types: dict[int, bytes]
           ) -> tuple[int, bytes, bytes] | None:
    first: bytes | None = None
    for item, optional in items:
        node = item.get(_EXPR_ID, [0])[0]
        type_ = types.get(node)
        if type_ is None:
            continue
        if optional:
            type_ = _unwrapped(type_)
        if first is None:
            first = type_
        elif not _same(first, type_):
            return node, first, type_
    return None
