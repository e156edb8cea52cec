"""What the runtime's type-checked expression shows that its compiler lets through: read
from the CheckedExpr protobuf its program serializes to, with the few field numbers of
cel/expr/checked.proto and syntax.proto it needs.

- A list or map literal whose items (or keys, or values) differ in type: Kubernetes' CEL
  does not compile `[1, 2.0]`, `[1, dyn(2)]`, `{'a': 1, 'b': 'x'}` ("expected type 'int'
  but found 'double'"), while the runtime makes each a list or map of dyn; so that a policy
  means the same here and in the API server, it is refused when the policy loads. The rule,
  as the API server applies it (tests/cluster/test_cel_vs_vap.py probes it): every item's
  type is the first's, where `dyn` is only `dyn` and a type left open (that of `[]` or
  `optional.none()`) fits any; an optional item (`[?x]`, `{?k: v}`) counts by the type it
  holds; a literal inside a `format()` call (`'%d %s'.format([1, 'a'])`) may mix types.
- An optional handed to a function served by Python (`[optional.of(1)].sum()`): the runtime
  cannot convert it and leaves the interpreter in a state that crashed it, so it is refused
  when the policy loads (Kubernetes' functions take no optional there either).
- A `format()` argument whose type holds a timestamp or duration deeper than the guard of
  format looks (webhook.engine.cel.go): Python would see it only to the microsecond.
- A call of the lists library whose list its guard (webhook.engine.cel.go) could not bind:
  only the guard gives Kubernetes' answer (a uint sum, an empty list's zero).

It also finds timestamp arithmetic (`time_arithmetic`), which webhook.engine.cel.go writes so
that its result keeps the offset cel-go keeps, and the sums whose list the checker typed
(`sum_zeros`), whose empty list's zero is that type's in Kubernetes.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

from webhook.engine.cel.go import FORMAT_ARGUMENTS, FORMAT_LEVELS, TYPED_AS, ZERO_WIDTH
from webhook.engine.cel.library import (
    LIST_METHODS,
    GoQuantity,
    amount_of,
    go_add,
    go_approximate_float,
    go_is_integer,
    go_quantity,
    regex_problem,
)

Fields = dict[int, list[Any]]

# Field numbers of cel.expr: Any, CheckedExpr, Expr and its kinds, Type, SourceInfo.
_ANY_VALUE = 2
_CHECKED_REFERENCES, _CHECKED_TYPE_MAP, _CHECKED_EXPR, _CHECKED_SOURCE = 2, 3, 4, 5
_EXPR_ID, _IDENT, _SELECT, _CALL, _LIST, _STRUCT, _COMPREHENSION = 2, 4, 5, 6, 7, 8, 9
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


class Checked(NamedTuple):
    """A program's CheckedExpr, read once: its root expression, the type of each node by id,
    its source info (the positions), and its reference map as it came (read by `overloads`
    only where needed)."""

    root: Fields
    types: dict[int, bytes]
    source: Fields
    references: list[bytes]


def read(program: Any) -> Checked:
    checked = _fields(_fields(program.serialize())[_ANY_VALUE][0])
    types: dict[int, bytes] = {}
    for entry in checked.get(_CHECKED_TYPE_MAP, []):
        pair = _fields(entry)
        types[pair.get(1, [0])[0]] = pair[2][0]
    return Checked(_one(checked, _CHECKED_EXPR), types, _one(checked, _CHECKED_SOURCE),
                   checked.get(_CHECKED_REFERENCES, []))


def overloads(checked: Checked) -> dict[int, set[str]]:
    """The overloads the checker found for each call node (several where an argument is
    dyn)."""
    found: dict[int, set[str]] = {}
    for entry in checked.references:
        pair = _fields(entry)
        reference = _fields(pair[2][0]) if 2 in pair else {}
        found[pair.get(1, [0])[0]] = {bytes(name).decode() for name in reference.get(3, [])}
    return found


def checked_problem(program: Any, text: str, python: frozenset[str] = frozenset()
                    ) -> str | None:
    """What the compiled expression has that must not run, with where (`line 1, column 5:
    expected type 'int' but found 'double'` and a hint), else None. `text` is what was
    compiled, for the position; `python`: the functions served by Python (besides the
    guards, `qq__...`)."""
    return None if program is None else problem_in(read(program), text, python)


def problem_in(checked: Checked, text: str, python: frozenset[str] = frozenset(),
               allowed: Callable[[int, str], bool] | None = None) -> str | None:
    """checked_problem of a program read; `allowed(offset, problem)`: a problem let through
    at that offset of `text` (in code points)."""
    offsets: dict[int, int] | None = None
    found = _problems(checked.root, checked.types, python)
    if "format(" in text:
        found = itertools.chain(found, _hidden_optionals(checked))
    for node, problem in found:
        if offsets is None:
            offsets = {}
            for entry in checked.source.get(4, []):  # positions: id -> offset in code points
                pair = _fields(entry)
                offsets[pair.get(1, [0])[0]] = pair.get(2, [0])[0]
        offset = offsets.get(node, 0)
        if allowed is not None and allowed(offset, problem):
            continue
        line = text.count("\n", 0, offset) + 1
        column = offset - (text.rfind("\n", 0, offset) + 1) + 1
        return f"line {line}, column {column}: {problem}"
    return None


def branch_types(checked: Checked, choice: str, count: int) -> list[str]:
    """The type of each of the `count` expressions a policy's program chooses from by the
    variable `choice` (webhook.engine.cel.compile_policy: `choice < n ? dyn(a) : dyn(b)`,
    inside the cel.bind of its variables), as Kubernetes writes types: bool, string..."""
    types = checked.types

    def leaves(expr: Fields) -> list[Fields]:
        if _COMPREHENSION in expr:  # cel.bind(name, value, result)
            comprehension = _fields(expr[_COMPREHENSION][0])
            over = _one(comprehension, 2)  # cel.bind iterates over an empty list
            if 7 in comprehension and _LIST in over and not _one(over, _LIST).get(1):
                return leaves(_fields(comprehension[7][0]))
        chosen = _chosen(expr)
        return chosen if chosen is not None else [expr]

    def _chosen(expr: Fields) -> list[Fields] | None:
        """The branches of `choice < n ? a : b`, each a nested choice or dyn(expression)."""
        call = _fields(expr[_CALL][0]) if _CALL in expr else {}
        arguments = [_fields(child) for child in call.get(3, [])]
        if call.get(2) != [b"_?_:_"] or _CALL not in arguments[0]:
            return None
        condition = _fields(arguments[0][_CALL][0])
        operands = [_fields(child) for child in condition.get(3, [])]
        if condition.get(2) != [b"_<_"] or _IDENT not in operands[0] or \
                _fields(operands[0][_IDENT][0]).get(1) != [choice.encode()]:
            return None
        found = []
        for branch in arguments[1:]:
            nested = _chosen(branch)
            if nested is not None:
                found += nested
                continue
            wrapped = _fields(branch[_CALL][0]) if _CALL in branch else {}
            inner = wrapped.get(3, [])
            found.append(_fields(inner[0]) if wrapped.get(2) == [b"dyn"] and len(inner) == 1
                         else branch)
        return found

    found = [_name(types[node]) if (node := leaf.get(_EXPR_ID, [0])[0]) in types else "dyn"
             for leaf in leaves(checked.root)]
    return found if len(found) == count else ["dyn"] * count


MIXED_HINT = ("(Kubernetes' CEL wants the items of a list literal, and the keys and the values "
              "of a map literal, of one type each; to mix types, write every one of them as "
              "dyn(...))")


def _problems(expr: Fields, types: dict[int, bytes], python: frozenset[str]
              ) -> Iterator[tuple[int, str]]:
    """(the offending node, what is wrong there), depth first."""
    exempt = False
    if _CALL in expr:
        call = _fields(expr[_CALL][0])
        name = bytes(call.get(2, [b""])[0]).decode()
        if name.startswith("qq__") or name in python:
            for child in _children(expr):
                node = _fields(child).get(_EXPR_ID, [0])[0]
                if node in types and _has_optional(types[node]):
                    shown = name.removeprefix("qq__")
                    yield node, (f"{shown}() is given an optional ({_name(types[node])}); "
                                 "take its value first (.value(), .orValue(...))")
                    return
        if call.get(1) and ((name in LIST_METHODS and name in python)
                            or (name in _LIST_INDEXES and python)):
            target = _fields(call[1][0])
            if _ident(target) != _RECEIVER and \
                    _name(types.get(target.get(_EXPR_ID, [0])[0], b"")) != "string":
                shown = name.removeprefix("qq__")
                yield expr.get(_EXPR_ID, [0])[0], (
                    f"quickq-guard cannot tell the list of this {shown}() apart in the "
                    "expression's text, to give Kubernetes' answer; put it in parentheses or "
                    "a variable")
                return
        if name in ("matches", "find", "findAll"):  # a literal pattern: checked now, as there
            arguments = call.get(3, [])
            at = 0 if call.get(1) else 1
            pattern = _string_constant(_fields(arguments[at])) if at < len(arguments) else None
            problem = None if pattern is None else regex_problem(pattern)
            if problem:
                yield expr.get(_EXPR_ID, [0])[0], f"invalid {name} argument: {problem}"
                return
        exempt = name in ("format", "qq__format")  # its argument list may mix types
        if name == "format" and len(call.get(3, [])) == 1:  # as written (for the position)
            found = _too_deep(_fields(call[3][0]), types)
            if found:
                yield found
                return
        if name in ("isInteger", "asInteger", "asApproximateFloat") and call.get(1):
            written = _written_scale(name, _fields(call[1][0]), types)
            if written:
                node = expr.get(_EXPR_ID, [0])[0]
                yield node, (f"{name}() of {written}: Kubernetes' answer depends on how the "
                             "quantity was written (1000m, 1.0, 0.5Gi and 1Pi are no "
                             "integers there, nor is a sum with such a term, and 0.1 + 0.2 "
                             "is 0.30000000000000004 as a double), which quickq-guard does "
                             "not keep; compare the quantity instead (compareTo, "
                             "isLessThan), or write it otherwise (1, 512Mi, 300m)")
    elif _LIST in expr:
        listed = _fields(expr[_LIST][0])
        elements = [_fields(item) for item in listed.get(1, [])]
        optional = _packed(listed, 2)
        found = _mixed([(item, index in optional) for index, item in enumerate(elements)],
                       types)
        if found:
            yield found
    elif _STRUCT in expr:
        created = _fields(expr[_STRUCT][0])
        entries = [_fields(entry) for entry in created.get(2, [])]
        keys = [(_one(entry, 3), False) for entry in entries if 3 in entry]
        values = [(_one(entry, 4), bool(entry.get(5, [0])[0])) for entry in entries]
        if not created.get(1) and not _typed_as(keys):  # a map literal, not a message
            found = _mixed(keys, types) or _mixed(values, types)
            if found:
                yield found
    elif _COMPREHENSION in expr:
        comprehension = _fields(expr[_COMPREHENSION][0])
        if comprehension.get(3) == [FORMAT_ARGUMENTS.encode()] and 4 in comprehension:
            found = _too_deep(_fields(comprehension[4][0]), types)  # cel.bind(qq__fa, ...)
            if found:
                yield found
                return
    elif _SELECT not in expr:
        return
    for child in _children(expr):
        for found in _problems(_fields(child), types, python):
            if not (exempt and found[1].startswith("expected type")):
                yield found


def _too_deep(arguments: Fields, types: dict[int, bytes]) -> tuple[int, str] | None:
    """format()'s argument list, when its type holds a timestamp or duration deeper in an
    argument than the guard of format looks (webhook.engine.cel.go)."""
    node = arguments.get(_EXPR_ID, [0])[0]
    deep = _time_depth(types[node]) if node in types else None
    if deep is None or deep <= FORMAT_LEVELS + 1:
        return None
    return node, (f"format() is given a timestamp or duration {deep - 1} lists or maps deep in "
                  f"an argument ({_name(types[node])}); quickq-guard sees one exactly only "
                  f"{FORMAT_LEVELS} deep (below that the runtime hands it over to the "
                  "microsecond, and its parser stops at 32 levels of nesting before the guard "
                  "could look further): write each as string() first")


def _time_depth(type_: bytes) -> int | None:
    """How many lists or maps down a type holds a timestamp or duration (a list of them: 1),
    or None when it holds none it shows (dyn shows nothing)."""
    kind, value = _kind(type_)
    if kind == 5 and value in (2, 3):  # well-known: timestamp, duration
        return 0
    if kind in (6, 7):
        fields = _fields(value)
        inner = _time_depth(fields[1][0] if kind == 6 else fields[2][0])
        return None if inner is None else inner + 1
    if kind == _ABSTRACT:
        depths = [d for d in (_time_depth(p) for p in _fields(value).get(2, [])) if d is not None]
        return max(depths) if depths else None
    return None


_ARITHMETIC = frozenset({"add_timestamp_duration", "add_duration_timestamp",
                         "subtract_timestamp_duration"})


def time_arithmetic(checked: Checked) -> list[int]:
    """Where (code points into the text compiled) an operator `+` or `-` may compute a
    timestamp from a timestamp and a duration, by the overloads the checker found for it
    (several where an operand is dyn)."""
    positions: dict[int, int] = {}
    for entry in checked.source.get(4, []):
        pair = _fields(entry)
        positions[pair.get(1, [0])[0]] = pair.get(2, [0])[0]
    return sorted(positions[node] for node, found in overloads(checked).items()
                  if found & _ARITHMETIC and node in positions)


def _written_scale(name: str, expr: Fields, types: dict[int, bytes]) -> str | None:
    """Why Kubernetes may answer isInteger(), asInteger() or asApproximateFloat() (`name`)
    otherwise than quickq-guard for the quantity `expr`: made of literals, Kubernetes' own
    quantity (webhook.engine.cel.library.go_quantity) answers otherwise (`quantity('1000m')`,
    whose digits are 1000 at milli there, no integer); or a sum or difference with a term of
    another scale (a quantity read from the object, where `500m` is canonical). A quantity
    read from the object alone is in the canonical form (the API server's, and offline
    webhook.engine.normalize's), where integers are integers."""
    known = _kubernetes_quantity(expr, types)
    call = _fields(expr[_CALL][0]) if _CALL in expr else {}
    called = bytes(call.get(2, [b""])[0]).decode()
    literal = _literal_quantity(call) if called == "quantity" else None
    shown = f"quantity('{literal}')" if literal is not None else (
        f"a quantity's {called}()" if known is not None
        else f"a quantity's {called}() with a term of another scale")
    if known is not None:
        amount = amount_of(known)
        if name == "asApproximateFloat":
            differs = go_approximate_float(known) != float(amount)
        else:
            ours = amount == amount.to_integral_value() and -(2**63) <= amount < 2**63
            differs = go_is_integer(known) != ours
        return shown if differs else None
    if name != "asApproximateFloat" and called in ("add", "sub") and \
            _may_be_scaled(expr, types):
        return shown
    return None


def _kubernetes_quantity(expr: Fields, types: dict[int, bytes]) -> GoQuantity | None:
    """The quantity Kubernetes keeps for an expression made of literals (`quantity('1.0')`,
    its add() and sub() of such or of ints), else None."""
    call = _fields(expr[_CALL][0]) if _CALL in expr else {}
    name = bytes(call.get(2, [b""])[0]).decode()
    if name == "quantity":
        literal = _literal_quantity(call)
        return None if literal is None else go_quantity(literal)
    arguments = [_fields(child) for child in call.get(3, [])]
    if name not in ("add", "sub") or not call.get(1) or len(arguments) != 1:
        return None
    left = _kubernetes_quantity(_fields(call[1][0]), types)
    term = arguments[0]
    right: GoQuantity | None
    if types.get(term.get(_EXPR_ID, [0])[0]) == _INT_TYPE:
        constant = _fields(term[3][0]) if 3 in term else {}
        right = None if 3 not in constant else (_signed(constant[3][0]), 0, False)
    else:
        right = _kubernetes_quantity(term, types)
    if left is None or right is None:
        return None
    if name == "sub":
        right = (-right[0], right[1], right[2])
    return go_add(left, right)


def _signed(varint: int) -> int:
    """An int64 read from a protobuf varint."""
    return varint - 2**64 if varint >= 2**63 else varint


def _may_be_scaled(expr: Fields, types: dict[int, bytes]) -> bool:
    call = _fields(expr[_CALL][0]) if _CALL in expr else {}
    name = bytes(call.get(2, [b""])[0]).decode()
    if name in ("add", "sub"):
        terms = [_fields(child) for child in call.get(1, []) + call.get(3, [])]
        return any(_may_be_scaled(term, types) for term in terms
                   if types.get(term.get(_EXPR_ID, [0])[0]) != _INT_TYPE)
    if name == "quantity":
        literal = _literal_quantity(call)
        known = None if literal is None else go_quantity(literal)
        return known is None or known[1] < 0 or known[2]
    return False  # a variable: its expression is not seen here


def _literal_quantity(call: Fields) -> str | None:
    arguments = [_fields(child) for child in call.get(3, [])]
    if arguments and 3 in arguments[0]:
        constant = _fields(arguments[0][3][0])
        if 6 in constant:  # string_value
            return bytes(constant[6][0]).decode()
    return None


_INT_TYPE = bytes([0x18, 0x02])  # Type{primitive: INT64}


def _has_optional(type_: bytes) -> bool:
    kind, value = _kind(type_)
    if kind == _ABSTRACT:
        fields = _fields(value)
        return fields.get(1) == [b"optional_type"] or any(
            _has_optional(p) for p in fields.get(2, []))
    if kind in (6, 7):
        return any(_has_optional(part) for parts in _fields(value).values() for part in parts)
    return False


def _mixed(items: list[tuple[Fields, bool]], types: dict[int, bytes]
           ) -> tuple[int, str] | None:
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
            return node, (f"expected type '{_name(first)}' but found '{_name(type_)}' "
                          f"{MIXED_HINT}")
    return None


_RECEIVER = "qq__r"  # the name a guard binds a list's receiver to (webhook.engine.cel.go)
_LIST_INDEXES = ("qq__indexOf", "qq__lastIndexOf")


def _ident(expr: Fields) -> str | None:
    """The name an identifier expression reads, else None."""
    if _IDENT not in expr:
        return None
    return bytes(_fields(expr[_IDENT][0]).get(1, [b""])[0]).decode()


def _string_constant(expr: Fields) -> str | None:
    if 3 not in expr:  # const_expr
        return None
    constant = _fields(expr[3][0])
    return bytes(constant[6][0]).decode() if 6 in constant else None


def _typed_as(keys: list[tuple[Fields, bool]]) -> bool:
    """Whether a map literal is a sum's guard, which types its value by the list it sums
    (webhook.engine.cel.go's TYPED_AS): not a literal a policy wrote."""
    return bool(keys) and _string_constant(keys[0][0]) == TYPED_AS


def _walk(expr: Fields) -> Iterator[Fields]:
    """Every expression under `expr`, itself first."""
    yield expr
    for child in _children(expr):
        yield from _walk(_fields(child))


def _children(expr: Fields) -> list[bytes]:
    """The expressions directly under `expr`: a call's target and arguments, a list's
    items, a map's keys and values, a selected operand, a comprehension's parts."""
    children: list[bytes] = []
    if _CALL in expr:
        call = _fields(expr[_CALL][0])
        children = call.get(1, []) + call.get(3, [])
    elif _LIST in expr:
        children = _fields(expr[_LIST][0]).get(1, [])
    elif _STRUCT in expr:
        entries = [_fields(entry) for entry in _fields(expr[_STRUCT][0]).get(2, [])]
        children = [entry[n][0] for entry in entries for n in (3, 4) if n in entry]
    elif _SELECT in expr:
        children = _fields(expr[_SELECT][0]).get(1, [])
    elif _COMPREHENSION in expr:
        comprehension = _fields(expr[_COMPREHENSION][0])
        children = [comprehension[n][0] for n in (2, 4, 5, 6, 7) if n in comprehension]
    return children


_ZEROS = {"list_int_sum": "0", "list_uint_sum": "0u", "list_double_sum": "0.0",
          "list_duration_sum": "duration('0s')"}


def sum_zeros(checked: Checked) -> list[tuple[int, str]]:
    """Where (code points into the text compiled) a sum's guard has the zero of an empty list,
    and the zero Kubernetes gives there, where the checker found the list's items ints, uints,
    doubles or durations (one overload of sum, whose zero Kubernetes gives; otherwise the
    guard's dyn(0)): [(offset, zero written in the guard's width)]."""
    found = overloads(checked)
    positions: dict[int, int] | None = None
    zeros = []
    for expr in _walk(checked.root):
        call = _fields(expr[_CALL][0]) if _CALL in expr else {}
        arguments = [_fields(child) for child in call.get(3, [])]
        if call.get(2) != [b"_?_:_"] or len(arguments) != 3 or _CALL not in arguments[2]:
            continue
        otherwise = _fields(arguments[2][_CALL][0])
        if otherwise.get(2) != [b"sum"] or not otherwise.get(1) or \
                _ident(_fields(otherwise[1][0])) != _RECEIVER:
            continue
        chosen = found.get(arguments[2].get(_EXPR_ID, [0])[0], set()) & set(_ZEROS)
        inner = _fields(arguments[1][_CALL][0]) if _CALL in arguments[1] else {}
        empty = [_fields(child) for child in inner.get(3, [])]
        if len(chosen) != 1 or inner.get(2) != [b"_?_:_"] or len(empty) != 3:
            continue
        if positions is None:
            positions = {}
            for entry in checked.source.get(4, []):
                pair = _fields(entry)
                positions[pair.get(1, [0])[0]] = pair.get(2, [0])[0]
        node = empty[1].get(_EXPR_ID, [0])[0]
        if node in positions:  # the `(` of dyn(0): the checker places a call at its `(`
            zeros.append((positions[node] - len("dyn"),
                          _ZEROS[chosen.pop()].ljust(ZERO_WIDTH)))
    return zeros


_HIDING = (b"dyn", b"_?_:_", b"orValue")  # calls whose value may hold their argument's


def _hidden_optionals(checked: Checked) -> Iterator[tuple[int, str]]:
    """Where an optional is put into a value whose type does not show it (`dyn(x.?a)`, a
    list literal of dyn, a conditional joined to dyn): from there it may reach format(), which
    hands its arguments to Python, and the runtime crashes converting an optional in a list
    or map (the optional's own type is refused where format() is given it: `_problems`)."""
    types = checked.types
    for expr in _walk(checked.root):
        node = expr.get(_EXPR_ID, [0])[0]
        own = types.get(node)
        if own is None or _has_optional(own):
            continue
        parts: list[tuple[Fields, bool]] = []
        if _CALL in expr:
            call = _fields(expr[_CALL][0])
            if call.get(2, [b""])[0] in _HIDING:
                parts = [(_fields(child), False) for child in call.get(3, [])]
        elif _LIST in expr:
            listed = _fields(expr[_LIST][0])
            optional = _packed(listed, 2)
            parts = [(_fields(item), index in optional)
                     for index, item in enumerate(listed.get(1, []))]
        elif _STRUCT in expr:
            entries = [_fields(entry) for entry in _fields(expr[_STRUCT][0]).get(2, [])]
            parts = [(_one(entry, 4), bool(entry.get(5, [0])[0])) for entry in entries]
        for part, unwrap in parts:
            held = types.get(part.get(_EXPR_ID, [0])[0])
            if held is not None and _has_optional(_unwrapped(held) if unwrap else held):
                yield part.get(_EXPR_ID, [0])[0], (
                    f"an optional ({_name(held)}) is held here in a value whose type does not "
                    "show it, and the expression calls format(): quickq-guard's runtime "
                    "cannot hand such a value to format() (it fails converting an optional "
                    "in a list or map); take its value first (.value(), .orValue(...))")
                return
