"""A CEL policy's variables and expressions are compiled once per load, into one program
(webhook.engine.cel.compile_policy), and its variables keep Kubernetes' semantics: evaluated
only when an expression reads them, an error in one failing only the expressions that read
it, `false && variables.x` true to its short circuit, each typed by its expression."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from builders import pod
from builders import policies_in as policies

from webhook import PolicyError, decode, evaluate

# Five variables that read the container and each other, read by every expression.
VARIABLES = [
    {"name": "image", "expression": "container.image"},
    {"name": "parts", "expression": "variables.image.split(':')"},
    {"name": "tagged", "expression": "variables.parts.size() >= 2"},
    {"name": "sc", "expression": "container.?securityContext.orValue({})"},
    {"name": "privileged", "expression": "variables.sc.?privileged.orValue(false)"},
]


def _policy(scope: str = "container", **fields: Any) -> dict[str, Any]:
    return {"id": "checks", "description": "container checks", "type": "validate",
            "action": "enforce", "scope": scope, "variables": VARIABLES,
            "validations": [
                {"expression": "variables.tagged", "message": "no tag"},
                {"expression": "!variables.privileged && variables.tagged",
                 "messageExpression": "'privileged: ' + variables.image"},
                {"expression": "variables.parts[0] != ''", "message": "no name"}],
            **fields}


def _programs(tmp_path: Path, policy: dict[str, Any]) -> list[Any]:
    [loaded] = policies(tmp_path, policy).policies
    assert loaded.cel is not None
    expressions = [*(v.expression for v in loaded.cel.validations),
                   *(v.message_expression for v in loaded.cel.validations
                     if v.message_expression is not None)]
    # A variable has no program of its own: it is compiled in its expressions' program.
    assert [v.expression.program for v in loaded.cel.variables] == [None] * len(VARIABLES)
    return [e.program for e in expressions]


@pytest.mark.parametrize("scope", ["container", "object"])
def test_one_program_holds_every_variable_and_expression_of_a_policy(
        tmp_path: Path, scope: str) -> None:
    """Before: each variable compiled alone, then again in each of the expressions that read
    it, and each container-scope expression a second program for several containers: 4
    expressions reading 5 variables were 5 + 4 + 4 + 4 compilations, here 1."""
    policy = _policy(scope)
    if scope == "object":
        policy["variables"] = [dict(v, expression=v["expression"].replace(
            "container", "object.spec.containers[0]")) for v in VARIABLES]
    programs = _programs(tmp_path, policy)
    assert len(programs) == 4 and len({id(p) for p in programs}) == 1


def test_a_lone_container_and_several_are_judged_alike(tmp_path: Path) -> None:
    loaded = policies(tmp_path, _policy())
    one = {"name": "a", "image": "app", "securityContext": {"privileged": True}}
    decision = evaluate(decode(pod(one)), loaded)
    assert [f.message for f in decision.results[0].findings] == [
        "container 'a': no tag", "container 'a': privileged: app"]
    several = evaluate(decode(pod({"name": "b", "image": "app:1"}, one)), loaded)
    assert [f.message for f in several.results[0].findings] == [
        "container 'a': no tag", "container 'a': privileged: app"]


def test_a_variable_is_evaluated_only_when_read(tmp_path: Path) -> None:
    """`false && variables.broken` is false, as in Kubernetes, and a variable that no
    expression reads on the object never fails the policy."""
    broken = {"name": "broken", "expression": "container.nothing.here == 1"}
    policy = _policy(variables=[*VARIABLES, broken], validations=[
        {"expression": "!(false && variables.broken)", "message": "never"},
        {"expression": "variables.tagged || variables.broken", "message": "untagged"}])
    result = evaluate(decode(pod({"name": "a", "image": "app:1"})), policies(tmp_path, policy))
    assert result.results[0].status == "pass"
    result = evaluate(decode(pod({"name": "a", "image": "app"})), policies(tmp_path, policy))
    assert result.results[0].status == "error"
    # The API server's message names the variable that failed.
    assert ("validations[1].expression (or the variables it reads: broken, tagged): "
            'composited variable "broken" fails to evaluate: no such key: nothing'
            ) in result.results[0].reason


def test_a_variable_failing_in_a_message_leaves_the_message(tmp_path: Path) -> None:
    policy = _policy(variables=[*VARIABLES, {"name": "broken",
                                             "expression": "container.nothing"}],
                     validations=[{"expression": "variables.tagged", "message": "no tag",
                                   "messageExpression": "'no tag: ' + variables.broken"}])
    decision = evaluate(decode(pod({"name": "a", "image": "app"})), policies(tmp_path, policy))
    [found] = decision.results[0].findings
    assert found.message == "container 'a': no tag"


def test_a_variable_is_typed_by_its_expression(tmp_path: Path) -> None:
    """As the API server refuses `variables.length == 'two'` when length is an int."""
    policy = _policy(variables=[{"name": "length", "expression": "container.name.size()"}],
                     validations=[{"expression": "variables.length == 'two'"}])
    with pytest.raises(PolicyError) as caught:
        policies(tmp_path, policy)
    # The API server's message, at the expression as written (variables are not bound in).
    assert ("validations[0].expression: line 1, column 18: found no matching overload for "
            "'_==_' applied to '(int, string)'") in str(caught.value)


def test_a_mistake_in_one_expression_names_it(tmp_path: Path) -> None:
    policy = _policy()
    policy["validations"][2]["expression"] = "variables.parts[0] != "
    with pytest.raises(PolicyError) as caught:
        policies(tmp_path, policy)
    assert "validations[2].expression: line 1, column 23: Syntax error" in str(caught.value)
    policy = _policy()
    policy["validations"][1]["messageExpression"] = "variables.tagged"
    with pytest.raises(PolicyError) as caught:
        policies(tmp_path, policy)
    assert str(caught.value).endswith(  # the API server's message
        "validations[1].messageExpression: must evaluate to string but got bool")


def test_validations_evaluated_together_fail_as_each_alone(tmp_path: Path) -> None:
    """A container's validations are one evaluation (CelPolicy.together); when it fails,
    each is evaluated alone, and the first that fails says why, as before."""
    policy = _policy(validations=[
        {"expression": "variables.tagged", "message": "no tag"},
        {"expression": "container.nothing == 1", "message": "never"}])
    [loaded] = policies(tmp_path, policy).policies
    assert loaded.cel is not None and loaded.cel.together is not None
    result = evaluate(decode(pod({"name": "a", "image": "app"})), policies(tmp_path, policy))
    assert result.results[0].reason.endswith(
        "validations[1].expression: no such key: nothing")
    # A validation typed dyn does not load, as the API server refuses it (before, it was an
    # error on each object: "yields an int, not a bool").
    policy["validations"][1]["expression"] = "dyn(variables.parts.size())"
    with pytest.raises(PolicyError, match=r"validations\[1\].expression: must evaluate to "
                       "bool but got dyn"):
        policies(tmp_path, policy)
