"""Timestamps and durations exactly as Kubernetes' CEL has them, on the Python side.

The runtime hands a timestamp or duration to Python only to the microsecond (a datetime, a
timedelta), and keeps a timestamp in UTC. Kubernetes' CEL (cel-go, Go's time package) keeps
every nanosecond, and keeps the offset a timestamp was written with: `timestamp('2024-01-01T
00:00:00.5+01:00')` stays at +01:00, and string(), format's %s and a JSON value write it so.

So no timestamp or duration is read in Python from the runtime's datetime or timedelta: the
guards (webhook.engine.cel.go) hand a value over with, beside it, the runtime's own text of
each timestamp and duration in it (which has every nanosecond), and `attached` puts them
together as Timestamp and Duration values; a value Python gives back is picked by CEL (an
index into the list it came from) or is text the runtime reads. A value the engine returns is
read from the runtime's own Value (`exported_value`).

The offset is kept beside the runtime, per evaluation (`begin`, `end`): the guard of
timestamp() records the offset of each instant it reads from text or an int (`record`), the
guard of timestamp arithmetic gives its result the offset of its timestamp operand (`carry`),
as cel-go does, and writing a timestamp looks its instant up (`offset_of`). What that cannot
tell is refused, never guessed: one instant with two offsets in one evaluation.
"""

from __future__ import annotations

import math
import re
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

TIMESTAMP_TYPE, DURATION_TYPE = "google.protobuf.Timestamp", "google.protobuf.Duration"

_SECOND = 1_000_000_000
_DAY = 86_400
_EPOCH = date(1970, 1, 1).toordinal()
_INT64 = 2**63


@dataclass(frozen=True, slots=True, order=True)
class Timestamp:
    """An instant to the nanosecond; `offset` (minutes east of UTC) is how it is written,
    not what it is: timestamps are equal and ordered by their instant, as in cel-go."""

    nanos: int  # since 1970-01-01T00:00:00Z
    offset: int = field(default=0, compare=False)

    def text(self) -> str:
        """Go's time.RFC3339Nano: the fraction's trailing zeros dropped, Z for UTC."""
        local = self.nanos + self.offset * 60 * _SECOND
        seconds, fraction = divmod(local, _SECOND)
        days, second = divmod(seconds, _DAY)
        day = date.fromordinal(_EPOCH + days)
        hour, rest = divmod(second, 3600)
        minute, second = divmod(rest, 60)
        decimals = f".{fraction:09d}".rstrip("0") if fraction else ""
        if self.offset:
            hours, minutes = divmod(abs(self.offset), 60)
            zone = f"{'-' if self.offset < 0 else '+'}{hours:02d}:{minutes:02d}"
        else:
            zone = "Z"
        return (f"{day.year:04d}-{day.month:02d}-{day.day:02d}T{hour:02d}:{minute:02d}:"
                f"{second:02d}{decimals}{zone}")


@dataclass(frozen=True, slots=True, order=True)
class Duration:
    """A duration to the nanosecond."""

    nanos: int

    def text(self) -> str:
        """cel-go's: strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s", the seconds as a
        float64 (whole seconds plus the nanoseconds over 1e9), so the shortest digits of
        that double: 1.5s, 0.000000001s, and 123456789.12345679s for 123456789.123456789s."""
        whole = abs(self.nanos) // _SECOND * (-1 if self.nanos < 0 else 1)  # Go truncates
        seconds = float(whole) + float(self.nanos - whole * _SECOND) / 1e9
        return fixed(seconds) + "s"

    def milliseconds(self) -> int:
        """Go's Duration.Milliseconds(): the whole length, toward zero."""
        return abs(self.nanos) // 1_000_000 * (-1 if self.nanos < 0 else 1)

    def runtime_text(self) -> str:
        """Seconds with nine decimals, which the runtime's duration() reads exactly."""
        if not -_INT64 <= self.nanos < _INT64:
            raise ValueError("integer overflow")
        sign = "-" if self.nanos < 0 else ""
        seconds, fraction = divmod(abs(self.nanos), _SECOND)
        return f"{sign}{seconds}.{fraction:09d}s"


def fixed(value: float) -> str:
    """strconv.FormatFloat(value, 'f', -1, 64) of a finite double: its shortest digits,
    never with an exponent."""
    if value == 0:
        return "-0" if math.copysign(1, value) < 0 else "0"
    text = format(Decimal(repr(value)).normalize(), "f")
    return text


