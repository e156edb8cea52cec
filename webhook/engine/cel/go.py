"""Where the CEL runtime (cel-expr-python, C++) and Kubernetes' CEL (cel-go) disagree on a
function, the expression is compiled with the call guarded so it gives what Kubernetes gives.

Each was found by tests/cluster/test_cel_vs_vap.py, which evaluates a table of expressions
here and in a real API server's ValidatingAdmissionPolicy:

- `int(' 4')`, `uint('+4')`, `double(' 1')`, `double('1e400')`: the runtime trims spaces,
  takes a sign for uint and makes an overflow infinite; Go's strconv refuses all four, and
  reads `double('1_000')`, which the runtime refuses.
- `duration('500µs')`: Go's time.ParseDuration takes µs (and μs) for us; the runtime does
  not.
- `timestamp('2024-01-01t00:00:00z')`: Go's RFC 3339 wants T and Z upper-case.
- `'qq-'.substring(0, 3)`: the runtime refuses an end equal to the size (off by one).
- `duration('1500ms').getMilliseconds()`: cel-go gives the whole duration in milliseconds
  (1500), the runtime only the part below a second (500).
- `'abc'.indexOf('a', 4)`: cel-go gives -1 for an offset past the end, the runtime an error;
  and Kubernetes' lists library has `[1, 2].indexOf(2)` and `.lastIndexOf()`, names the
  runtime's strings extension owns: ours serve both.
- `string(duration('1.5s'))`: cel-go writes the shortest seconds (1.5s), the runtime three,
  six or nine decimals (1.500s); the guard drops the zeros of the runtime's own text, so a
  duration of nanoseconds keeps them. So for a timestamp (`...00.5Z`, the runtime
  `...00.500Z`). `string(double('Infinity'))`: +Inf there, inf here.
- A timestamp or duration passed through Python loses its nanoseconds (Python's datetime
  keeps microseconds): `timestamp()` and `duration()` of one are the runtime's own, and
  `format`'s arguments hand them over as text (webhook.engine.cel.formatting).
- `'%e'.format([1234.5])`, `'%s'.format([[1, 'a']])`, `'%f'.format([1234.5])`: Kubernetes'
  format differs in many ways (webhook.engine.cel.formatting), which serves `format`.

The guard is a function of ours around the argument (`int(qq__int(x))`: it checks a string
and passes every other value through) or in place of the method (`qq__substring`). Only the
compiled text is changed; an expression that does not compile is compiled as written again,
so that its errors name what the policy wrote.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

from cel_expr_python import cel as _cel

from webhook.engine.cel.formatting import (
    DURATION_MARK,
    MAP_MARK,
    PLAIN_MARK,
    TIMESTAMP_MARK,
    format_string,
    go_float,
    go_seconds,
    go_timestamp,
)

T = _cel.Type

# conversion -> the argument types it takes besides a string (passed through unchanged)
_CONVERSIONS = {
    "int": (T.INT, T.UINT, T.DOUBLE, T.TIMESTAMP),
    "uint": (T.INT, T.UINT, T.DOUBLE),
    "double": (T.INT, T.UINT, T.DOUBLE),
    "duration": (T.DURATION,),
    "timestamp": (T.INT, T.TIMESTAMP),
}
_METHODS = {"substring": "qq__substring", "indexOf": "qq__indexOf",
            "lastIndexOf": "qq__lastIndexOf", "format": "qq__format"}
_NO_ARGUMENT_METHODS = {"getMilliseconds": "qq__getMilliseconds"}
GUARD_PREFIX = "qq__"


def _go_int(text: str) -> str:
    """strconv.ParseInt(text, 10, 64)'s syntax: an optional sign and decimal digits."""
    if not _INT.fullmatch(text):
        raise ValueError("type conversion error from 'string' to 'int'")
    return text


def _go_uint(text: str) -> str:
    if not _UINT.fullmatch(text):
        raise ValueError("type conversion error from 'string' to 'uint'")
    return text


