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
- `string(duration('1.5s'))`: cel-go writes the seconds as a double's shortest digits (1.5s),
  the runtime three, six or nine decimals (1.500s); a timestamp as Go's RFC 3339 with
  nanoseconds in the offset it was written with (`...00.5+01:00`), the runtime in UTC with
  three, six or nine decimals. `string(double('Infinity'))`: +Inf there, inf here.
- `'%e'.format([1234.5])`, `'%s'.format([[1, 'a']])`, `'%f'.format([1234.5])`: Kubernetes'
  format differs in many ways (webhook.engine.cel.formatting), which serves `format`.

The runtime hands a timestamp or duration to Python only to the microsecond, so no Python
function reads one from that (webhook.engine.cel.moments): the guards hand a value over with
the runtime's own text of each timestamp and duration in it beside it (`_texts`), a value
Python returns is picked by CEL from the list it came from (min, max, slice) or is text the
runtime reads (a sum of uints or durations), and the equality of a list's indexOf is CEL's
own. The lists library follows Kubernetes' overloads, chosen by a list of dyn's first item.
timestamp() of a string also records the offset it was written with, and timestamp arithmetic
(`carried`, a second pass where the checker found any) gives its result its operand's.

The guard is a function of ours around the argument (`int(qq__int(x))`: it checks a string),
in place of the method (`qq__substring`), or CEL around the call that binds its receiver and
arguments (`cel.bind(qq__r, list, ...)`) and computes the list's case exactly, the original
call left in the other branch, where it is type-checked as written. Only the compiled text is
changed; an expression that does not compile is compiled as written again, so that its
errors name what the policy wrote.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any

from cel_expr_python import cel as _cel

from webhook.engine.cel.formatting import format_string, go_float
from webhook.engine.cel.library import (
    COMPARABLE,
    SUMMABLE,
    Declarations,
    regex_matches,
    slice_indexes,
)
from webhook.engine.cel.moments import (
    DURATION_TYPE,
    TIMESTAMP_TYPE,
    Duration,
    Timestamp,
    attached,
    carry,
    duration_of,
    offset_written,
    record,
    refuse_lossy,
    timestamp_of,
    with_offset,
)
from webhook.engine.linear import Pattern

T = _cel.Type

# conversion -> the argument types it takes besides a string (type-checked, never run: only
# a string reaches the guard)
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


def _written(runtime: str, text: str) -> str:
    """timestamp() of `text`, which the runtime read as `runtime` (its string() of it): the
    offset the text was written with is recorded for the instant (webhook.engine.cel.moments),
    and the runtime's text handed back for it to read again."""
    record(timestamp_of(runtime), offset_written(text))
    return runtime


def _carried(result: str, operand: str) -> str:
    """A timestamp computed from the timestamp `operand` (the runtime's texts of both): it
    keeps the operand's offset, as in cel-go."""
    carry(timestamp_of(result), timestamp_of(operand))
    return result


