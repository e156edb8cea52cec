"""`'...'.format([...])` as Kubernetes' CEL writes it, where the runtime writes it otherwise.

Found by tests/cluster/test_cel_vs_vap.py on the real API server: Kubernetes prints `%f`
and `%e` through a locale printer (`1,234.500000`; `1.234500`, a multiplication sign, `10`
and the exponent in superscript digits; the precision of `%e` ignored), a list or map under
`%s` as `[1, "a"]` and `{"a":1, "b":2}` (strings quoted as Go quotes them, doubles as `%f`,
keys in the order of their text, durations as `duration("1s")`), and a duration as the
shortest seconds (`1.5s`, where the runtime writes `1.500s`). Errors are Kubernetes' own
words.

A timestamp or duration reaches Python only to the microsecond, so the guard of `format`
(webhook.engine.cel.go) hands each one in the argument list, and in a list or map there, as
the runtime's own text, which keeps the nanoseconds, in a marked map (`{"qq__timestamp":
"...Z"}`); a map argument comes as `{"qq__map": [[key, value], ...]}` and a map in a list or
map argument as `{"qq__plain": map}`, so that no map of the policy's is taken for a mark.
format_string reads them back. One nested deeper is written to the microsecond.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

_VERBS = "sdfexXob"
_TIMES = "\u00d7"  # the multiplication sign of `1.234500×10⁰³`  # noqa: RUF003
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
            "\v": "\\v", "\\": "\\\\", '"': '\\"'}


TIMESTAMP_MARK = "qq__timestamp"
DURATION_MARK = "qq__duration"
MAP_MARK = "qq__map"
PLAIN_MARK = "qq__plain"


@dataclass(frozen=True, slots=True)
class Moment:
    """A timestamp or duration handed over as text (see the module's docstring)."""

    type: str  # google.protobuf.Timestamp or google.protobuf.Duration
    text: str  # as Kubernetes writes it: 2024-01-01T00:00:00.123456789Z, 1.5s


def _unmarked(value: Any, argument: bool) -> Any:
    """An `argument` of format, or an item or value in one, with its marks read back."""
    if isinstance(value, list):
        return [_unmarked(item, False) for item in value] if argument else value
    if not isinstance(value, dict) or len(value) != 1:
        return value
    [(key, inner)] = value.items()
    if key == TIMESTAMP_MARK:
        return Moment("google.protobuf.Timestamp", go_timestamp(inner))
    if key == DURATION_MARK:
        return Moment("google.protobuf.Duration", go_seconds(inner))
    if key == MAP_MARK and argument:
        return {entry[0]: _unmarked(entry[1], False) for entry in inner}
    return inner if key == PLAIN_MARK else value


def format_string(template: str, arguments: list[Any]) -> str:
    """cel-go's strings.format: `%s %d %f %e %x %X %o %b`, `%.Nf`, `%%`."""
    arguments = [_unmarked(argument, True) for argument in arguments]
    out: list[str] = []
    index = used = 0
    while index < len(template):
        char = template[index]
        index += 1
        if char != "%":
            out.append(char)
            continue
        if index >= len(template):
            raise ValueError("unexpected end of string")
        if template[index] == "%":
            out.append("%")
            index += 1
            continue
        precision = None
        if template[index] == ".":
            end = index + 1
            while end < len(template) and template[end].isdigit():
                end += 1
            precision, index = int(template[index + 1:end] or 0), end
            if index >= len(template):
                raise ValueError("unexpected end of string")
        verb = template[index]
        index += 1
        if verb not in _VERBS:
            raise ValueError("could not parse formatting clause: unrecognized formatting "
                             f'clause "{verb}"')
        if used >= len(arguments):
            raise ValueError(f"index {used} out of range")
        out.append(_clause(verb, precision, arguments[used]))
        used += 1
    if used < len(arguments):
        raise ValueError(f"too many arguments supplied to string.format (formatting string "
                         f"has {used} formatting clauses, got {len(arguments)} arguments)")
    return "".join(out)


def _clause(verb: str, precision: int | None, value: Any) -> str:
    if verb == "s":
        return _text(value)
    if verb == "d":
        if not _integer(value):
            raise ValueError("decimal clause can only be used on integers, was given "
                             f"{_type(value)}")
        return str(value)
    if verb in "fe":
        if not isinstance(value, float):
            clause = "fixed-point" if verb == "f" else "scientific"
            raise ValueError(f"{clause} clause can only be used on doubles, was given "
                             f"{_type(value)}")
        return _fixed(value, 6 if precision is None else precision) if verb == "f" \
            else _scientific(value)
    if verb in "xX":
        if _integer(value):
            text = format(value, "x")
        elif isinstance(value, str | bytes | bytearray):
            text = (value.encode() if isinstance(value, str) else bytes(value)).hex()
        else:
            raise ValueError("only integers, byte buffers, and strings can be formatted as "
                             f"hex, was given {_type(value)}")
        return text.upper() if verb == "X" else text
    if verb == "o":
        if not _integer(value):
            raise ValueError(f"octal clause can only be used on integers, was given "
                             f"{_type(value)}")
        return format(value, "o")
    if isinstance(value, bool):  # b
        return "1" if value else "0"
    if not _integer(value):
        raise ValueError(f"only integers and bools can be formatted as binary, was given "
                         f"{_type(value)}")
    return format(value, "b")


def _integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _type(value: Any) -> str:
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, Moment):
        return value.type
    for kind, name in ((int, "int"), (float, "double"), (str, "string"),
                       (bytes | bytearray, "bytes"), (list, "list"), (dict, "map"),
                       (timedelta, "google.protobuf.Duration"),
                       (datetime, "google.protobuf.Timestamp")):
        if isinstance(value, kind):
            return name
    return "null_type" if value is None else "type"