def _go_double(text: str) -> str:
    """strconv.ParseFloat: no spaces around the number, underscores between digits
    (`1_000`), and one too large is an error, not an infinity."""
    if "_" in text:
        if not _UNDERSCORES.fullmatch(text):
            raise ValueError("type conversion error from 'string' to 'double'")
        text = text.replace("_", "")
    if text != text.strip() or (_FINITE.fullmatch(text) and _overflows(text)):
        raise ValueError("type conversion error from 'string' to 'double'")
    return text


def _overflows(text: str) -> bool:
    try:
        return float(text) in (float("inf"), float("-inf"))
    except ValueError:
        return False


def _go_duration(text: str) -> str:
    """time.ParseDuration's microseconds: `µs` (U+00B5) and `μs` (U+03BC) are `us`."""
    return text.replace("µs", "us").replace("μs", "us")


def _go_timestamp(text: str) -> str:
    """time.Parse(time.RFC3339, ...): the separator T and the zone Z are upper-case."""
    if "t" in text or "z" in text:
        raise ValueError("type conversion error from 'string' to 'google.protobuf.Timestamp'")
    return text


_INT = re.compile(r"[+-]?[0-9]+")
_UINT = re.compile(r"[0-9]+")
_UNDERSCORES = re.compile(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.[0-9]+(?:_[0-9]+)*)?")
_FINITE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_STRING_GUARDS = {"int": _go_int, "uint": _go_uint, "double": _go_double,
                  "duration": _go_duration, "timestamp": _go_timestamp}


def _substring(text: str, start: int, end: int | None = None) -> str:
    """cel-go's strings extension: code points, `end` up to and including the size."""
    size = len(text)
    if end is None:
        end = size
    if start < 0 or start > size:
        raise ValueError(f"index out of range: {start}")
    if end < 0 or end > size:
        raise ValueError(f"index out of range: {end}")
    if start > end:
        raise ValueError(f"invalid substring range. start: {start}, end: {end}")
    return text[start:end]


def _index_of(where: str | list[Any], what: Any, offset: int = 0) -> int:
    """cel-go: a string's code points from `offset` (past the end: -1), or a list's first
    equal item."""
    if isinstance(where, list):
        return next((i for i, item in enumerate(where) if _equal(item, what)), -1)
    if what == "":
        return offset
    if offset < 0:
        raise ValueError(f"index out of range: {offset}")
    return where.find(what, offset) if offset < len(where) else -1


def _last_index_of(where: str | list[Any], what: Any, offset: int | None = None) -> int:
    if isinstance(where, list):
        return next((i for i in range(len(where) - 1, -1, -1) if _equal(where[i], what)), -1)
    if offset is None:
        if what == "":
            return len(where)
        if not where:
            return -1  # nothing to search: not an offset out of range
        offset = len(where) - 1
    if what == "":
        return offset
    if offset < 0:
        raise ValueError(f"index out of range: {offset}")
    if offset >= len(where):
        return -1
    return where.rfind(what, 0, offset + len(what))


def _equal(a: Any, b: Any) -> bool:
    """CEL's equality on plain values: a bool is no number."""
    return (isinstance(a, bool) == isinstance(b, bool)) and a == b


