"""Timestamps and durations as Kubernetes' CEL (cel-go) has them: every nanosecond wherever a
value meets Python, and a timestamp written in the offset it was read with. The values are
Kubernetes' own (kube-apiserver 1.36.3 and 1.35.4; tests/cluster/test_cel_vs_vap.py holds
the same expressions there)."""

from __future__ import annotations

import datetime
from pathlib import Path
from typing import Any

import pytest
from builders import pod
from builders import policies_in as policies
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook import decode
from webhook import evaluate as judge
from webhook.engine.cel import (
    CelError,
    EvaluationError,
    activation,
    compile_expression,
    evaluate,
    lex,
)
from webhook.engine.cel.go import guarded
from webhook.engine.cel.moments import Duration, Timestamp, duration_of, timestamp_of

DATA = {"nanos": "2024-05-06T07:08:09.123456789Z", "micros": "2024-05-06T07:08:09.123456Z",
        "ts": "2024-05-06T07:08:09Z", "off": "2024-01-01T00:00:00.5+01:00",
        "utc": "2023-12-31T23:00:00.5Z"}


def run(text: str, data: dict[str, Any] | None = None) -> Any:
    return evaluate(compile_expression(text, "object"),
                    activation("object", {"object": DATA if data is None else data}))


AS_KUBERNETES = {
    # written in the offset it was read with; read (getters, comparisons) as the instant
    "string(timestamp('2024-01-01T00:00:00.5+01:00'))": "2024-01-01T00:00:00.5+01:00",
    "'%s'.format([timestamp('2024-01-01T00:00:00.5+01:00')])": "2024-01-01T00:00:00.5+01:00",
    "string(timestamp(object.off))": "2024-01-01T00:00:00.5+01:00",
    "'%s'.format([[timestamp(object.off)]])": '[timestamp("2024-01-01T00:00:00.5+01:00")]',
    "'%s'.format([{'at': timestamp('2024-01-01T00:00:00+14:00')}])":
        '{"at":timestamp("2024-01-01T00:00:00+14:00")}',
    "'%s'.format([[timestamp('2024-01-01T00:00:00.5-05:30')]])":
        '[timestamp("2024-01-01T00:00:00.5-05:30")]',
    "string(timestamp('2024-01-01T00:00:00-00:00'))": "2024-01-01T00:00:00Z",
    "string([timestamp(object.off)].min())": "2024-01-01T00:00:00.5+01:00",
    "string(optional.of(timestamp(object.off)).value())": "2024-01-01T00:00:00.5+01:00",
    "string(timestamp(timestamp(object.off)))": "2024-01-01T00:00:00.5+01:00",
    "timestamp(object.off) == timestamp(object.utc)": True,
    "timestamp(object.off).getFullYear()": 2023,
    "timestamp(object.off).getFullYear('+01:00')": 2024,
    "timestamp(object.off).getHours('America/New_York')": 18,
    "string(timestamp(object.off) - timestamp('2024-01-01T00:00:00Z'))": "-3599.5s",
    "string(timestamp(object.ts) + duration('1h'))": "2024-05-06T08:08:09Z",
    # kept through arithmetic with a duration, as cel-go keeps it
    "string(timestamp('2024-01-01T00:00:00.5+01:00') + duration('1h'))":
        "2024-01-01T01:00:00.5+01:00",
    "string(timestamp(object.off) + duration('1h'))": "2024-01-01T01:00:00.5+01:00",
    "string(duration('1h') + timestamp(object.off) - duration('30m'))":
        "2024-01-01T00:30:00.5+01:00",
    "string(timestamp(object.off) + (duration('1h') + duration('1h')))":
        "2024-01-01T02:00:00.5+01:00",
    "string([timestamp(object.off)].map(t, t + duration('1h'))[0])":
        "2024-01-01T01:00:00.5+01:00",
    "'%s'.format([[timestamp(object.off) - duration('1s'), timestamp(object.ts) + "
    "duration('1s')]])":
        '[timestamp("2023-12-31T23:59:59.5+01:00"), timestamp("2024-05-06T07:08:10Z")]',
    "string(timestamp(1704067200))": "2024-01-01T00:00:00Z",
    # every nanosecond, wherever the value meets Python
    "'%s'.format([[[timestamp(object.nanos)]]])":
        '[[timestamp("2024-05-06T07:08:09.123456789Z")]]',
    "'%s'.format([[{'a': duration('1.000000001s')}]])": '[{"a":duration("1.000000001s")}]',
    "[timestamp(object.nanos)].indexOf(timestamp(object.micros))": -1,
    "[timestamp(object.micros), timestamp(object.nanos)].lastIndexOf(timestamp(object.micros))": 0,
    "[[timestamp(object.nanos)]].indexOf([timestamp(object.micros)])": -1,
    "string([timestamp(object.nanos), timestamp(object.micros)].max())":
        "2024-05-06T07:08:09.123456789Z",
    "string([timestamp(object.nanos), timestamp(object.micros)].min())":
        "2024-05-06T07:08:09.123456Z",
    "[timestamp(object.nanos), timestamp(object.micros)].isSorted()": False,
    "string([duration('1ns'), duration('1.000000001s')].sum())": "1.000000002s",
    "string([timestamp(object.nanos)].slice(0, 1)[0])": "2024-05-06T07:08:09.123456789Z",
    "duration('-1.0009999999s').getMilliseconds()": -1000,
    # a duration as cel-go writes it: the shortest digits of its seconds as a double
    "string(duration('123456789.123456789s'))": "123456789.12345679s",
    "'%s'.format([[duration('123456789.123456789s')]])": '[duration("123456789.12345679s")]',
}