# --- the runtime's texts --------------------------------------------------------------------

_RUNTIME_TIMESTAMP = re.compile(
    r"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z")
_RUNTIME_DURATION = re.compile(r"(-?)(\d+)(?:\.(\d{1,9}))?s")
_DEBUG_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|h|m|s)")
_UNITS = {"h": 3600 * _SECOND, "m": 60 * _SECOND, "s": _SECOND, "ms": 1_000_000,
          "us": 1000, "ns": 1}


def timestamp_of(text: str) -> Timestamp:
    """The runtime's string() of a timestamp (`2024-01-01T00:00:00.123456789Z`: UTC, with no,
    three, six or nine decimals) as the instant it is. Raises ValueError."""
    found = _RUNTIME_TIMESTAMP.fullmatch(text)
    if found is None:
        raise ValueError(f"not a timestamp as the runtime writes one: {text!r}")
    year, month, day, hour, minute, second = (int(part) for part in found.groups()[:6])
    days = date(year, month, day).toordinal() - _EPOCH
    seconds = days * _DAY + hour * 3600 + minute * 60 + second
    return Timestamp(seconds * _SECOND + int((found.group(7) or "").ljust(9, "0")))


def duration_of(text: str) -> Duration:
    """The runtime's string() of a duration (`3661.500s`, `-0.000000001s`, `0s`), or its
    debug text (`1h1m1.5s`, `-500ms`, `0`), as the duration it is. Raises ValueError."""
    found = _RUNTIME_DURATION.fullmatch(text)
    if found is not None:
        sign, whole, fraction = found.groups()
        nanos = int(whole) * _SECOND + int((fraction or "").ljust(9, "0"))
        return Duration(-nanos if sign else nanos)
    negative = text.startswith("-")
    body = text[1:] if negative else text
    if body == "0":
        return Duration(0)
    parts = _DEBUG_DURATION.findall(body)
    if not parts or "".join(number + unit for number, unit in parts) != body:
        raise ValueError(f"not a duration as the runtime writes one: {text!r}")
    nanos = sum(int(Decimal(number) * _UNITS[unit]) for number, unit in parts)
    return Duration(-nanos if negative else nanos)


def offset_written(text: str) -> int:
    """The offset, in minutes east of UTC, that an RFC 3339 text was written with (`Z`,
    `+01:00`); what the runtime reads it as is another matter."""
    if text[-6:-5] in ("+", "-") and text[-3:-2] == ":":
        minutes = int(text[-5:-3]) * 60 + int(text[-2:])
        return -minutes if text[-6] == "-" else minutes
    return 0


# --- the offsets of one evaluation ----------------------------------------------------------

_AMBIGUOUS = -(10**6)  # an instant read with two different offsets
_UNKNOWN = -(10**6) - 1  # an instant computed from one whose offset was not known


@dataclass(slots=True)
class Written:
    """The instants one evaluation made timestamps of, each with its offset."""

    offsets: dict[int, int] = field(default_factory=dict)
    elsewhere: bool = False  # some instant has an offset other than UTC (or an unknown one)


_WRITTEN: ContextVar[Written | None] = ContextVar("qq__written", default=None)


def begin() -> Token[Written | None]:
    """Start the table of one evaluation; `end` it with the token returned."""
    return _WRITTEN.set(Written())


def end(token: Token[Written | None]) -> None:
    _WRITTEN.reset(token)


def record(moment: Timestamp, offset: int) -> None:
    """A timestamp of `moment` was made, with `offset` (minutes east of UTC)."""
    written = _WRITTEN.get()
    if written is None:
        return
    before = written.offsets.setdefault(moment.nanos, offset)
    if before != offset:
        written.offsets[moment.nanos] = _AMBIGUOUS
    if offset:
        written.elsewhere = True


def carry(result: Timestamp, operand: Timestamp) -> None:
    """`result` was computed from the timestamp `operand` (with a duration): it has its
    offset."""
    written = _WRITTEN.get()
    if written is not None:
        record(result, written.offsets.get(operand.nanos, _UNKNOWN))