def _milliseconds(value: timedelta | datetime) -> int:
    """cel-go: a duration's whole length in milliseconds (toward zero), a timestamp's
    milliseconds within its second (UTC)."""
    if isinstance(value, timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return int(micros / 1000) if micros >= 0 else -int(-micros / 1000)
    return value.microsecond // 1000


def _unused(value: Any) -> str:
    raise ValueError("no such overload")


def _passed(value: Any) -> Any:
    return value


def _declarations() -> list[Any]:
    declared = []
    for name, others in _CONVERSIONS.items():
        overloads = [_cel.Overload(f"{GUARD_PREFIX}{name}_string", T.STRING, [T.STRING],
                                   impl=_STRING_GUARDS[name])]
        overloads += [_cel.Overload(f"{GUARD_PREFIX}{name}_{kind.name().lower()}", kind, [kind],
                                    impl=_passed) for kind in others]
        declared.append(_cel.FunctionDecl(GUARD_PREFIX + name, overloads))
    declared.append(_cel.FunctionDecl("qq__substring", [
        _cel.Overload("qq__substring_int", T.STRING, [T.STRING, T.INT], is_member=True,
                      impl=_substring),
        _cel.Overload("qq__substring_int_int", T.STRING, [T.STRING, T.INT, T.INT],
                      is_member=True, impl=_substring)]))
    lists = T.List(T.DYN)
    # One overload per type a list item may have: the runtime does not call a Python
    # function through a `dyn` parameter.
    items = {"int": T.INT, "uint": T.UINT, "double": T.DOUBLE, "string": T.STRING,
             "bool": T.BOOL, "bytes": T.BYTES, "null": T.NULL, "list": lists,
             "map": T.Map(T.DYN, T.DYN), "duration": T.DURATION, "timestamp": T.TIMESTAMP}
    for name, impl in (("indexOf", _index_of), ("lastIndexOf", _last_index_of)):
        declared.append(_cel.FunctionDecl(f"{GUARD_PREFIX}{name}", [
            _cel.Overload(f"{GUARD_PREFIX}string_{name}", T.INT, [T.STRING, T.STRING],
                          is_member=True, impl=impl),
            _cel.Overload(f"{GUARD_PREFIX}string_{name}_offset", T.INT,
                          [T.STRING, T.STRING, T.INT], is_member=True, impl=impl),
            *(_cel.Overload(f"{GUARD_PREFIX}list_{name}_{kind}", T.INT, [lists, item],
                            is_member=True, impl=impl) for kind, item in items.items())]))
    declared.append(_cel.FunctionDecl("qq__format", [
        _cel.Overload("qq__string_format", T.STRING, [T.STRING, lists], is_member=True,
                      impl=format_string),
        # only type-checked, never run (see _ARGUMENT): an optional argument is refused
        _cel.Overload("qq__format_checked", T.STRING, [T.DYN], impl=_unused)]))
    # string()'s guard type-checks each branch for the argument's type; only a double's runs
    declared.append(_cel.FunctionDecl("qq__float", [
        _cel.Overload("qq__float_double", T.STRING, [T.DOUBLE], impl=go_float),
        *(_cel.Overload(f"qq__float_{kind.name().lower()}", T.STRING, [kind], impl=_unused)
          for kind in (T.INT, T.UINT, T.BOOL, T.BYTES, T.STRING, T.TIMESTAMP, T.DURATION))]))
    declared.append(_cel.FunctionDecl("qq__seconds", [
        _cel.Overload("qq__seconds_string", T.STRING, [T.STRING], impl=go_seconds)]))
    declared.append(_cel.FunctionDecl("qq__rfc3339", [
        _cel.Overload("qq__rfc3339_string", T.STRING, [T.STRING], impl=go_timestamp)]))
    declared.append(_cel.FunctionDecl("qq__getMilliseconds", [
        _cel.Overload("qq__duration_milliseconds", T.INT, [T.DURATION], is_member=True,
                      impl=_milliseconds),
        _cel.Overload("qq__timestamp_milliseconds", T.INT, [T.TIMESTAMP], is_member=True,
                      impl=_milliseconds)]))
    return declared


GUARDS = _declarations()


_S = GUARD_PREFIX + "s"  # string()'s argument, bound once
_TIMESTAMP, _DURATION = "google.protobuf.Timestamp", "google.protobuf.Duration"
_STRING = (f"), type({_S}) == {_DURATION} ? {GUARD_PREFIX}seconds(string({_S})) "
           f": type({_S}) == {_TIMESTAMP} ? {GUARD_PREFIX}rfc3339(string({_S})) "
           f": type({_S}) == double ? {GUARD_PREFIX}float({_S}) : string({_S}))")
# timestamp() and duration() of a value of their own type: the runtime's own conversion, so
# that its nanoseconds never pass through Python (only a string is guarded)
_T = GUARD_PREFIX + "t"
_SAME_TYPE = {name: (f"), type({_T}) == string ? {name}({GUARD_PREFIX}{name}({_T})) "
                     f": {name}({_T}))") for name in ("timestamp", "duration")}


def _marked(value: str, otherwise: str) -> str:
    """CEL that hands a timestamp or duration `value` to Python as the runtime's text (see
    webhook.engine.cel.formatting), else gives `otherwise`."""
    return (f"type({value}) == {_TIMESTAMP} ? dyn({{'{TIMESTAMP_MARK}': string(dyn({value}))}}) "
            f": type({value}) == {_DURATION} ? dyn({{'{DURATION_MARK}': string(dyn({value}))}}) "
            f": {otherwise}")


def _inner(value: str) -> str:
    """An item of a list, or a value of a map, handed to format: marked, a map wrapped."""
    return _marked(value, f"type({value}) == map ? dyn({{'{PLAIN_MARK}': {value}}}) "
                          f": dyn({value})")


# format's arguments, each marked, and each item of a list or value of a map among them;
# `qq__format(v)` is never run: it is there so that an optional argument is refused at load
_V, _W, _K = (GUARD_PREFIX + name for name in ("v", "w", "k"))
_ARGUMENT = _marked(_V, (
    f"type({_V}) == list ? dyn(dyn({_V}).map({_W}, {_inner(_W)})) "
    f": type({_V}) == map ? dyn({{'{MAP_MARK}': dyn({_V}).map({_K}, "
    f"[dyn({_K}), {_inner(f'dyn({_V})[{_K}]')}])}}) "
    f": true ? dyn({_V}) : dyn({GUARD_PREFIX}format({_V}))"))
_FORMAT_ARGUMENTS = ("(((", f") + []).map({_V}, {_ARGUMENT}))")


def guarded(pieces: list[tuple[str, str]], strings: bool = True) -> str:
    """The expression (its tokens from webhook.engine.cel.lex) with every call the runtime
    gets wrong guarded; the text unchanged when there is none. `strings`: guard string()
    too (with cel.bind, which only quickq-guard's own environment has)."""
    out = [value for _, value in pieces]
    significant = [i for i, (kind, _) in enumerate(pieces) if kind != "space"]
    for position, index in enumerate(significant):
        kind, value = pieces[index]
        if kind != "name" or position + 1 >= len(significant):
            continue
        after = pieces[significant[position + 1]][1]
        before = pieces[significant[position - 1]][1] if position else ""
        if after != "(":
            continue
        if before != "." and value == "string" and strings:
            opening = significant[position + 1]
            closing = _closing(pieces, opening)
            if closing is not None:
                out[index] = f"cel.bind({_S}, "
                out[closing] = _STRING
        elif before != "." and value in _SAME_TYPE and strings:
            opening = significant[position + 1]
            closing = _closing(pieces, opening)
            if closing is not None:
                out[index] = f"cel.bind({_T}, "
                out[closing] = _SAME_TYPE[value]
        elif before != "." and value in _CONVERSIONS:
            opening = significant[position + 1]
            closing = _closing(pieces, opening)
            if closing is not None:
                out[opening] = f"({GUARD_PREFIX}{value}("
                out[closing] = "))"
        elif before == "." and value == "format" and strings:
            out[index] = _METHODS[value]
            opening = significant[position + 1]
            closing = _closing(pieces, opening)
            if closing is not None:
                out[opening], out[closing] = _FORMAT_ARGUMENTS
        elif before == "." and value in _METHODS:
            out[index] = _METHODS[value]
        elif before == "." and value in _NO_ARGUMENT_METHODS and position + 2 < len(
                significant) and pieces[significant[position + 2]][1] == ")":
            out[index] = _NO_ARGUMENT_METHODS[value]
    return "".join(out)


def _closing(pieces: list[tuple[str, str]], opening: int) -> int | None:
    """The index of the `)` that closes the `(` at `opening`, if it closes."""
    depth = 0
    for index in range(opening, len(pieces)):
        kind, value = pieces[index]
        if kind != "other":
            continue
        if value in "([{":
            depth += 1
        elif value in ")]}":
            depth -= 1
            if depth == 0:
                return index if value == ")" else None
    return None
