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

from webhook import PolicyError, decode, evaluate
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
    decision = evaluate(decode(_pod(3)), policies(tmp_path, _policy(expression, scope)))
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
    assert evaluate(decode(_pod(1, a="a" * 1000)), loaded).outcome == "allowed"
    decision = evaluate(decode(_pod(1, a="a" * (2 * 1024 * 1024 + 512 * 1024))), loaded)
    assert not decision.allowed and decision.outcome == "error"
    assert "[costly] CEL validations[0].expression: too costly to evaluate" in decision.message
    assert f"past the per-expression limit of {cost.PER_CALL_LIMIT:,}" in decision.message


def test_a_quadratic_policy_is_stopped_by_the_review_budget(tmp_path: Path) -> None:
    """`exists_one` over the pod's containers, once per container: 8,000 containers took
    84 s through the webhook; the budget stops it, answering with the failure action (the
    time it now takes: benchmarks/hostile_load.py)."""
    loaded = policies(tmp_path, _policy(
        "podSpec.containers.exists_one(c, c.name == container.name)", "container"))
    assert evaluate(decode(_pod(50)), loaded).outcome == "allowed"
    decision = evaluate(decode(_pod(4000)), loaded)
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
    decision = evaluate(decode(_pod(4000)), loaded)
    assert decision.allowed
    assert any("too costly to evaluate" in warning for warning in decision.warnings)
    [result] = decision.results
    assert result.status == "error" and result.policy == "costly"


def test_each_review_has_its_own_budget(tmp_path: Path) -> None:
    loaded = policies(tmp_path, _policy(
        "podSpec.containers.exists_one(c, c.name == container.name)", "container"))
    assert evaluate(decode(_pod(4000)), loaded).outcome == "error"
    assert evaluate(decode(_pod(50)), loaded).outcome == "allowed"


def test_the_estimate_grows_with_the_sizes_it_reads() -> None:
    text = "podSpec.containers.exists_one(c, c.name == container.name)"
    small = cost.estimate(text, cost.measure({"containers": [{"name": "a"}] * 10}))
    large = cost.estimate(text, cost.measure({"containers": [{"name": "a"}] * 1000}))
    assert 50 * small < large
    assert cost.estimate(text, cost.WORST) <= cost.STATIC_LIMIT


# --- what the runtime does beyond its tokens ---------------------------------------------
# Measured on the runtime (benchmarks/hostile_load.py): map() and filter() copy the list
# built so far at every element, so one over n elements copies n*n/2 of them and keeps every
# copy until the evaluation ends (8,000 elements: 5.8 s and 758 MiB); `+` copies both
# strings (a 2 MB annotation joined to each of 10,000 container names: 159 s and 19 GB);
# `in` on a list compares with every item. Each was charged one unit, as a token.


def test_map_and_filter_are_charged_for_the_copies_the_runtime_makes(tmp_path: Path) -> None:
    loaded = policies(tmp_path, _policy(
        "object.spec.containers.map(c, c.name).filter(n, n != '').size() > 0"))
    assert evaluate(decode(_pod(50)), loaded).outcome == "allowed"
    decision = evaluate(decode(_pod(3000)), loaded)
    assert decision.outcome == "error"
    assert "[costly] CEL validations[0].expression: too costly to evaluate" in \
        decision.message