@pytest.mark.parametrize("text", AS_KUBERNETES)
def test_as_kubernetes(text):
    assert run(text) == AS_KUBERNETES[text]


def test_a_value_the_engine_returns_is_exact_and_keeps_its_offset():
    assert run("timestamp(object.nanos)") == Timestamp(1714979289123456789)
    written = run("[timestamp(object.off)]")[0]
    assert (written.offset, written.text()) == (60, "2024-01-01T00:00:00.5+01:00")
    assert run("{'d': duration('1.000000001s')}") == {"d": Duration(1_000_000_001)}


@pytest.mark.parametrize(("text", "said"), [
    # the runtime's parser stops at 32 levels of nesting before the guard could look there
    ("'%s'.format([[[[timestamp(object.nanos)]]]])", "3 lists or maps deep in an argument"),
    ("'%s'.format([{'a': {'b': [duration('1s')]}}])", "quickq-guard sees one exactly only 2"),
])
def test_what_cannot_be_written_as_kubernetes_writes_it_is_refused_at_load(text, said):
    with pytest.raises(CelError) as refused:
        compile_expression(text, "object")
    assert said in str(refused.value)


@pytest.mark.parametrize("text", [
    "string([timestamp(object.off), timestamp(object.utc)][1])",
    "string([timestamp(object.off) + duration('1h'), timestamp(object.utc) + duration('1h')][1])",
])
def test_one_instant_with_two_offsets_is_an_error(text):
    # Kubernetes writes each in its own offset; the runtime has one timestamp for both
    with pytest.raises(EvaluationError) as failed:
        run(text)
    assert "the same instant is a timestamp with two offsets" in str(failed.value)
    assert run(text, {**DATA, "off": DATA["utc"]}).endswith("Z")  # one offset: as Kubernetes


def test_timestamp_arithmetic_whose_operands_cannot_be_told_apart_is_refused():
    from webhook.engine.cel.go import carried

    assert carried(lex("a+b"), [1]) == (
        "cel.bind(qq__u, (a), cel.bind(qq__v, (b), cel.bind(qq__w, qq__u + qq__v, "
        "type(qq__w) == google.protobuf.Timestamp ? timestamp(qq__carried(string(qq__w), "
        "string(type(qq__u) == google.protobuf.Timestamp ? dyn(qq__u) : dyn(qq__v)))) "
        ": qq__w)))")
    assert carried(lex("a in + b"), [5]) is None


def test_a_patched_timestamp_or_duration_is_json_as_kubernetes_converts_it(tmp_path: Path):
    policy = {"id": "note-time", "description": "d", "type": "mutate", "action": "enforce",
              "mutations": [{"patchType": "JSONPatch", "jsonPatch": {"expression": (
                  "[JSONPatch{op: 'add', path: '/metadata/annotations', value: {"
                  "'at': timestamp(object.metadata.labels.at), "
                  "'until': timestamp(object.metadata.labels.at) + duration('1h'), "
                  "'for': duration('1.000000001s')}}]")}}]}
    obj = pod()
    obj["metadata"]["labels"] = {"at": DATA["off"]}
    decision = judge(decode(obj), policies(tmp_path, policy))
    assert decision.patch == ({"op": "add", "path": "/metadata/annotations", "value": {
        "at": "2024-01-01T00:00:00.5+01:00", "until": "2024-01-01T01:00:00.5+01:00",
        "for": "1.000000001s"}},)


