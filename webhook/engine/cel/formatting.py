"""`'...'.format([...])` as Kubernetes' CEL writes it, where the runtime writes it otherwise.

Found by tests/cluster/test_cel_vs_vap.py on the real API server: Kubernetes prints `%f`
and `%e` through a locale printer (`1,234.500000`; `1.234500`, a multiplication sign, `10`
and the exponent in superscript digits; the precision of `%e` ignored), a list or map under
`%s` as `[1, "a"]` and `{"a":1, "b":2}` (strings quoted as Go quotes them, doubles as `%f`,
keys in the order of their text, durations as `duration("1s")`), a duration as the shortest
digits of its seconds (`1.5s`, where the runtime writes `1.500s`), and a timestamp in the
offset it was written with. Errors are Kubernetes' own words.

The arguments come exact: the guard of `format` (webhook.engine.cel.go) hands each timestamp
and duration over as the runtime's text, read back as a Timestamp or Duration
(webhook.engine.cel.moments), which is written with the offset Kubernetes keeps for it.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

from webhook.engine.cel.moments import (
    DURATION_TYPE,
    TIMESTAMP_TYPE,
    Duration,
    Timestamp,
    with_offset,
)

_VERBS = "sdfexXob"
_TIMES = "\u00d7"  # the multiplication sign of `1.234500×10⁰³`  # noqa: RUF003
_SUPERSCRIPT = str.maketrans("0123456789-", "⁰¹²³⁴⁵⁶⁷⁸⁹⁻")
_ESCAPES = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t",
            "\v": "\\v", "\\": "\\\\", '"': '\\"'}


def format_string(template: str, arguments: list[Any]) -> str:
    """cel-go's strings.format: `%s %d %f %e %x %X %o %b`, `%.Nf`, `%%`; `arguments` with
    their timestamps and durations exact (Timestamp, Duration)."""
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
        if isinstance(value, str) and value in _FLOAT_WORDS:  # Kubernetes takes these three
            value = float(value)
        if not isinstance(value, float):
            clause = "fixed-point" if verb == "f" else "scientific"
            raise ValueError(f"{clause} clause can only be used on doubles, was given "
                             f"{_type(value)}")
        value = value or 0.0  # its printer writes no sign for -0.0
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
    for kind, name in ((int, "int"), (float, "double"), (str, "string"),
                       (bytes | bytearray, "bytes"), (list, "list"), (dict, "map"),
                       (Duration, DURATION_TYPE), (Timestamp, TIMESTAMP_TYPE)):
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
        return _utf8(value)
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
    if isinstance(value, Duration):
        return value.text()
    if isinstance(value, Timestamp):
        return with_offset(value).text()
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
        return "b" + _quote(_utf8(value))
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return '"' + ("NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf") + '"'
        return format(value, ".6f")
    if isinstance(value, Duration | Timestamp):
        kind = "duration" if isinstance(value, Duration) else "timestamp"
        return f'{kind}("{_plain(value)}")'
    return _plain(value)


_FLOAT_WORDS = ("NaN", "Infinity", "-Infinity")


def _utf8(value: bytes | bytearray) -> str:
    """Bytes as a string, as Kubernetes converts them for `%s`: bytes that are no UTF-8 are an
    error there."""
    try:
        return bytes(value).decode()
    except UnicodeDecodeError:
        raise ValueError("could not convert argument to string: invalid UTF-8 in bytes") \
            from None


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
