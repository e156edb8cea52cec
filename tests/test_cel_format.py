"""format() and string() of a duration as Kubernetes' CEL writes them (values seen on
kube-apiserver 1.36.3 and 1.35.4; tests/cluster/test_cel_vs_vap.py holds them all there)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from webhook.engine.cel import (
    _ENVIRONMENTS,
    EvaluationError,
    activation,
    compile_expression,
    evaluate,
)
from webhook.engine.cel.formatting import go_float

AS_KUBERNETES_WRITES_THEM = {
    "string(duration('1h1m1.5s'))": "3661.5s",
    "string(duration('1.5ms'))": "0.0015s",
    "string(duration('123456789ns'))": "0.123456789s",
    "string(duration('100h'))": "360000s",
    "'%s'.format([[1, 'a']])": '[1, "a"]',
    "'%s'.format([{'b': 1, 'a': 2}])": '{"a":2, "b":1}',
    "'%s'.format([{10: 'a', 9: 'b'}])": '{10:"a", 9:"b"}',
    "'%s'.format([{'a': 'x', 'b': [1.5, 'y\"z', b'q']}])":
        '{"a":"x", "b":[1.500000, "y\\"z", b"q"]}',
    "'%s'.format([[duration('1.5ms'), timestamp('2024-01-01T00:00:00Z')]])":
        '[duration("0.0015s"), timestamp("2024-01-01T00:00:00Z")]',
    "'%s'.format([[double('NaN'), -0.0]])": '["NaN", -0.000000]',
    "'%e'.format([1234.5])": "1.234500\u00d710\u2070\u00b3",
    "'%.2e'.format([1.5e-7])": "1.500000\u00d710\u207b\u2070\u2077",
    "'%f'.format([-1234567.125])": "-1,234,567.125000",
    "'%.0f'.format([1234.5])": "1,234",
    "'%f'.format([double('Infinity')])": "\u221e",
    "'%x'.format([-255])": "-ff",
    "'%b'.format([true])": "1",
    "'%s'.format([1e20])": "1e+20",
    "'%s %d %f'.format(['a', 1, 1.5])": "a 1 1.500000",
    # its printer writes no sign for -0.0, and takes three strings as doubles
    "'%f'.format([-0.0])": "0.000000", "'%e'.format([-0.0])": "0.000000\u00d710\u2070\u2070",
    "'%.1f'.format([-0.01])": "-0.0", "'%f'.format(['NaN'])": "NaN",
    "'%e'.format(['-Infinity'])": "    -\u221e", "'%s'.format([-0.0])": "-0",
}


def run(text: str) -> object:
    return evaluate(compile_expression(text, "object"), activation("object", {"object": {}}))


@pytest.mark.parametrize("text", AS_KUBERNETES_WRITES_THEM)
def test_as_kubernetes_writes_them(text):
    assert run(text) == AS_KUBERNETES_WRITES_THEM[text]


@pytest.mark.parametrize(("text", "error"), [
    ("'%d'.format([2.5])", "decimal clause can only be used on integers, was given double"),
    ("'%f'.format([5])", "fixed-point clause can only be used on doubles, was given int"),
    ("'%e'.format(['x'])", "scientific clause can only be used on doubles, was given string"),
    ("'%x'.format([2.5])", "only integers, byte buffers, and strings can be formatted as hex"),
    ("'%10d'.format([5])", 'unrecognized formatting clause "1"'),
    ("'%s %s'.format(['x'])", "index 1 out of range"),
    ("'%s'.format([1, 2])", "too many arguments"),
    # bytes that are no UTF-8 are no string there
    ("'%s'.format([b'\\xff'])", "invalid UTF-8"), ("'%s'.format([[b'\\xff']])", "invalid UTF-8"),
    ("'%f'.format(['x'])", "fixed-point clause can only be used on doubles, was given string"),
])
def test_what_kubernetes_refuses_is_an_error(text, error):
    with pytest.raises(EvaluationError) as caught:
        run(text)
    assert error in str(caught.value)


@settings(deadline=None)
@given(st.floats())
def test_a_double_is_written_as_go_writes_it(value):
    # the runtime's own string() for a finite double; Go's NaN, +Inf and -Inf for the others
    written = repr(value).replace("inf", "Infinity").replace("nan", "NaN")
    expected = {"nan": "NaN", "inf": "+Inf", "-inf": "-Inf"}.get(repr(value))
    runtime = _ENVIRONMENTS["object"].compile(f"string(double('{written}'))").eval(
        activation("object", {})).value()
    assert go_float(value) == (expected or runtime)
    assert run(f"string(double('{written}'))") == go_float(value)


# --- timestamps and durations keep their nanoseconds, and are written as Go writes them ----

NANOS = {"at": "2024-05-06T07:08:09.123456789Z", "tenth": "2024-05-06T07:08:09.100Z",
         "span": "1.000000001s"}
AS_KUBERNETES_WRITES_THEM_TO_THE_NANOSECOND = {
    "string(timestamp('2024-01-01T00:00:00.123456789Z'))": "2024-01-01T00:00:00.123456789Z",
    "string(timestamp(object.at))": "2024-05-06T07:08:09.123456789Z",
    "string(timestamp('2024-01-01T00:00:00.5Z'))": "2024-01-01T00:00:00.5Z",
    "string(timestamp(object.tenth))": "2024-05-06T07:08:09.1Z",
    "string(timestamp(timestamp(object.at)))": "2024-05-06T07:08:09.123456789Z",
    "string(timestamp(object.at) + duration('1ns'))": "2024-05-06T07:08:09.12345679Z",
    "string(duration(duration(object.span)))": "1.000000001s",
    "'%s'.format([timestamp(object.at)])": "2024-05-06T07:08:09.123456789Z",
    "'%s'.format([[timestamp('2024-01-01T00:00:00.123456789Z')]])":
        '[timestamp("2024-01-01T00:00:00.123456789Z")]',
    "'%s'.format([{'at': timestamp(object.at)}])":
        '{"at":timestamp("2024-05-06T07:08:09.123456789Z")}',
    "'%s'.format([timestamp(object.tenth)])": "2024-05-06T07:08:09.1Z",
    "'%s'.format([duration(object.span)])": "1.000000001s",
    "'%s'.format([[duration('1ns')]])": '[duration("0.000000001s")]',
    "'%s'.format([timestamp(object.at) - timestamp(object.tenth)])": "0.023456789s",
    # a map of the policy's that looks like a mark is still that map
    "'%s'.format([{'qq__timestamp': 'x'}])": '{"qq__timestamp":"x"}',
    "'%s'.format([[{'qq__timestamp': 'x'}]])": '[{"qq__timestamp":"x"}]',
    "'%s'.format([{'a': {'qq__map': [[1, 2]]}}])": '{"a":{"qq__map":[[1, 2]]}}',
}


@pytest.mark.parametrize("text", AS_KUBERNETES_WRITES_THEM_TO_THE_NANOSECOND)
def test_timestamps_and_durations_keep_their_nanoseconds(text):
    bound = activation("object", {"object": NANOS})
    assert evaluate(compile_expression(text, "object"), bound) == \
        AS_KUBERNETES_WRITES_THEM_TO_THE_NANOSECOND[text]


def test_a_timestamp_handed_to_format_is_still_a_timestamp():
    with pytest.raises(EvaluationError) as caught:
        evaluate(compile_expression("'%d'.format([timestamp(object.at)])", "object"),
                 activation("object", {"object": NANOS}))
    assert "was given google.protobuf.Timestamp" in str(caught.value)


@settings(deadline=None)
@given(st.integers(0, 253402300799), st.integers(0, 999_999_999))
def test_a_timestamp_read_from_the_object_is_written_as_go_writes_it(seconds, nanos):
    import datetime

    whole = datetime.datetime.fromtimestamp(seconds, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    fraction = f".{nanos:09d}".rstrip("0").rstrip(".")
    text = f"{whole}.{nanos:09d}Z"
    expected = f"{whole}{fraction}Z"  # Go's time.RFC3339Nano
    bound = activation("object", {"object": {"at": text}})
    for expression, wanted in (("string(timestamp(object.at))", expected),
                               ("'%s'.format([timestamp(object.at)])", expected),
                               ("'%s'.format([[timestamp(object.at)]])",
                                f'[timestamp("{expected}")]')):
        assert evaluate(compile_expression(expression, "object"), bound) == wanted
