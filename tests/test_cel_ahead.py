"""A review's CEL evaluated ahead in one library call (cel.prefetch): every Pod Security
policy of `restricted` judged with no call of its own, and a result taken from there only
where the policy's own evaluation would give the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from builders import container, pod

from webhook import decode, evaluate, load_config, load_policies
from webhook.engine import cel
from webhook.engine.cel import kubecel


def test_a_pod_under_restricted_is_one_library_call(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("podSecurity:\n  enforce: restricted\n")
    policies = load_policies(None, load_config(config))
    obj = decode(pod(container("app", securityContext={"privileged": True})))
    before = evaluate(obj, policies)
    calls: list[str] = []
    real, real_all = kubecel.evaluate, kubecel.evaluate_all

    def one(*args: Any) -> Any:
        calls.append("one")
        return real(*args)

    def all_of(*args: Any) -> Any:
        calls.append("all")
        return real_all(*args)

    monkeypatch.setattr(kubecel, "evaluate", one)
    monkeypatch.setattr(kubecel, "evaluate_all", all_of)
    after = evaluate(obj, policies)
    assert [(r.policy, r.status, [f.message for f in r.findings]) for r in after.results] == \
        [(r.policy, r.status, [f.message for f in r.findings]) for r in before.results]
    assert any(r.status == "fail" and r.policy.startswith("pss-") for r in after.results)
    # One call ahead (only a messageExpression of what failed would be asked afterwards).
    assert calls == ["all"]


def test_a_result_ahead_is_not_taken_beyond_the_budget_left() -> None:
    [expression], _ = cel.compile_policy(
        "object", (), [cel.Source("", "object.spec.items.all(i, i > 0)", "bool")])
    bound = cel.review_activation({"object": {"spec": {"items": list(range(1, 200))}}})
    cel.prefetch(bound, [(expression, cel.POLICY_BUDGET, (-1,))])
    assert bound.known  # evaluated ahead
    cost = int(next(iter(bound.known.values()))["c"])
    enough = cel.Budget(cost)
    assert cel.evaluate(expression, bound, budget=enough) is True
    assert enough.left == 0
    with pytest.raises(cel.TooCostly):
        cel.evaluate(expression, bound, budget=cel.Budget(cost - 1))
