"""The CEL cost budget (webhook.engine.cost), with Kubernetes' numbers: a policy whose
estimated worst case on an object within the body limit is past the per-expression limit is
refused at load, naming file and expression; at evaluation an expression estimated past the
per-expression limit on this object, or a review past its budget, is "too costly to
evaluate", an error result like any evaluation error (denied; dry-run: a warning), and comes
in about a second, where a quadratic policy took minutes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from builders import policies_in as policies

from webhook import PolicyError, evaluate
from webhook.engine import cost


def _policy(expression: str, scope: str = "object", action: str = "enforce") -> dict[str, Any]:
    return {"id": "costly", "description": "a policy that may cost much", "type": "validate",
            "action": action, "scope": scope,
            "validations": [{"expression": expression, "message": "no"}]}


def _pod(containers: int = 1, **annotations: str) -> dict[str, Any]:
    container = {"name": "c", "image": "registry.example.com/app:1.0",
                 "env": [{"name": "MODE", "value": "fast"}]}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web", "namespace": "team-a", "annotations": annotations},
            "spec": {"containers": [dict(copy.deepcopy(container), name=f"c{i}")
                                    for i in range(containers)]}}


@pytest.mark.parametrize("expression", [
    # a string that is not the comprehension's element, scanned once per element
    "object.spec.containers.all(c, object.metadata.annotations['a'].contains(c.name))",
    # chained replace() whose output grows by its literal each time
    "object.metadata.annotations['a'].replace('a', 'aaaaaaaaaa').replace('a', 'aaaaaaaaaa')"
    ".replace('a', 'aaaaaaaaaa').size() > 0",
])
def test_a_policy_past_the_static_limit_is_refused_naming_file_and_expression(
        tmp_path: Path, expression: str) -> None:
    with pytest.raises(PolicyError) as caught:
        policies(tmp_path, _policy(expression))
    message = str(caught.value)
    assert "p.yaml" in message and "validations[0].expression" in message
    assert f"exceeds the per-expression limit of {cost.STATIC_LIMIT:,}" in message


@pytest.mark.parametrize(("expression", "scope"), [
    ("object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))", "object"),
    ("object.spec.containers.all(c, c.env.all(e, !e.name.contains('TOKEN')))", "object"),
    ("podSpec.containers.exists_one(c, c.name == container.name)", "container"),
    ("object.metadata.name.replace('-', '_') != ''", "object"),
])
def test_ordinary_policies_load_and_pass(tmp_path: Path, expression: str, scope: str) -> None:
    decision = evaluate(_pod(3), policies(tmp_path, _policy(expression, scope)))
    assert decision.outcome == "allowed", decision.message


def test_the_shipped_pod_security_profile_loads(tmp_path: Path) -> None:
    from webhook import load_config, load_policies

    config = tmp_path / "config.yaml"
    config.write_text("podSecurity: {enforce: restricted}\n")
    assert any(p.id.startswith("pss-") for p in
               load_policies(None, load_config(str(config))).policies)


def test_an_expression_past_the_per_call_limit_on_this_object_is_too_costly(
        tmp_path: Path) -> None:
    loaded = policies(tmp_path, _policy(
        "object.metadata.annotations['a'].replace('a', 'b').size() > 0"))
    assert evaluate(_pod(1, a="a" * 1000), loaded).outcome == "allowed"
    decision = evaluate(_pod(1, a="a" * (2 * 1024 * 1024 + 512 * 1024)), loaded)
    assert not decision.allowed and decision.outcome == "error"
    assert "[costly] CEL validations[0].expression: too costly to evaluate" in decision.message
    assert f"past the per-expression limit of {cost.PER_CALL_LIMIT:,}" in decision.message


def test_a_quadratic_policy_is_stopped_by_the_review_budget(tmp_path: Path) -> None:
    """`exists_one` over the pod's containers, once per container: 8,000 containers took
    84 s through the webhook; the budget stops it, answering with the failure action (the
    time it now takes: benchmarks/hostile_load.py)."""
    loaded = policies(tmp_path, _policy(
        "podSpec.containers.exists_one(c, c.name == container.name)", "container"))
    assert evaluate(_pod(50), loaded).outcome == "allowed"
    decision = evaluate(_pod(4000), loaded)
    assert not decision.allowed and decision.outcome == "error"
    assert "[costly] CEL too costly to evaluate: the review's CEL cost budget of " \
           f"{cost.REVIEW_BUDGET:,}" in decision.message


def test_too_costly_is_an_error_result_like_any_evaluation_error(tmp_path: Path) -> None:
    """An evaluation error denies (fail closed), and in dry-run mode only warns: so does
    too costly."""
    from webhook import Config

    loaded = policies(tmp_path, _policy(
        "podSpec.containers.exists_one(c, c.name == container.name)", "container"),
        config=Config(mode="dry-run"))
    decision = evaluate(_pod(4000), loaded)
    assert decision.allowed
    assert any("too costly to evaluate" in warning for warning in decision.warnings)
    [result] = decision.results
    assert result.status == "error" and result.policy == "costly"


def test_each_review_has_its_own_budget(tmp_path: Path) -> None:
    loaded = policies(tmp_path, _policy(
        "podSpec.containers.exists_one(c, c.name == container.name)", "container"))
    assert evaluate(_pod(4000), loaded).outcome == "error"
    assert evaluate(_pod(50), loaded).outcome == "allowed"


def test_the_estimate_grows_with_the_sizes_it_reads() -> None:
    text = "podSpec.containers.exists_one(c, c.name == container.name)"
    small = cost.estimate(text, cost.measure({"containers": [{"name": "a"}] * 10}))
    large = cost.estimate(text, cost.measure({"containers": [{"name": "a"}] * 1000}))
    assert 50 * small < large
    assert cost.estimate(text, cost.WORST) <= cost.STATIC_LIMIT