@pytest.mark.parametrize(("text", "value"), [
    ("([3] + [1]).min()", 1), ("{'a': [2, 1]}.a.max()", 2), ("[[2, 1]][0].min()", 1),
    ("object.list.min()", 1), ("object.?list.orValue([5]).max()", 3),
    ("[1, 2].map(x, x * 2).isSorted()", True), ("size(object.list.slice(1, 3))", 2),
    ("'%s'.format([[2, 1].min()])", "1"), ("cel.bind(l, [4, 5], l.indexOf(5))", 1),
    ("object.list.indexOf(3) + 'abc'.indexOf('c') + 'abcb'.lastIndexOf('b')", 7),
    ("[[1], [2]].lastIndexOf([1])", 0),
])
def test_a_bound_receiver_is_the_whole_operand(text, value):
    assert run(text, {"list": [2, 1, 3]}) == value


def test_a_receiver_that_cannot_be_told_keeps_the_call_as_written():
    assert guarded(lex("1u.min()")) == "1u.min()"
    assert guarded(lex("x in y.min()")).startswith("x in cel.bind(qq__r, y")


def _go_rfc3339_nano(nanos: int, offset: int) -> str:
    """time.Time.Format(time.RFC3339Nano), from Python's datetime in the offset."""
    seconds, fraction = divmod(nanos, 1_000_000_000)
    zone = datetime.timezone(datetime.timedelta(minutes=offset))
    local = datetime.datetime.fromtimestamp(seconds, datetime.UTC).astimezone(zone)
    decimals = f".{fraction:09d}".rstrip("0") if fraction else ""
    suffix = local.strftime("%z")
    suffix = "Z" if offset == 0 else f"{suffix[:3]}:{suffix[3:]}"
    return (f"{local.year:04d}-{local.month:02d}-{local.day:02d}T{local.hour:02d}:"
            f"{local.minute:02d}:{local.second:02d}{decimals}{suffix}")


@settings(deadline=None)
@given(st.integers(-62135596800 + 86400, 253402300799 - 86400), st.integers(0, 999_999_999),
       st.integers(-23 * 60 - 59, 23 * 60 + 59))
def test_a_timestamp_is_written_as_go_writes_it(seconds, nanos, offset):
    moment = Timestamp(seconds * 1_000_000_000 + nanos, offset)
    assert moment.text() == _go_rfc3339_nano(moment.nanos, offset)
    assert timestamp_of(Timestamp(moment.nanos).text()) == moment  # equal as instants


@pytest.mark.parametrize(("nanos", "text"), [
    (1_500_000_000, "1.5s"), (-1_250_000_000, "-1.25s"), (0, "0s"), (1, "0.000000001s"),
    (3_661_500_000_000, "3661.5s"), (123456789_123456789, "123456789.12345679s"),
    (-500_000, "-0.0005s"), (360_000 * 10**9, "360000s"),
])
def test_a_duration_is_written_as_go_writes_it(nanos, text):
    assert Duration(nanos).text() == text


@pytest.mark.parametrize(("text", "nanos"), [
    ("3661.500s", 3_661_500_000_000), ("-0.000000001s", -1), ("0s", 0), ("0", 0),
    ("1h1m1.5s", 3_661_500_000_000), ("-500ms", -500_000_000), ("1.5ms", 1_500_000),
    ("34293h33m9.123456789s", 123456789_123456789), ("100us", 100_000), ("1ns", 1),
])
def test_the_runtime_s_duration_texts_are_read_exactly(text, nanos):
    assert duration_of(text) == Duration(nanos)


def test_an_expression_too_deep_for_the_guards_is_refused_not_run_as_the_runtime_would():
    # as written it compiles, and would give the runtime's answer (this timestamp in UTC)
    text = "(" * 27 + "string(timestamp('2024-01-01T00:00:00.5+01:00'))" + ")" * 27
    with pytest.raises(CelError) as refused:
        compile_expression(text, "object")
    assert "nests too deep for quickq-guard to give Kubernetes' answers" in str(refused.value)