_INT = Pattern(r"[+-]?[0-9]+")
_UINT = Pattern(r"[0-9]+")
_UNDERSCORES = Pattern(r"[+-]?[0-9]+(?:_[0-9]+)*(?:\.[0-9]+(?:_[0-9]+)*)?")
_FINITE = Pattern(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
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


def _index_of(where: str, what: str, offset: int = 0) -> int:
    """cel-go's strings extension: code points from `offset` (past the end: -1). A list's
    indexOf is CEL's own equality, in its guard (`_LIST_CALLS`)."""
    if what == "":
        return offset
    if offset < 0:
        raise ValueError(f"index out of range: {offset}")
    return where.find(what, offset) if offset < len(where) else -1


def _last_index_of(where: str, what: str, offset: int | None = None) -> int:
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


def _milliseconds(value: timedelta | datetime) -> int:
    """cel-go: a duration's whole length in milliseconds (toward zero), a timestamp's
    milliseconds within its second (UTC). Only where the receiver could not be bound (see
    `guarded`); exact all the same, the runtime's microseconds being cut toward zero too."""
    if isinstance(value, timedelta):
        micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
        return int(micros / 1000) if micros >= 0 else -int(-micros / 1000)
    return value.microsecond // 1000


# --- the lists library on exact values (see `_LIST_CALLS`) ------------------------------------
# As Kubernetes runs it: the overload is chosen by the list's type, or, for a list of dyn, by
# its first item's (an empty one takes the first overload: int); min, max and isSorted pass
# over two items that do not compare (an int and a string, a NaN) as cel-go's loop does, and
# fail on an item of no comparable type; sum adds every item to the zero of the overload's
# type, and fails where two do not add (an int and a uint) or overflow.

Typed = tuple[str, Any]  # (the item's CEL type, its value)


def _typed(pairs: list[list[Any]]) -> list[Typed]:
    """A list handed over by its guard (`_ITEMS`) as [item, text] pairs: an item of a type the
    lists library compares or adds, else null (a list, a map or an optional is never handed to
    Python: the runtime cannot convert an optional in one), and the runtime's text of a
    timestamp or duration, `_UINT_ITEM` for a uint (Python sees an int), 'o' for another type,
    or ''."""
    found = []
    for item, text in pairs:
        exact = attached(item, text)
        found.append(("other" if text == _OTHER_ITEM else _type_of(exact, text), exact))
    return found


def _type_of(value: Any, text: str) -> str:
    if text == _UINT_ITEM:
        return "uint"
    for kind, name in ((bool, "bool"), (int, "int"), (float, "double"), (str, "string"),
                       (bytes | bytearray, "bytes"), (Timestamp, "timestamp"),
                       (Duration, "duration")):
        if isinstance(value, kind):
            return name
    return "other"  # null, a list, a map, a type: no overload takes it


def _compare(a: Typed, b: Typed) -> int | None:
    """cel-go's Compare: numbers across int, uint and double (an int and a double as two
    doubles, as cel-go compares them), otherwise two of one type; None where cel-go's is an
    error (two types that do not compare, a NaN)."""
    (kind_a, x), (kind_b, y) = a, b
    numbers = ("int", "uint", "double")
    if kind_a in numbers and kind_b in numbers:
        if "double" in (kind_a, kind_b):
            x, y = float(x), float(y)
            if math.isnan(x) or math.isnan(y):
                return None
        return int((x > y) - (x < y))
    if kind_a != kind_b:
        return None
    return int((x > y) - (x < y))


def _no_overload(items: list[Typed], accepted: tuple[str, ...]) -> None:
    """Raise where no overload takes the list: its first item's type is not `accepted`."""
    if items and items[0][0] not in accepted:
        raise ValueError("no such overload")


def _sorted(pairs: list[list[Any]]) -> bool:
    typed = _typed(pairs)
    _no_overload(typed, COMPARABLE)
    for index, item in enumerate(typed):
        if item[0] not in COMPARABLE:
            raise ValueError("no such overload")
        if index and _compare(typed[index - 1], item) == 1:
            return False
    return True


def _least(pairs: list[list[Any]]) -> int:
    """The index of the first smallest item (cel-go keeps the first of equal ones)."""
    return _pick(_typed(pairs), 1, "min")


def _greatest(pairs: list[list[Any]]) -> int:
    return _pick(_typed(pairs), -1, "max")


def _pick(items: list[Typed], replace_when: int, name: str) -> int:
    if not items:
        raise ValueError(f"{name} called on empty list")
    _no_overload(items, COMPARABLE)
    best = 0
    for index, item in enumerate(items):
        if item[0] not in COMPARABLE:
            raise ValueError("no such overload")
        if index and _compare(items[best], item) == replace_when:
            best = index
    return best


def _total(pairs: list[list[Any]]) -> Any:
    """Kubernetes' sum() of a non-empty list (the guard gives an empty one its overload's
    zero): an int or a double as it is, a uint, duration or timestamp as [its type's letter,
    text the runtime reads] (`_SUMMED`)."""
    typed = _typed(pairs)
    _no_overload(typed, SUMMABLE)
    kind = typed[0][0]
    total: Typed = (kind, Duration(0) if kind == "duration" else 0.0 if kind == "double" else 0)
    for item in typed:
        total = _add(total, item)
    kind, value = total
    if kind == "uint":
        return ["u", str(value)]
    if kind == "duration":
        return ["d", value.runtime_text()]
    if kind == "timestamp":
        return ["t", Timestamp(value.nanos).text()]
    return value


def _add(a: Typed, b: Typed) -> Typed:
    """cel-go's Add of two values, as sum() adds them; raises ValueError where it fails."""
    (kind_a, x), (kind_b, y) = a, b
    if kind_a == kind_b and kind_a in ("int", "uint", "double"):
        total = x + y
        if kind_a == "int" and not -_INT64 <= total < _INT64:
            raise ValueError("integer overflow")
        if kind_a == "uint" and not 0 <= total < 2 * _INT64:
            raise ValueError("unsigned integer overflow")
        return kind_a, total
    if kind_a == kind_b == "duration":
        total = x.nanos + y.nanos
        if not -_INT64 <= total < _INT64:
            raise ValueError("integer overflow")
        return "duration", Duration(total)
    if {kind_a, kind_b} == {"duration", "timestamp"}:
        moment, length = (x, y) if kind_a == "timestamp" else (y, x)
        result = Timestamp(moment.nanos + length.nanos)
        carry(result, moment)  # it keeps its timestamp's offset, as in cel-go
        return "timestamp", result
    raise ValueError("no such overload")


_INT64 = 2**63
_UINT_ITEM, _OTHER_ITEM = "u", "o"


def _first(found: list[bool]) -> int:
    return next((index for index, hit in enumerate(found) if hit), -1)


def _last(found: list[bool]) -> int:
    return next((index for index in range(len(found) - 1, -1, -1) if found[index]), -1)


def _span(size: int, start: int, end: int) -> list[int]:
    """The indexes of list.slice(start, end), for CEL to pick the items with."""
    return list(slice_indexes(size, start, end))


def _format(template: str, handed: list[Any]) -> str:
    """format(), its arguments handed over with the texts of their timestamps and durations
    (see `_FORMAT_ARGUMENTS`)."""
    arguments, texts = handed
    exact = attached(arguments, texts)
    refuse_lossy(exact, "format()", f", nested more than {FORMAT_LEVELS} lists or maps deep "
                 "in an argument (format each first, with string())")
    assert isinstance(exact, list)
    return format_string(template, exact)


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
    declared.append(_cel.FunctionDecl("qq__written", [
        _cel.Overload("qq__written_string", T.STRING, [T.STRING, T.STRING], impl=_written)]))
    declared.append(_cel.FunctionDecl("qq__carried", [
        _cel.Overload("qq__carried_string", T.STRING, [T.STRING, T.STRING], impl=_carried)]))
    declared.append(_cel.FunctionDecl("qq__substring", [
        _cel.Overload("qq__substring_int", T.STRING, [T.STRING, T.INT], is_member=True,
                      impl=_substring),
        _cel.Overload("qq__substring_int_int", T.STRING, [T.STRING, T.INT, T.INT],
                      is_member=True, impl=_substring)]))
    lists = T.List(T.DYN)
    declared.append(_cel.FunctionDecl(f"{GUARD_PREFIX}matches", [
        _cel.Overload(f"{GUARD_PREFIX}string_matches", T.BOOL, [T.STRING, T.STRING],
                      is_member=True, impl=regex_matches),
        _cel.Overload(f"{GUARD_PREFIX}matches_string", T.BOOL, [T.STRING, T.STRING],
                      impl=regex_matches)]))
    declared.append(_cel.FunctionDecl("qq__format", [
        _cel.Overload("qq__string_format", T.STRING, [T.STRING, lists], is_member=True,
                      impl=_format),
        # only type-checked, never run (see _FORMAT_ARGUMENTS): an optional argument is
        # refused
        _cel.Overload("qq__format_checked", T.STRING, [T.DYN], impl=_unused)]))
    exact: list[tuple[str, Any, Callable[..., Any]]] = [
        ("qq__sorted", T.BOOL, _sorted), ("qq__least", T.INT, _least),
        ("qq__greatest", T.INT, _greatest), ("qq__total", T.DYN, _total)]
    for name, result, serve in exact:  # a list as [item, text] pairs (_ITEMS)
        declared.append(_cel.FunctionDecl(name, [
            _cel.Overload(f"{name}_list", result, [lists], impl=serve)]))
    for name, pick in (("qq__first", _first), ("qq__last", _last)):  # (a list of bools)
        declared.append(_cel.FunctionDecl(name, [
            _cel.Overload(f"{name}_list", T.INT, [lists], impl=pick)]))
    declared.append(_cel.FunctionDecl("qq__span", [
        _cel.Overload("qq__span_ints", T.List(T.INT), [T.INT, T.INT, T.INT], impl=_span)]))
    # string()'s guard type-checks each branch for the argument's type; only a double's runs
    declared.append(_cel.FunctionDecl("qq__float", [
        _cel.Overload("qq__float_double", T.STRING, [T.DOUBLE], impl=go_float),
        *(_cel.Overload(f"qq__float_{kind.name().lower()}", T.STRING, [kind], impl=_unused)
          for kind in (T.INT, T.UINT, T.BOOL, T.BYTES, T.STRING, T.TIMESTAMP, T.DURATION))]))
    declared.append(_cel.FunctionDecl("qq__seconds", [
        _cel.Overload("qq__seconds_string", T.STRING, [T.STRING],
                      impl=lambda text: duration_of(text).text())]))
    declared.append(_cel.FunctionDecl("qq__rfc3339", [
        _cel.Overload("qq__rfc3339_string", T.STRING, [T.STRING],
                      impl=lambda text: with_offset(timestamp_of(text)).text())]))
    declared.append(_cel.FunctionDecl("qq__ms", [
        _cel.Overload("qq__ms_string", T.INT, [T.STRING],
                      impl=lambda text: duration_of(text).milliseconds())]))
    declared.append(_cel.FunctionDecl("qq__getMilliseconds", [
        _cel.Overload("qq__duration_milliseconds", T.INT, [T.DURATION], is_member=True,
                      impl=_milliseconds),
        _cel.Overload("qq__timestamp_milliseconds", T.INT, [T.TIMESTAMP], is_member=True,
                      impl=_milliseconds)]))
    return declared


GUARDS = _declarations()
# Declared in the runtime's environment config (webhook.engine.cel.library.config), for the
# type parameter of a list's indexOf and lastIndexOf, Kubernetes' `list(A).indexOf(A)`:
# `[1].indexOf('a')` does not compile there. A list's is only type-checked (its guard runs
# CEL's equality); a string's is the strings extension's, served here.
GUARD_CONFIG: Declarations = {
    f"{GUARD_PREFIX}{name}": [
        (f"{GUARD_PREFIX}string_{name}", f"string.{GUARD_PREFIX}{name}(string)", "int", impl),
        (f"{GUARD_PREFIX}string_{name}_offset", f"string.{GUARD_PREFIX}{name}(string, int)",
         "int", impl),
        (f"{GUARD_PREFIX}list_{name}", f"list<~A>.{GUARD_PREFIX}{name}(~A)", "int", None)]
    for name, impl in (("indexOf", _index_of), ("lastIndexOf", _last_index_of))}


_S = GUARD_PREFIX + "s"  # string()'s argument, bound once
_STRING = (f"), type({_S}) == {DURATION_TYPE} ? {GUARD_PREFIX}seconds(string({_S})) "
           f": type({_S}) == {TIMESTAMP_TYPE} ? {GUARD_PREFIX}rfc3339(string({_S})) "
           f": type({_S}) == double ? {GUARD_PREFIX}float({_S}) : string({_S}))")
# A conversion's argument, bound once: only a string goes through the guard, so that no
# timestamp or duration crosses into Python (timestamp() and duration() of one are the
# runtime's own). timestamp() of a string or an int records the offset it was written with.
_T = GUARD_PREFIX + "t"
_CONVERTED = {name: (f"), type({_T}) == string ? {name}({GUARD_PREFIX}{name}({_T})) "
                     f": {name}({_T}))") for name in _CONVERSIONS}
_CONVERTED["timestamp"] = (
    f"), type({_T}) == string ? timestamp(qq__written(string(timestamp("
    f"{GUARD_PREFIX}timestamp({_T}))), string({_T}))) "
    f": type({_T}) == int ? timestamp(qq__written(string(timestamp({_T})), 'Z')) "
    f": timestamp({_T}))")


def _texts(value: str, levels: int, depth: int = 0) -> str:
    """CEL giving, for the value of the name `value` (dyn), the runtime's text of it when it is a
    timestamp or duration (every nanosecond), '' when it is anything else, and, down to
    `levels` lists or maps, a list of the texts of a list's items or of [key, texts] pairs of a
    map's values: what webhook.engine.cel.moments.attached puts in place of the runtime's
    microseconds. Written shallow, for the runtime's parser stops at 32 levels of nesting."""
    leaf = (f"type({value}) == {TIMESTAMP_TYPE} || type({value}) == {DURATION_TYPE} "
            f"? string({value}) : dyn('')")
    if levels == 0:
        return leaf
    item, key, entry = (f"{GUARD_PREFIX}{letter}{depth}" for letter in "xky")
    return (f"type({value}) == list ? {value}.map({item}, {_texts(item, levels - 1, depth + 1)})"
            f" : type({value}) == map ? {value}.map({key}, cel.bind({entry}, {value}[{key}], "
            f"[{key}, {_texts(entry, levels - 1, depth + 1)}])) : {leaf}")


# format's arguments, handed over as [arguments, texts] (see _texts): looked into two lists or
# maps deep below each argument, which is as deep as the runtime's limit on nesting leaves
# room for; checked.py refuses at load an argument whose type holds a timestamp or duration
# deeper. The other branch is never run: it is there so that an optional argument is refused.
FORMAT_LEVELS = 2
FORMAT_ARGUMENTS = _FA = GUARD_PREFIX + "fa"
_FORMAT_ARGUMENTS = (
    f"(cel.bind({_FA}, ((", (
        f") + []), true ? [dyn({_FA}), dyn(dyn({_FA}).map({GUARD_PREFIX}a, "
        f"{_texts(GUARD_PREFIX + 'a', FORMAT_LEVELS)}))] "
        f": [dyn({_FA}.map({GUARD_PREFIX}o, {GUARD_PREFIX}format({GUARD_PREFIX}o)))]))"))

# optional.unwrap(l), which the runtime's optional library (version 2) has not, as CEL; and
# optional.ofNonZeroValue(x), whose zero timestamp is Go's (year 1), not the Unix epoch.
_O, _Z = GUARD_PREFIX + "o", GUARD_PREFIX + "z"
_UNWRAPPED = f".filter({_O}, {_O}.hasValue()).map({_O}, {_O}.value())"
_OPTIONAL_CALLS = {
    "unwrap": ("", _UNWRAPPED),
    "ofNonZeroValue": (f"cel.bind({_Z}, ", (
        f", type({_Z}) == {TIMESTAMP_TYPE} ? (dyn({_Z}) == timestamp('0001-01-01T00:00:00Z') "
        f"? optional.none() : optional.of({_Z})) : optional.ofNonZeroValue({_Z}))")),
}

# Methods whose receiver is bound (`cel.bind(qq__r, receiver, ...)`, its arguments as qq__a0,
# qq__a1): (method, arguments) -> CEL of R, the receiver, and A0, A1. A list goes to Python
# with the texts of its timestamps and durations beside it, and Python's answer is an index
# CEL picks the value with (so the value keeps its type, to the checker too); the call as
# written stays in the other branch, where it is type-checked (and run, for what is not a
# list).
_R, _A0, _A1 = (GUARD_PREFIX + name for name in ("r", "a0", "a1"))
_E = GUARD_PREFIX + "e"
_SERVED = ", ".join(f"dyn({kind})" for kind in ("int", "uint", "double", "bool", "string",
                                                 "bytes", TIMESTAMP_TYPE, DURATION_TYPE))
_ITEMS = (f"dyn({_R}).map({_E}, type({_E}) in [{_SERVED}] ? [dyn({_E}), dyn("
          f"type({_E}) == {TIMESTAMP_TYPE} || type({_E}) == {DURATION_TYPE} ? string({_E}) "
          f": type({_E}) == uint ? '{_UINT_ITEM}' : '')] : [dyn(null), dyn('{_OTHER_ITEM}')])")
# A sum's value, typed as the list's items are (`{'qq__typed': R, 'qq__summed': [v]}` is a map
# of lists of R's items to the checker: `checked` lets this literal mix types), and the zero of
# an empty list: `dyn(0)` (Kubernetes' first overload, int, takes an empty list of dyn) until the
# checker shows the list's items are ints, uints, doubles or durations
# (webhook.engine.cel.checked.sum_zeros then writes their zero, in the same width).
TYPED_AS = GUARD_PREFIX + "typed"
ZERO_WIDTH = len("duration('0s')")
_SUMMED = (f"cel.bind(qq__n, qq__total({_ITEMS}), type(qq__n) == list ? (qq__n[0] == 'u' "
           f"? dyn(uint(qq__n[1])) : qq__n[0] == 'd' ? dyn(duration(qq__n[1])) "
           f": dyn(timestamp(qq__n[1]))) : qq__n)")
_LIST_CALLS = {
    ("isSorted", 0): f"type({_R}) == list ? qq__sorted({_ITEMS}) : {_R}.isSorted()",
    ("min", 0): f"type({_R}) == list ? {_R}[qq__least({_ITEMS})] : {_R}.min()",
    ("max", 0): f"type({_R}) == list ? {_R}[qq__greatest({_ITEMS})] : {_R}.max()",
    ("sum", 0): (f"type({_R}) == list ? (size({_R}) == 0 ? ({'dyn(0)'.ljust(ZERO_WIDTH)}) "
                 f": {{'{TYPED_AS}': {_R}, 'qq__summed': [{_SUMMED}]}}['qq__summed'][0]) "
                 f": {_R}.sum()"),
    ("indexOf", 1): (f"type({_R}) == list ? qq__first(dyn({_R}).map({_E}, {_E} == {_A0})) "
                     f": {_R}.qq__indexOf({_A0})"),
    ("lastIndexOf", 1): (f"type({_R}) == list ? qq__last(dyn({_R}).map({_E}, {_E} == {_A0}))"
                         f" : {_R}.qq__lastIndexOf({_A0})"),
    ("slice", 2): (f"type({_R}) == list ? qq__span(size({_R}), {_A0}, {_A1}).map(qq__i, "
                   f"{_R}[qq__i]) : {_R}.slice({_A0}, {_A1})"),
    ("unwrapOpt", 0): f"{_R}{_UNWRAPPED}",
    # Go's strings.Split and SplitN give no item for an empty string split by an empty one
    ("split", 1): f"{_R} == '' && {_A0} == '' ? [] : {_R}.split({_A0})",
    ("split", 2): f"{_R} == '' && {_A0} == '' ? [] : {_R}.split({_A0}, {_A1})",
    ("getMilliseconds", 0): (f"type({_R}) == {DURATION_TYPE} ? qq__ms(string({_R})) "
                             f": {_R}.getMilliseconds()"),
}
_BOUND_METHODS = {method for method, _ in _LIST_CALLS}


def guarded(pieces: list[tuple[str, str]], strings: bool = True) -> str:
    """The expression (its tokens from webhook.engine.cel.lex) with every call the runtime
    gets wrong guarded; the text unchanged when there is none. `strings`: guard what needs
    cel.bind too (string(), the conversions' arguments, receivers, format), which only
    quickq-guard's own environment has; without it the methods are only renamed."""
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
        opening = significant[position + 1]
        if value in _OPTIONAL_CALLS and strings and position >= 2 and before == "." \
                and pieces[significant[position - 2]] == ("name", "optional") \
                and (position < 3 or pieces[significant[position - 3]][1] != "."):
            closing = _closing(pieces, opening)
            if closing is not None:
                out[significant[position - 2]] = out[significant[position - 1]] = ""
                out[index], end = _OPTIONAL_CALLS[value]
                out[closing] = ")" + end
        elif before != "." and value == "string" and strings:
            closing = _closing(pieces, opening)
            if closing is not None:
                out[index] = f"cel.bind({_S}, "
                out[closing] = _STRING
        elif before != "." and value in _CONVERTED and strings:
            closing = _closing(pieces, opening)
            if closing is not None:
                out[index] = f"cel.bind({_T}, "
                out[closing] = _CONVERTED[value]
        elif before != "." and value in _CONVERSIONS:
            closing = _closing(pieces, opening)
            if closing is not None:
                out[opening] = f"({GUARD_PREFIX}{value}("
                out[closing] = "))"
        elif before == "." and value == "format" and strings:
            out[index] = _METHODS[value]
            closing = _closing(pieces, opening)
            if closing is not None:
                out[opening], out[closing] = _FORMAT_ARGUMENTS
        elif before == "." and value in _BOUND_METHODS and strings \
                and _bound_receiver(pieces, significant, position, out):
            continue
        elif before == "." and value in _METHODS:
            out[index] = _METHODS[value]
        elif value == "matches" and not _literal_pattern(pieces, opening, before == "."):
            out[index] = f"{GUARD_PREFIX}matches"
        elif before == "." and value in _NO_ARGUMENT_METHODS and position + 2 < len(
                significant) and pieces[significant[position + 2]][1] == ")":
            out[index] = _NO_ARGUMENT_METHODS[value]
    return "".join(out)


def _literal_pattern(pieces: list[tuple[str, str]], opening: int, member: bool) -> bool:
    """Whether the pattern of the matches() call opening at `opening` is a string literal
    (checked when the policy loads: webhook.engine.cel.checked), or the call cannot be told."""
    closing = _closing(pieces, opening)
    if closing is None:
        return True
    bounds = [opening, *_top_level_commas(pieces, opening, closing), closing]
    argument = 0 if member else 1
    if argument + 1 >= len(bounds):
        return True
    tokens = [(kind, value) for kind, value in pieces[bounds[argument] + 1:bounds[argument + 1]]
              if kind != "space"]
    return len(tokens) == 1 and tokens[0][0] == "string" and \
        "b" not in tokens[0][1][:2].lower()


def _bound_receiver(pieces: list[tuple[str, str]], significant: list[int], position: int,
                    out: list[str]) -> bool:
    """Write the method call whose name is at significant[position] as `cel.bind(qq__r,
    receiver, cel.bind(qq__a0, argument, ...))` with its _LIST_CALLS case, into `out`;
    False (nothing written) when its receiver or arguments cannot be told from the tokens."""
    opening = significant[position + 1]
    closing = _closing(pieces, opening)
    start = _receiver_start(pieces, significant, position - 2)
    if closing is None or start is None:
        return False
    commas = _top_level_commas(pieces, opening, closing)
    empty = all(kind == "space" for kind, _ in pieces[opening + 1:closing])
    count = 0 if empty else len(commas) + 1
    call = _LIST_CALLS.get((pieces[significant[position]][1], count))
    if call is None:
        return False
    dot = significant[position - 1]
    out[start] = f"cel.bind({_R}, " + out[start]
    out[dot] = ", "
    out[significant[position]] = ""
    if count == 0:
        out[opening], out[closing] = "", f"{call})"
        return True
    out[opening] = f"cel.bind({_A0}, "
    for number, comma in enumerate(commas, 1):
        out[comma] = f", cel.bind({GUARD_PREFIX}a{number}, "
    out[closing] = f", {call}" + ")" * count + ")"
    return True


# Timestamp arithmetic `a + b` (or `-`) as `cel.bind(qq__u, (a), cel.bind(qq__v, (b), ...))`:
# the result, when a timestamp, keeps the offset of the operand that is one (moments.carry).
_U, _V, _W = (GUARD_PREFIX + name for name in ("u", "v", "w"))
_CARRY = (f"), cel.bind({_W}, {_U} {{operator}} {_V}, type({_W}) == {TIMESTAMP_TYPE} ? "
          f"timestamp(qq__carried(string({_W}), string(type({_U}) == {TIMESTAMP_TYPE} "
          f"? dyn({_U}) : dyn({_V})))) : {_W})))")


def carried(pieces: list[tuple[str, str]], operators: list[int]) -> str | None:
    """The compiled text (its tokens) with the operators at these code-point offsets (the
    checker's timestamp arithmetic, webhook.engine.cel.checked.time_arithmetic) written so
    that a timestamp they compute keeps its operand's offset; None when an operand cannot be
    told from the tokens."""
    out = [value for _, value in pieces]
    significant = [i for i, (kind, _) in enumerate(pieces) if kind != "space"]
    position_of = {index: position for position, index in enumerate(significant)}
    at: dict[int, int] = {}
    offset = 0
    for index, (_, value) in enumerate(pieces):
        at[offset] = index
        offset += len(value)
    for operator_offset in sorted(operators):  # left to right: an outer one wraps an inner
        found = at.get(operator_offset)
        if found is None or pieces[found] not in (("other", "+"), ("other", "-")):
            return None
        index = found
        position = position_of[index]
        start = _left_start(pieces, significant, position)
        end = _right_end(pieces, significant, position)
        if start is None or end is None:
            return None
        out[significant[start]] = f"cel.bind({_U}, (" + out[significant[start]]
        out[index] = f"), cel.bind({_V}, ("
        out[significant[end]] += _CARRY.format(operator=pieces[index][1])
    return "".join(out)


def _ends_operand(piece: tuple[str, str]) -> bool:
    kind, value = piece
    return (kind == "name" and value not in _WORDS) or kind == "string" \
        or value in (")", "]", "}") or value.isdigit()


def _left_start(pieces: list[tuple[str, str]], significant: list[int],
                operator: int) -> int | None:
    """Where the left operand of the additive operator at significant[operator] starts: back
    over operands joined by + - * / % (it binds to the left), and unary - and !."""
    last = operator - 1
    while True:
        start = _operand_start(pieces, significant, last)
        if start is None:
            return None
        while start > 0 and pieces[significant[start - 1]][1] in ("-", "!") and not (
                start > 1 and _ends_operand(pieces[significant[start - 2]])):
            start -= 1  # unary
        before = start - 1
        if before > 0 and pieces[significant[before]][0] == "other" \
                and pieces[significant[before]][1] in "+-*/%" \
                and _ends_operand(pieces[significant[before - 1]]):
            last = before - 1
            continue
        return start


def _right_end(pieces: list[tuple[str, str]], significant: list[int],
               operator: int) -> int | None:
    """Where the right operand of the additive operator at significant[operator] ends:
    operands joined by * / % (which bind tighter), each maybe after unary - and !."""
    first = operator + 1
    while True:
        while first < len(significant) and pieces[significant[first]][1] in ("-", "!"):
            first += 1
        end = _operand_end(pieces, significant, first)
        if end is None:
            return None
        after = end + 1
        if after < len(significant) and pieces[significant[after]][1] in ("*", "/", "%"):
            first = after + 1
            continue
        return end


def _operand_end(pieces: list[tuple[str, str]], significant: list[int],
                 first: int) -> int | None:
    """Where the postfix expression starting at significant[first] ends."""
    if first >= len(significant):
        return None
    kind, value = pieces[significant[first]]
    following = pieces[significant[first + 1]][1] if first + 1 < len(significant) else ""
    end: int | None
    if kind == "string":
        end = first
    elif kind == "name" and value not in _WORDS:
        end = _closing_position(pieces, significant, first + 1) \
            if following in ("(", "{") else first
    elif kind == "other" and value in ("(", "[", "{"):
        end = _closing_position(pieces, significant, first)
    elif value.isdigit():
        end = _number_end(pieces, significant, first)
    else:
        return None
    while end is not None and end + 1 < len(significant):
        after = pieces[significant[end + 1]][1]
        if after == ".":
            name = end + 2
            if name < len(significant) and pieces[significant[name]][1] == "?":
                name += 1
            if name >= len(significant) or pieces[significant[name]][0] != "name":
                return None
            end = name
            if name + 1 < len(significant) and pieces[significant[name + 1]][1] == "(":
                end = _closing_position(pieces, significant, name + 1)
        elif after == "[":
            end = _closing_position(pieces, significant, end + 1)
        else:
            break
    return end


def _number_end(pieces: list[tuple[str, str]], significant: list[int], first: int) -> int:
    """A number's last token: digits, `.`, and letters (1.5, 1e3, 2u), with no space."""
    index = significant[first]
    while index + 1 < len(pieces) and pieces[index + 1][0] != "space" and (
            pieces[index + 1][1].isdigit() or pieces[index + 1][1] == "."
            or pieces[index + 1][0] == "name"):
        index += 1
    return significant.index(index)


def _closing_position(pieces: list[tuple[str, str]], significant: list[int],
                      first: int) -> int | None:
    """The position in `significant` of the bracket that closes the one at `first`."""
    return _matching(pieces, significant, range(first, len(significant)), "([{", ")]}")


# Names that end no operand (the operator `in`, and CEL's reserved words).
_WORDS = frozenset({"in", "as", "break", "const", "continue", "else", "for", "function", "if",
                    "import", "let", "loop", "package", "namespace", "return", "var", "void",
                    "while"})


def _receiver_start(pieces: list[tuple[str, str]], significant: list[int],
                    last: int) -> int | None:
    """The index in `pieces` of the first token of the operand that ends at
    significant[last]: the receiver of a method call (`a.b[0].f(x)`, `(x + y)`, `[1, 2]`,
    `'s'`), or None when it cannot be told (a number, an operator)."""
    try:
        found = _operand_start(pieces, significant, last)
    except RecursionError:
        return None
    return None if found is None else significant[found]


def _operand_start(pieces: list[tuple[str, str]], significant: list[int],
                   last: int) -> int | None:
    """The position in `significant` where the postfix expression ending at `last` starts."""
    if last < 0:
        return None
    kind, value = pieces[significant[last]]
    if kind == "string":
        return last
    if kind == "name":
        if value in _WORDS or (significant[last] > 0 and pieces[significant[last] - 1][1]
                               .isdigit()):
            return None  # an operator, or a number's suffix (1u, 1e3)
        return _selected_start(pieces, significant, last)
    if value not in (")", "]", "}"):
        return None
    first = _opening_position(pieces, significant, last)
    if first is None:
        return None
    opened = pieces[significant[first]][1]
    before = pieces[significant[first - 1]] if first > 0 else ("other", "")
    named = before[0] == "name" and before[1] not in _WORDS
    if opened == "(" and named:  # a call: f(x), x.f(x)
        return _selected_start(pieces, significant, first - 1)
    if opened == "[" and (named or before[0] == "string" or before[1] in (")", "]", "}")):
        return _operand_start(pieces, significant, first - 1)  # an index: x[0], x[?0]
    if opened == "{" and named:  # a message: Type{...}
        return _selected_start(pieces, significant, first - 1)
    return first  # parentheses, a list or a map


def _selected_start(pieces: list[tuple[str, str]], significant: list[int],
                    name: int) -> int | None:
    """Where a name that may be selected from something (`x.name`, `x.?name`) starts."""
    dot = name - 1
    if dot >= 1 and pieces[significant[dot]][1] == "?":
        dot -= 1
    if dot >= 0 and pieces[significant[dot]][1] == ".":
        return _operand_start(pieces, significant, dot - 1)
    return name


def _opening_position(pieces: list[tuple[str, str]], significant: list[int],
                      last: int) -> int | None:
    """The position in `significant` of the bracket that opens the one at `last`."""
    return _matching(pieces, significant, range(last, -1, -1), ")]}", "([{")


def _matching(pieces: list[tuple[str, str]], significant: Sequence[int], positions: range,
              opens: str, closes: str) -> int | None:
    """The first of `positions` where the brackets `opens` met so far are all closed."""
    depth = 0
    for position in positions:
        kind, value = pieces[significant[position]]
        if kind != "other":
            continue
        if value in opens:
            depth += 1
        elif value in closes:
            depth -= 1
            if depth == 0:
                return position
    return None


def _top_level_commas(pieces: list[tuple[str, str]], opening: int, closing: int) -> list[int]:
    commas = []
    depth = 0
    for index in range(opening + 1, closing):
        kind, value = pieces[index]
        if kind != "other":
            continue
        if value in "([{":
            depth += 1
        elif value in ")]}":
            depth -= 1
        elif value == "," and depth == 0:
            commas.append(index)
    return commas


def _closing(pieces: list[tuple[str, str]], opening: int) -> int | None:
    """The index of the `)` that closes the `(` at `opening`, if it closes."""
    every = range(len(pieces))
    index = _matching(pieces, every, every[opening:], "([{", ")]}")
    return index if index is not None and pieces[index][1] == ")" else None
