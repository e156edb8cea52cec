"""Opt-outs only for those trusted with them: a Namespace with an excluded name, or one that
gets the quickq.io/ignore=true label, is denied unless the requester is in optOutGroups."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from builders import judge, judge_given, with_config

from webhook import Review

TENANT = Review(username="tenant", groups=("self-service", "system:authenticated"))
ADMIN = Review(username="admin", groups=("system:masters", "system:authenticated"))
KUBEADM = Review(username="kubernetes-admin", groups=("kubeadm:cluster-admins",))
SYSTEM = ["kube-system", "longhorn-system", "openebs"]


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, **({"labels": labels} if labels else {})}}


def policies() -> Any:
    return with_config(excludeNamespaces=[*SYSTEM, "team-*-exempt"])


@pytest.mark.parametrize("name", [*SYSTEM, "team-a-exempt"])
def test_a_tenant_may_not_create_a_namespace_that_is_never_judged(name: str) -> None:
    decision = judge_given(namespace(name), policies(), TENANT)
    assert not decision.allowed
    assert decision.outcome == "denied"
    assert f"[namespace-opt-out] namespace {name} is one quickq-guard never judges" in \
        decision.message
    assert "only members of system:masters, kubeadm:cluster-admins may create it" in \
        decision.message


def test_a_tenant_may_not_create_a_namespace_born_with_the_ignore_label() -> None:
    decision = judge_given(namespace("team-a", **{"quickq.io/ignore": "true"}), policies(),
                           TENANT)
    assert not decision.allowed
    assert "the label quickq.io/ignore=true leaves every pod of the namespace unjudged" in \
        decision.message
    assert "(field: metadata.labels[quickq.io/ignore])" in decision.message


def test_a_tenant_may_not_add_the_ignore_label_later() -> None:
    old = namespace("team-a", team="a")
    new = namespace("team-a", team="a", **{"quickq.io/ignore": "true"})
    decision = judge_given(new, policies(), replace(TENANT, operation="UPDATE", old_object=old))
    assert not decision.allowed
    assert "quickq.io/ignore=true" in decision.message


def test_what_opts_nothing_out_is_admitted() -> None:
    kept = namespace("team-a", **{"quickq.io/ignore": "true"})
    for new, operation, old in [
            (namespace("team-a"), "CREATE", None),
            (namespace("team-a", **{"quickq.io/ignore": "false"}), "CREATE", None),
            # a label already there before this update, an existing system namespace edited
            (namespace("team-a", **{"quickq.io/ignore": "true", "x": "1"}), "UPDATE", kept),
            (namespace("openebs", team="storage"), "UPDATE", namespace("openebs"))]:
        decision = judge_given(new, policies(),
                               replace(TENANT, operation=operation, old_object=old))
        assert decision.allowed, (new, decision.message)
        assert decision.outcome == "allowed"


@pytest.mark.parametrize("admin", [ADMIN, KUBEADM])
def test_an_administrator_may_opt_out(admin: Review) -> None:
    for obj in (namespace("longhorn-system"), namespace("t", **{"quickq.io/ignore": "true"})):
        decision = judge_given(obj, policies(), admin)
        assert decision.allowed
        assert "may opt namespaces out" in decision.results[0].reason


def test_the_trusted_groups_are_configured_and_globs_work() -> None:
    configured = with_config(excludeNamespaces=SYSTEM, optOutGroups=["platform-*"])
    obj = namespace("openebs")
    assert judge(obj, configured, Review(username="u", groups=["platform-storage"])).allowed
    assert not judge(obj, configured, ADMIN).allowed  # no longer in the list
    nobody = with_config(excludeNamespaces=SYSTEM, optOutGroups=[])
    denied = judge(obj, nobody, ADMIN)
    assert "only members of no group (optOutGroups is empty)" in denied.message


def test_excluded_users_and_groups_are_never_judged_here_either() -> None:
    configured = with_config(excludeNamespaces=SYSTEM, excludeUsers=["ci"],
                             excludeGroups=["deployers"])
    assert judge(namespace("openebs"), configured, Review(username="ci", groups=[])).allowed
    assert judge(namespace("openebs"), configured,
                 Review(username="x", groups=("deployers",))).allowed


def test_in_dry_run_mode_the_denial_is_a_warning() -> None:
    configured = with_config(excludeNamespaces=SYSTEM, mode="dry-run")
    decision = judge(namespace("openebs"), configured, TENANT)
    assert decision.allowed and decision.outcome == "would-deny"
    assert any(w.startswith("[namespace-opt-out] would deny: namespace openebs")
               for w in decision.warnings)


def test_offline_a_namespace_is_not_judged_since_no_requester_is_known() -> None:
    decision = judge(namespace("openebs"), policies())
    assert decision.allowed and decision.skipped
    assert "only the webhook knows" in decision.skipped


def test_nothing_else_about_a_namespace_is_judged() -> None:
    """The validate policies never run on a Namespace: only its opt-outs are judged."""
    decision = judge(namespace("team-a"), policies(), TENANT)
    assert [result.policy for result in decision.results] == ["namespace-opt-out"]
