"""Kubernetes' lists library (isSorted, sum, min, max, indexOf, lastIndexOf, and cel-go's
slice) as the API server has it: its overloads refuse a list of another type when the policy
loads, a sum is of its list's type (a uint, a duration, an empty list's zero), and a list of
dyn is judged by its first item as cel-go's dispatch judges it. The answers are Kubernetes'
own (kube-apiserver 1.36.3 and 1.35.4; tests/cluster/test_cel_vs_vap.py holds the same
expressions there)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.engine.cel import (
    CelError,
    EvaluationError,
    activation,
    compile_expression,
    evaluate,
    evaluate_value,
)
from webhook.engine.cel.checked import checked_problem
from webhook.engine.cel.library import PYTHON_FUNCTIONS
from webhook.engine.cel.moments import Duration, Timestamp

DATA = {"off": "2024-01-01T00:00:00+01:00", "n": "42"}


def typed(text: str) -> tuple[str, Any]:
    """(the CEL type of the value, the value) as the engine gives them."""
    compiled = compile_expression(text, "object")
    bound = activation("object", {"object": DATA})
    value = evaluate_value(compiled, bound)
    return value.type().name(), evaluate(compiled, bound)


@pytest.mark.parametrize(("text", "kind", "value"), [
    # a sum is of its list's type, with Kubernetes' zero for an empty list of that type
    ("[1u, 2u].sum()", "UINT", 3), ("[dyn(1u), dyn(2u)].sum()", "UINT", 3),
    ("[1u].filter(x, false).sum()", "UINT", 0), ("[1.5].filter(x, false).sum()", "DOUBLE", 0.0),
    ("[duration('1s')].filter(x, false).sum()", "DURATION", Duration(0)),
    ("[1].filter(x, false).sum()", "INT", 0), ("[].sum()", "INT", 0),
    ("dyn([]).sum()", "INT", 0), ("[-0.0].sum()", "DOUBLE", 0.0),
    ("object.map(k, 1u).sum()", "UINT", 2), ("object.map(k, 1u).filter(x, false).sum()", "UINT", 0),
    ("[duration('1ns'), duration('1.000000001s')].sum()", "DURATION", Duration(1_000_000_002)),
    # a list of dyn: min, max and isSorted pass over items that do not compare, as cel-go
    ("[dyn(1), dyn('a')].min()", "INT", 1), ("[dyn('a'), dyn(1)].max()", "STRING", "a"),
    ("[dyn(2), dyn('a'), dyn(1)].isSorted()", "BOOL", True),
    ("[dyn(2), dyn(1), dyn([1])].isSorted()", "BOOL", False),
    ("[1.0, double('NaN'), 0.5].min()", "DOUBLE", 0.5),
    ("[dyn(9007199254740993), dyn(9007199254740992.0)].min()", "INT", 9007199254740993),
    # a duration and a timestamp add up to a timestamp, which keeps its offset
    ("string([dyn(duration('1s')), dyn(timestamp(object.off))].sum())", "STRING",
     "2024-01-01T00:00:01+01:00"),
    ("[1].indexOf(dyn(1.0))", "INT", 0), ("[1, 2, 3].slice(1, 3)", "LIST", [2, 3]),
    ("[b'a', b'b'].max()", "BYTES", b"b"), ("[b'\\xff', b'a'].isSorted()", "BOOL", False),
    ("[true, false].min()", "BOOL", False),
])
def test_as_kubernetes(text, kind, value):
    found_kind, found = typed(text)
    assert (found_kind.split("<")[0], found) == (kind, value)
    assert all(isinstance(found, kind) == isinstance(value, kind) for kind in (bool, float))


@pytest.mark.parametrize(("text", "said"), [
    ("[dyn(1), dyn(2u)].sum()", "no such overload"),  # an int and a uint do not add
    ("[dyn(1.5), dyn(1)].sum()", "no such overload"),
    ("[dyn('a')].sum()", "no such overload"), ("[dyn([1])].min()", "no such overload"),
    ("[dyn(1), dyn([1])].isSorted()", "no such overload"),
    ("[dyn(null)].isSorted()", "no such overload"),
    ("[9223372036854775807, 1, -1].sum()", "integer overflow"),
    ("[18446744073709551615u, 1u].sum()", "unsigned integer overflow"),
    ("[].min()", "min called on empty list"), ("[1u].filter(x, false).max()",
                                               "max called on empty list"),
])
def test_what_fails_in_kubernetes_fails(text, said):
    with pytest.raises(EvaluationError) as failed:
        typed(text)
    assert said in str(failed.value)


@pytest.mark.parametrize(("text", "said"), [
    ("['a'].sum()", "found no matching overload for 'sum' applied to '(list(string))'"),
    ("[true].sum()", "no matching overload for 'sum'"),
    ("[timestamp(0)].sum()", "no matching overload for 'sum'"),
    ("[[1]].min()", "found no matching overload for 'min' applied to '(list(list(int)))'"),
    ("[{'a': 1}].max()", "no matching overload for 'max'"),
    ("[[1]].isSorted()", "no matching overload for 'isSorted'"),
    ("[1].indexOf('a')", "found no matching overload for 'indexOf' applied to "
                         "'(list(int), string)'"),
    ("[1].lastIndexOf(1.0)", "no matching overload for 'lastIndexOf'"),
    ("[[1]].indexOf(['a'])", "no matching overload for 'indexOf'"),
    # the result is typed as in Kubernetes
    ("[1, 2].sum() == 'a'", "no matching overload for '_==_' applied to '(int, string)'"),
    ("[1u, 2u].sum() + 1", "no matching overload for '_+_' applied to '(uint, int)'"),
    ("[3, 1].min() == 'a'", "no matching overload for '_==_' applied to '(int, string)'"),
    ("[1, 2].slice(0, 1) == ['a']", "no matching overload for '_==_'"),
])
def test_what_kubernetes_refuses_at_creation_is_refused_at_load(text, said):
    with pytest.raises(CelError) as refused:
        compile_expression(text, "object")
    assert said in str(refused.value)
    assert "qq__" not in str(refused.value)  # said as written


def test_a_validation_is_held_to_the_sums_type():
    with pytest.raises(CelError) as refused:
        compile_expression("[1u].sum()", "object", "bool")
    assert "must yield a bool, but it yields uint" in str(refused.value)


def test_a_lists_call_whose_list_was_not_bound_is_refused():
    # what the engine would run if its guard could not bind the list (compiled as written)
    from webhook.engine.cel import _ENVIRONMENTS

    program = _ENVIRONMENTS["object"].compile("object.map(k, 1u).sum()")
    problem = checked_problem(program, "object.map(k, 1u).sum()", PYTHON_FUNCTIONS)
    assert problem is not None and "cannot tell the list of this sum() apart" in problem
    assert checked_problem(program, "object.map(k, 1u).sum()") is None  # not the engine's


def test_a_sum_of_timestamps_and_durations_keeps_its_nanoseconds():
    kind, value = typed("[dyn(duration('0.000000001s')), dyn(timestamp(object.off))].sum()")
    assert kind == "TIMESTAMP"
    assert value == Timestamp(1704063600_000000001, 60)