def _fixed(value: float, precision: int) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "∞" if value > 0 else "-∞"
    return format(value, f",.{precision}f")


def _scientific(value: float) -> str:
    if not math.isfinite(value):  # right-aligned in six places, as Kubernetes writes them
        return ("NaN" if math.isnan(value) else "∞" if value > 0 else "-∞").rjust(6)
    mantissa, exponent = format(value, ".6e").split("e")
    power = int(exponent)
    exponent = f"{'-' if power < 0 else ''}{abs(power):02d}".translate(_SUPERSCRIPT)
    return f"{mantissa}{_TIMES}10{exponent}"


def _text(value: Any) -> str:
    """`%s` of a value, as the API server writes it."""
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, float):
        return go_float(value)
    if isinstance(value, list | dict):
        return _nested(value)
    return _plain(value)


def _plain(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, timedelta):
        return go_duration(value)
    if isinstance(value, datetime):
        return _timestamp(value)
    if isinstance(value, Moment):
        return value.text
    name = getattr(value, "name", None)
    return str(name()).lower() if callable(name) else str(value)


def _nested(value: Any) -> str:
    """A value inside a list or map: strings and bytes quoted, doubles as %f."""
    if isinstance(value, list):
        return "[" + ", ".join(_nested(item) for item in value) + "]"
    if isinstance(value, dict):
        entries = sorted((_nested(key), _nested(item)) for key, item in value.items())
        return "{" + ", ".join(f"{key}:{item}" for key, item in entries) + "}"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, bytes | bytearray):
        return "b" + _quote(bytes(value).decode("utf-8", "surrogateescape"))
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return '"' + ("NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf") + '"'
        return format(value, ".6f")
    if isinstance(value, timedelta):
        return f'duration("{go_duration(value)}")'
    if isinstance(value, datetime):
        return f'timestamp("{_timestamp(value)}")'
    if isinstance(value, Moment):
        kind = "timestamp" if value.type == "google.protobuf.Timestamp" else "duration"
        return f'{kind}("{value.text}")'
    return _plain(value)


def _quote(text: str) -> str:
    """Go's strconv.Quote: printable characters as they are, the others escaped."""
    out = ['"']
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 0xDC80 <= code <= 0xDCFF:  # a byte that is not UTF-8 (surrogateescape)
            out.append(f"\\x{code - 0xDC00:02x}")
        elif char.isprintable():
            out.append(char)
        elif code < 0x80:
            out.append(f"\\x{code:02x}")
        elif code < 0x10000:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return "".join(out) + '"'


def go_duration(value: timedelta) -> str:
    """Go's shortest seconds: `1.5s`, `0.0015s`, `-5400s`, `0s`."""
    micros = (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds
    seconds = (Decimal(micros) / 1_000_000).normalize()
    text = format(seconds, "f")
    return ("0" if text in ("0", "-0") else text) + "s"


def go_seconds(text: str) -> str:
    """The runtime's text of a duration (`3661.500s`, `0.000000001s`) as Go's shortest
    seconds (`3661.5s`)."""
    if "." not in text:
        return text
    return text[:-1].rstrip("0").rstrip(".") + "s"


def go_timestamp(text: str) -> str:
    """The runtime's text of a timestamp (`2024-01-01T00:00:00.500Z`: three, six or nine
    digits of fraction) as Go's RFC 3339 with nanoseconds writes it (`...00.5Z`)."""
    if "." not in text or not text.endswith("Z"):
        return text
    whole, fraction = text[:-1].split(".", 1)
    fraction = fraction.rstrip("0")
    return f"{whole}.{fraction}Z" if fraction else f"{whole}Z"


def _timestamp(value: datetime) -> str:
    """RFC 3339 with the fraction's trailing zeros dropped, in UTC."""
    fraction = f".{value.microsecond:06d}".rstrip("0") if value.microsecond else ""
    return (f"{value.year:04d}-{value.month:02d}-{value.day:02d}T{value.hour:02d}:"
            f"{value.minute:02d}:{value.second:02d}{fraction}Z")


def go_float(value: float) -> str:
    """strconv.FormatFloat(value, 'g', -1, 64): the shortest digits, in exponent form when
    the exponent is below -4 or 6 and above (`1e+20`, `1.23456789e+08`, `0.0001`)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    sign, digit_tuple, exponent = Decimal(repr(value)).normalize().as_tuple()
    digits = "".join(map(str, digit_tuple))
    assert isinstance(exponent, int)
    point = len(digits) + exponent  # value = 0.digits * 10**point
    minus = "-" if sign else ""
    if point - 1 < -4 or point - 1 >= 6:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        power = point - 1
        return f"{minus}{mantissa}e{'-' if power < 0 else '+'}{abs(power):02d}"
    if point <= 0:
        return f"{minus}0.{'0' * -point}{digits}"
    if point >= len(digits):
        return minus + digits + "0" * (point - len(digits))
    return f"{minus}{digits[:point]}.{digits[point:]}"
