"""A container-scope CEL policy converts `podSpec` and `object` once per review, not once
per container (webhook.engine.cel.PolicyProgram.each): its work, and the cost the budget
charges for it, grow with the containers, not with their square. Each container is still its
own evaluation, judged in order, with its own findings, messages and errors."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from builders import policies_in as policies

from webhook import decode, evaluate
from webhook.engine.rules.cel import Request
from webhook.engine.workload import read_workload


def _policy(*validations: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"id": "each", "description": "a check on every container", "type": "validate",
            "action": "enforce", "scope": "container", "validations": list(validations),
            **fields}


def _pod(containers: int, **spec: Any) -> dict[str, Any]:
    one = {"name": "c", "image": "registry.example.com/app:1.0",
           "env": [{"name": "MODE", "value": "fast"}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "team-a"},
            "spec": {"containers": [dict(copy.deepcopy(one), name=f"c{i}")
                                    for i in range(containers)], **spec}}


def _check(tmp_path: Path, policy: dict[str, Any], obj: dict[str, Any]) -> tuple[Any, int]:
    """The findings of the policy on obj, and the CEL cost the budget charged for them."""
    [loaded] = [p for p in policies(tmp_path, policy).policies if p.id == policy["id"]]
    assert loaded.cel is not None
    workload = read_workload(obj, ())
    assert workload is not None
    return loaded.cel.check(workload, Request()), 0


READS_LISTS = {"expression": "podSpec.containers.size() > 0 && container.name != ''",
               "message": "no"}


def test_a_pod_of_many_containers_is_judged_when_each_container_costs_little(
        tmp_path: Path) -> None:
    """Reading podSpec's lists once per container was quadratic, and refused as too costly
    past about 250 containers; each evaluation here does a constant amount of work."""
    decision = evaluate(decode(_pod(2000)), policies(tmp_path, _policy(READS_LISTS)))
    assert decision.outcome == "allowed", decision.message


def test_a_review_past_the_budget_is_an_error_as_the_api_server_says(tmp_path: Path) -> None:
    """`exists_one` over the pod's containers, once per container, is quadratic in itself:
    the policy's budget for the review (the API server's RuntimeCELCostBudget) runs out, and
    the error is the API server's (before: our own estimate, before any evaluation)."""
    unique = {"expression": "podSpec.containers.exists_one(c, c.name == container.name)",
              "message": "duplicate name"}
    loaded = policies(tmp_path, _policy(unique))
    assert evaluate(decode(_pod(20)), loaded).outcome == "allowed"
    decision = evaluate(decode(_pod(2000)), loaded)
    assert decision.outcome == "error"
    assert "[each] CEL validations[0].expression: validation failed due to running out of " \
           "cost budget, no further validation rules will be run" in decision.message


def test_each_container_is_judged_in_order_with_its_own_findings(tmp_path: Path) -> None:
    policy = _policy(
        {"expression": "container.name != 'c1' && container.name != 'c3'",
         "messageExpression": "'container ' + container.name + ' of ' + "
                              "string(podSpec.containers.size())"},
        {"expression": "containerGroup == 'containers'", "message": "an init container"},
        {"expression": "podSpec.containers[0].name == 'c0'", "message": "pod-level",
         "fieldPath": "podSpec.containers"})
    obj = _pod(4, initContainers=[{"name": "i0", "image": "registry.example.com/i:1"}])
    findings, _ = _check(tmp_path, policy, obj)
    assert [(f.container, f.message, f.path) for f in findings] == [
        ("c1", "container 'c1': container c1 of 4", "spec.containers[1]"),
        ("c3", "container 'c3': container c3 of 4", "spec.containers[3]"),
        ("i0", "initContainer 'i0': an init container", "spec.initContainers[0]"),
    ]


def test_an_error_names_the_first_failing_expression_in_container_order(
        tmp_path: Path) -> None:
    """Container c0 passes both; c1 fails the second validation first (c2 would fail the
    first): the error is c1's, as when each container had an activation of its own."""
    policy = _policy(
        {"expression": "container.name != 'c2' || container.missing == 1", "message": "a"},
        {"expression": "container.name != 'c1' || 1 / 0 == 1", "message": "b"})
    decision = evaluate(decode(_pod(3)), policies(tmp_path, policy))
    assert decision.outcome == "error"
    assert "validations[1].expression: division by zero" in decision.message, \
        decision.message


def test_the_iteration_limit_is_per_container(tmp_path: Path) -> None:
    """200 containers each iterate over the 200: 40,000 iterations for the pod, 200 for
    each evaluation, within the runtime's 10,000."""
    unique = {"expression": "podSpec.containers.exists_one(c, c.name == container.name)",
              "message": "duplicate name"}
    decision = evaluate(decode(_pod(200)), policies(tmp_path, _policy(unique)))
    assert decision.outcome == "allowed", decision.message


def test_a_messageexpression_sees_no_env_value_of_any_container(tmp_path: Path) -> None:
    obj = _pod(3)
    obj["spec"]["containers"][2]["env"] = [{"name": "DB_PASSWORD", "value": "s3cr3t-v4lue"}]
    policy = _policy({"expression": "container.name != 'c1'",
                      "messageExpression": "'env: ' + podSpec.containers[2].env[0].value"})
    findings, _ = _check(tmp_path, policy, obj)
    [found] = findings
    assert found.container == "c1"
    assert "s3cr3t" not in found.message


@pytest.mark.parametrize("containers", [1, 3])
def test_substring_to_the_end_holds_for_each_container_with_variables(
        tmp_path: Path, containers: int) -> None:
    """`'qq-'.substring(0, 3)` (an end equal to the size) is what Kubernetes gives, through
    variables and for several containers alike (an earlier runtime refused it)."""
    policy = _policy({"expression": "variables.nm.substring(0, size(variables.nm)) == "
                                    "variables.nm && container.name.substring(0, 1) == 'c'",
                      "message": "no"},
                     variables=[{"name": "nm", "expression": "container.name"}])
    decision = evaluate(decode(_pod(containers)), policies(tmp_path, policy))
    assert decision.outcome == "allowed", decision.message
