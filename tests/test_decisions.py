"""Decisions are immutable values with one outcome, worked out by the engine."""

from __future__ import annotations

import dataclasses

import pytest
from builders import container, gpu_container, judge, pod, with_config

from webhook import Review, decode, evaluate, load_policies


def test_a_decision_cannot_be_changed_in_place():
    decision = judge(pod(container(image="app:latest")))
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.allowed = True  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        decision.results[0].status = "pass"  # type: ignore[misc]
    failed = next(r for r in decision.results if r.findings)
    with pytest.raises(dataclasses.FrozenInstanceError):
        failed.findings[0].message = ""  # type: ignore[misc]
    with pytest.raises(TypeError):
        decision.audit_annotations["x"] = "y"  # type: ignore[index]


def test_no_evaluation_sees_another_evaluations_results():
    policies = load_policies()
    first = evaluate(decode(pod(container())), policies)
    changed = [dataclasses.replace(r, status="fail") for r in first.results]
    assert all(r.status == "fail" for r in changed)
    second = evaluate(decode(pod(container())), policies)
    assert [r.status for r in second.results] == [r.status for r in first.results]
    assert "fail" not in {r.status for r in second.results}


def test_decisions_hash_and_compare_by_value():
    policies = load_policies()
    one = evaluate(decode(pod(gpu_container())), policies)
    two = evaluate(decode(pod(gpu_container())), policies)
    assert one.patch  # a decision with a patch and patched object still hashes
    assert hash(one) == hash(two) and one == two
    assert len({one, two}) == 1


@pytest.mark.parametrize(("obj", "mode", "outcome", "allowed"), [
    (pod(container()), "enforce", "allowed", True),
    (pod(container(image="app:latest")), "enforce", "denied", False),
    (pod(gpu_container()), "enforce", "patched", True),
    (pod(container(image="app:latest")), "dry-run", "would-deny", True),
    (pod(gpu_container()), "dry-run", "would-patch", True),
    ({"kind": "Pod"}, "enforce", "error", False),
    ({"kind": "Pod"}, "dry-run", "error", True),
])
def test_the_outcome_is_named_once_by_the_engine(obj, mode, outcome, allowed):
    decision = judge(obj, with_config(mode=mode))
    assert (decision.outcome, decision.allowed) == (outcome, allowed)


def test_a_preexisting_violation_is_no_would_deny_in_dry_run():
    old = pod(container(image="app:latest"))
    new = pod(container(image="app:latest"), labels={"app": "a", "team": "x"})
    decision = evaluate(decode(new),
                        with_config(mode="dry-run"),
                        Review(operation="UPDATE", old_object=decode(old)))
    assert decision.outcome == "allowed"


# --- every finding carries its verdict, decided once ----------------------------------------

def _verdicts(decision, policy):
    return {decision.verdict(r, found) for r in decision.results if r.policy == policy
            for found in r.findings}


@pytest.mark.parametrize(("config", "verdict"), [
    ({}, "deny"),
    ({"mode": "dry-run"}, "would-deny"),
    ({"policies": {"disallow-latest-tag": {"action": "warn"}}}, "warn"),
    ({"policies": {"disallow-latest-tag": {"action": "audit"}}}, "audit"),
])
def test_each_finding_says_what_it_means(config, verdict):
    decision = judge(pod(container(image="app:latest")), with_config(**config))
    assert _verdicts(decision, "disallow-latest-tag") == {verdict}


def test_a_patch_finding_says_patch_or_would_patch():
    assert _verdicts(judge(pod(gpu_container())), "inject-gpu-toleration") == {"patch"}
    decision = judge(pod(gpu_container()), with_config(mode="dry-run"))
    assert _verdicts(decision, "inject-gpu-toleration") == {"would-patch"}


def test_a_violation_an_update_keeps_is_a_warning():
    old = pod(container(image="app:latest"))
    new = pod(container(image="app:latest"), labels={"app": "a", "team": "x"})
    decision = evaluate(decode(new),
                        with_config(),
                        Review(operation="UPDATE", old_object=decode(old)))
    assert _verdicts(decision, "disallow-latest-tag") == {"warn"}


def test_in_dry_run_another_policys_error_leaves_a_finding_would_deny(tmp_path):
    """The outcome is "error" (a policy could not judge), yet each finding keeps its own
    verdict: no output may read the outcome and call the finding a denial."""
    import shutil
    from pathlib import Path

    from webhook.engine.policy import Config
    from webhook.loader import default_policies_dir

    policies = tmp_path / "policies"
    shutil.copytree(default_policies_dir(), policies, ignore=shutil.ignore_patterns("tests"))
    (policies / "broken.yaml").write_text(
        "id: broken-annotation-check\ndescription: errors on every pod\ntype: validate\n"
        "action: enforce\nvalidations:\n"
        "  - expression: \"object.metadata.annotations['team'] == 'ml'\"\n"
        "    message: set the team annotation\n")
    loaded = load_policies(Path(policies), Config(mode="dry-run"))
    decision = judge(pod(container(image="app:latest")), loaded)
    assert decision.outcome == "error" and decision.allowed
    assert _verdicts(decision, "disallow-latest-tag") == {"would-deny"}