def offset_of(moment: Timestamp) -> int:
    """The offset Kubernetes writes `moment` with. Raises ValueError where quickq-guard cannot
    tell it, rather than write another."""
    written = _WRITTEN.get()
    if written is None or not written.elsewhere:
        return 0  # every timestamp of this evaluation is in UTC
    offset = written.offsets.get(moment.nanos, _UNKNOWN)
    if offset == _AMBIGUOUS:
        raise ValueError(
            "the same instant is a timestamp with two offsets here (written so, or computed "
            "from ones written so), and quickq-guard, which keeps timestamps in UTC beside "
            "the offset of each instant, cannot tell which one Kubernetes would write")
    if offset == _UNKNOWN:
        raise ValueError("cannot tell the offset Kubernetes would write this timestamp with")
    return offset


def with_offset(moment: Timestamp) -> Timestamp:
    return Timestamp(moment.nanos, offset_of(moment))


# --- values handed over by the guards, and values the engine returns ------------------------

def attached(value: Any, texts: Any) -> Any:
    """A value the runtime handed to Python (its datetimes and timedeltas to the microsecond)
    with the runtime's text of each timestamp and duration put in their place, exact: `texts`
    has the shape of `value` as deep as the guard looked (a text for a timestamp or duration,
    '' for anything else, a list for a list, [key, texts] pairs for a map); below that the
    value is as it came."""
    if isinstance(texts, str):
        if texts and isinstance(value, datetime):
            return timestamp_of(texts)
        if texts and isinstance(value, timedelta):
            return duration_of(texts)
        return value
    if isinstance(value, list) and isinstance(texts, list) and len(value) == len(texts):
        return [attached(item, text) for item, text in zip(value, texts, strict=True)]
    if isinstance(value, dict) and isinstance(texts, list):
        exact = dict(value)
        for key, text in texts:
            if key in exact:
                exact[key] = attached(exact[key], text)
        return exact
    return value


def lossy(value: Any) -> bool:
    """Whether a datetime or timedelta, the runtime's microseconds, is anywhere in `value`."""
    if isinstance(value, datetime | timedelta):
        return True
    if isinstance(value, list):
        return any(lossy(item) for item in value)
    if isinstance(value, dict):
        return any(lossy(item) for item in value.values())
    return False


def refuse_lossy(value: Any, where: str, why: str = "") -> None:
    """Raise where a timestamp or duration reached Python only to the microsecond, rather
    than answer from it: `where` names the call, `why` says why it came so."""
    if lossy(value):
        raise ValueError(f"{where}: a timestamp or duration reached quickq-guard here only to "
                         f"the microsecond{why}, where Kubernetes keeps its nanoseconds")


def exported_value(value: Any) -> Any:
    """The runtime's value (cel_expr_python's Value) as plain Python data, every timestamp a
    Timestamp with the offset Kubernetes writes it with and every duration a Duration (a
    datetime or timedelta of the runtime's has only microseconds). Raises ValueError."""
    if _holds_optional(value):
        raise ValueError(OPTIONAL)
    plain = value.plain_value()
    if not lossy(plain):
        return plain
    return _exact(value)


OPTIONAL = ("the value holds an optional, which quickq-guard's runtime cannot hand on (it "
            "fails converting one); take its value first (.value(), .orValue(...))")


def _holds_optional(value: Any) -> bool:
    """Whether a list or map holds an optional (the runtime's binding shows one as an ERROR
    it has no Python value for), found without converting it, which may crash."""
    kind = value.type().name()
    if kind == "ERROR":  # no error is held in a list or map: an optional
        return True
    if not kind.startswith(("LIST", "MAP")):
        return False
    inner = value.value()
    return any(_holds_optional(item)
               for item in (inner if isinstance(inner, list) else inner.values()))


def json_value(value: Any) -> Any:
    """A value as a JSON patch holds it, as Kubernetes converts it: a timestamp as its RFC 3339
    text (with its offset), a duration as its seconds (`1.5s`)."""
    if isinstance(value, Timestamp | Duration):
        return value.text()
    if isinstance(value, list):
        return [json_value(item) for item in value]
    if isinstance(value, dict):
        return {key: json_value(item) for key, item in value.items()}
    return value


def _exact(value: Any) -> Any:
    kind = value.type().name()
    if kind == "TIMESTAMP":
        return with_offset(timestamp_of(repr(value)))
    if kind == "DURATION":
        return duration_of(repr(value))
    inner = value.value()
    if isinstance(inner, list):
        return [_exact(item) for item in inner]
    if isinstance(inner, dict):
        return {key: _exact(item) for key, item in inner.items()}
    return value.plain_value()