def test_the_shipped_pod_security_profile_is_stopped_before_its_maps_take_gigabytes(
        tmp_path: Path) -> None:
    """pss-sysctls maps and filters the pod's sysctls: 9,000 of them took 6.5 s and 1.35 GB
    before the runtime's iteration limit stopped it; 3,000 were allowed after 1 s and 200
    MB. Now both are too costly at once, and an ordinary pod is judged as before."""
    from webhook import load_config, load_policies

    config = tmp_path / "config.yaml"
    config.write_text("podSecurity: {enforce: restricted}\n")
    loaded = load_policies(None, load_config(str(config)))
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "a"},
           "spec": {"securityContext": {"runAsNonRoot": True,
                                        "seccompProfile": {"type": "RuntimeDefault"},
                                        "sysctls": [{"name": "kernel.shm_rmid_forced",
                                                     "value": "0"}] * 3},
                    "containers": [{"name": "a", "image": "registry.example.com/a:1.0",
                                    "securityContext": {
                                        "allowPrivilegeEscalation": False,
                                        "capabilities": {"drop": ["ALL"]}},
                                    "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}}
    assert evaluate(decode(pod), loaded).allowed
    pod["spec"]["securityContext"]["sysctls"] *= 1000
    decision = evaluate(pod, loaded)
    assert decision.outcome == "error"
    [line] = [line for line in decision.message.splitlines() if "[pss-sysctls]" in line]
    assert "too costly to evaluate" in line


def test_concatenating_the_object_s_strings_is_charged_by_their_size(tmp_path: Path) -> None:
    loaded = policies(tmp_path, _policy(
        "object.spec.containers.all(c, (object.metadata.annotations['a'] + '/' + c.name)"
        ".size() > 0)"))
    assert evaluate(decode(_pod(20, a="x" * 100)), loaded).outcome == "allowed"
    decision = evaluate(decode(_pod(2000, a="x" * 100_000)), loaded)
    assert decision.outcome == "error" and "too costly to evaluate" in decision.message
    # a literal, or the comprehension's own element, is as cheap as before
    cheap = policies(tmp_path, _policy("object.spec.containers.all(c, (c.name + '-x')"
                                       ".size() > 0)"))
    assert evaluate(decode(_pod(2000, a="x" * 100_000)), cheap).outcome == "allowed"


def test_membership_in_a_list_of_the_object_is_charged_per_item(tmp_path: Path) -> None:
    loaded = policies(tmp_path, _policy("container in podSpec.containers", "container"))
    assert evaluate(decode(_pod(20)), loaded).outcome == "allowed"
    decision = evaluate(decode(_pod(2000)), loaded)
    assert decision.outcome == "error" and "too costly to evaluate" in decision.message
    literal = policies(tmp_path, _policy("container.name in ['c0', 'c1'] || true", "container"))
    assert evaluate(decode(_pod(2000)), literal).outcome == "allowed"


@pytest.mark.parametrize("expression", [
    "object.spec.containers.map(c, c.image).all(i, i.startsWith('registry.example.com/'))",
    "object.spec.containers.all(c, c.image.startsWith(object.metadata.namespace + '/'))",
    "object.spec.containers.all(c, c.name in object.spec.containers.map(x, x.name))",
])
def test_what_kubernetes_accepts_still_loads(tmp_path: Path, expression: str) -> None:
    """The load-time estimate charges as Kubernetes' does: the runtime's own copying and
    concatenation are charged on the object, at evaluation."""
    decision = evaluate(decode(_pod(3, a="x")), policies(tmp_path, _policy(expression)))
    assert decision.outcome in ("allowed", "denied"), decision.message


def test_concatenating_the_object_s_lists_is_charged_by_their_items(tmp_path: Path) -> None:
    """The containers joined to one more, once per container: 10,000 took 6.6 s and 3.2 GB
    before the iteration limit stopped it."""
    loaded = policies(tmp_path, _policy(
        "object.spec.containers.all(c, (object.spec.containers + [c]).size() > 0)"))
    assert evaluate(decode(_pod(20)), loaded).outcome == "allowed"
    decision = evaluate(decode(_pod(2000)), loaded)
    assert decision.outcome == "error" and "too costly to evaluate" in decision.message


def test_comparing_two_of_the_object_s_lists_is_charged_per_item(tmp_path: Path) -> None:
    """The pod's containers compared with themselves once per container: 3,000 took 10.6 s.
    A comparison with a literal or an element stays as cheap as a token."""
    loaded = policies(tmp_path, _policy(
        "object.spec.containers.all(c, object.spec.containers == object.spec.containers)"))
    assert evaluate(decode(_pod(20)), loaded).outcome == "allowed"
    decision = evaluate(decode(_pod(2000)), loaded)
    assert decision.outcome == "error" and "too costly to evaluate" in decision.message
    cheap = policies(tmp_path, _policy(
        "object.spec.containers.all(c, c.name != '' && object.spec.containers != [])"))
    assert evaluate(decode(_pod(2000)), cheap).outcome == "allowed"
