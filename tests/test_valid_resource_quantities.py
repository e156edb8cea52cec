"""valid-resource-quantities: every amount parses, and no request exceeds its limit."""

from __future__ import annotations

import pytest
from builders import container, judge, messages, paths, pod, result, statuses


def with_resources(requests=None, limits=None):
    resources = {"requests": {"cpu": "100m", "memory": "128Mi", **(requests or {})}}
    if limits is not None:
        resources["limits"] = limits
    return pod(container(resources=resources))


@pytest.mark.parametrize("amount", ["100m", "0.5", "256Mi", "1Gi", "1e3", "2", 2, 0.5, "1k",
                                    "1E3", ".5", "1.5Gi", "1Ei", "1E"])  # 1E: one exa
def test_valid_quantities_pass(amount):
    decision = judge(with_resources(limits={"cpu": amount, "memory": "1Ti"}))
    assert result(decision, "valid-resource-quantities").status == "pass", amount


@pytest.mark.parametrize(("amount", "shown"), [
    ("1GB", "'1GB'"), ("500mi", "'500mi'"), ("-1", "'-1'"), ("", "''"),
    (-1, "'-1'"),  # the API server decodes a number in a quantity field to a string
    ("1 Gi", "'1 Gi'"), ("Gi", "'Gi'"), (True, "True"),
])
def test_invalid_quantities_are_a_policy_failure_naming_the_field(amount, shown):
    decision = judge(with_resources(limits={"memory": amount}))
    assert not decision.allowed
    assert messages(decision, "valid-resource-quantities") == [
        f"container 'app': resources.limits.memory {shown} is not a valid quantity; use a "
        "non-negative amount such as 500m, 2, 256Mi or 1Gi"]
    assert paths(decision, "valid-resource-quantities") == [
        "spec.containers[0].resources.limits.memory"]


def test_malformed_quantity_is_not_an_error_and_other_policies_still_judge():
    obj = with_resources(requests={"memory": "8GB"})
    obj["spec"]["containers"][0]["image"] = "app:latest"
    decision = judge(obj)
    found = statuses(decision)
    assert "error" not in found.values()
    assert found["valid-resource-quantities"] == "fail"
    assert found["disallow-latest-tag"] == "fail"
    assert found["require-requests"] == "pass"


def test_zero_is_a_valid_amount():
    decision = judge(with_resources(requests={"ephemeral-storage": "0"}))
    assert result(decision, "valid-resource-quantities").status == "pass"


def test_request_above_its_limit_is_denied():
    decision = judge(with_resources(requests={"cpu": "2"}, limits={"cpu": "1"}))
    assert messages(decision, "valid-resource-quantities") == [
        "container 'app': resources.requests.cpu (2) exceeds resources.limits.cpu (1); "
        "lower the request or raise the limit"]
    assert paths(decision, "valid-resource-quantities") == [
        "spec.containers[0].resources.requests.cpu"]


@pytest.mark.parametrize(("request_", "limit"), [
    ("1Gi", "1024Mi"), ("500m", "0.5"), ("1000m", "1"), ("1e3", "1k"), ("1Gi", "2Gi")])
def test_request_equal_or_below_its_limit_in_other_units_passes(request_, limit):
    decision = judge(with_resources(requests={"memory": request_}, limits={"memory": limit}))
    assert result(decision, "valid-resource-quantities").status == "pass"


def test_init_container_quantities_are_checked():
    obj = pod(container(), initContainers=[
        container("init", resources={"requests": {"cpu": "1", "memory": "1gb"}})])
    assert paths(judge(obj), "valid-resource-quantities") == [
        "spec.initContainers[0].resources.requests.memory"]
