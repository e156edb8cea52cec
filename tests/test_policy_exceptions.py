"""PolicyExceptions in the engine: reading one, the checks on one, and what they except."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from builders import container, failing, judge, pod, result, with_config, workload

from webhook import Review
from webhook.engine import policy_exceptions
from webhook.engine.policy_exceptions import ExceptionError, index, read_exception

NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
ROOT = {"securityContext": {"runAsUser": 0}}


def exception(name: str = "gpu-root", namespace: str = "quickq-guard",
              policies: list[dict[str, Any]] | None = None,
              expires: datetime = NOW + timedelta(days=30), **match: Any) -> dict[str, Any]:
    return {
        "apiVersion": "quickq.io/v1alpha1", "kind": "PolicyException",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"policies": policies or [{"id": "disallow-root-user"}],
                 "match": {"namespaces": ["gpu-operator"], **match},
                 "expires": expires.isoformat().replace("+00:00", "Z"),
                 "reason": "the device plugin needs root", "ticket": "OPS-12"}}


def root_pod(name: str = "nvidia-device-plugin-x1", namespace: str = "gpu-operator",
             **labels: str) -> dict[str, Any]:
    return pod(container("plugin", **ROOT), name=name, namespace=namespace,
               labels=labels or {"app": "nvidia"})


POLICIES = with_config(exceptionNamespaces=["quickq-guard"])


def decide(obj: Any, *exceptions: dict[str, Any], now: datetime = NOW,
           policies: Any = None) -> Any:
    loaded = index(read_exception(e) for e in exceptions)
    return judge(obj, policies or POLICIES, Review(exceptions=loaded, now=now))


def test_an_excepted_finding_warns_names_the_exception_and_is_audited() -> None:
    assert not decide(root_pod()).allowed
    decision = decide(root_pod(), exception())
    assert decision.allowed and decision.outcome == "allowed"
    [warning] = [w for w in decision.warnings if "disallow-root-user" in w]
    assert "quickq-guard/gpu-root" in warning and "2026-12-31T10:00:00Z" in warning
    assert "the device plugin needs root" in warning
    audit = decision.audit_annotations["excepted.disallow-root-user"]
    assert "quickq-guard/gpu-root" in audit
    assert all(f.exception for f in result(decision, "disallow-root-user").findings)


def test_exceptions_from_other_namespaces_are_not_honoured() -> None:
    # The workload's own namespace, or any other not listed in exceptionNamespaces.
    for namespace in ("gpu-operator", "default"):
        decision = decide(root_pod(), exception(namespace=namespace))
        assert not decision.allowed and "disallow-root-user" in failing(decision)
    # The default config honours none at all.
    assert not decide(root_pod(), exception(), policies=with_config()).allowed


def test_an_exception_stops_applying_at_its_expiry() -> None:
    rule = exception(expires=NOW + timedelta(seconds=5))
    assert decide(root_pod(), rule, now=NOW + timedelta(seconds=4)).allowed
    assert not decide(root_pod(), rule, now=NOW + timedelta(seconds=5)).allowed


def test_an_exception_beyond_the_longest_lifetime_is_not_honoured() -> None:
    assert not decide(root_pod(), exception(expires=NOW + timedelta(days=91))).allowed
    longer = with_config(exceptionNamespaces=["quickq-guard"], exceptionMaxDays=365)
    assert decide(root_pod(), exception(expires=NOW + timedelta(days=91)),
                  policies=longer).allowed


@pytest.mark.parametrize(("match", "excepted"), [
    ({"kinds": ["Pod"]}, True), ({"kinds": ["DaemonSet"]}, False),
    ({"names": ["nvidia-device-plugin-*"]}, True), ({"names": ["other"]}, False),
    ({"selector": {"matchLabels": {"app": "nvidia"}}}, True),
    ({"selector": {"matchLabels": {"app": "other"}}}, False),
    ({"namespaces": ["gpu-*"]}, True), ({"namespaces": ["team-a"]}, False),
])
def test_match_narrows_the_objects(match: dict[str, Any], excepted: bool) -> None:
    assert decide(root_pod(), exception(**match)).allowed is excepted


def test_containers_narrow_a_container_policy() -> None:
    two = pod(container("plugin", **ROOT), container("sidecar", **ROOT),
              name="nvidia-device-plugin-x1", namespace="gpu-operator")
    rule = exception(policies=[{"id": "disallow-root-user", "containers": ["plug*"]}])
    decision = decide(two, rule)
    assert not decision.allowed
    findings = result(decision, "disallow-root-user").findings
    assert [bool(f.exception) for f in findings] == [True, False]
    assert "sidecar" in decision.message and "plugin" not in decision.message.split("\n", 1)[1]


def test_only_the_named_policies_are_excepted() -> None:
    bad = pod(container("plugin", image="nvidia/k8s-device-plugin:latest", **ROOT),
              name="nvidia-device-plugin-x1", namespace="gpu-operator")
    decision = decide(bad, exception())
    assert not decision.allowed and failing(decision) >= {"disallow-latest-tag"}
    assert "disallow-root-user" not in decision.message


def test_a_controller_and_its_pods() -> None:
    daemonset = workload("DaemonSet", container("plugin", **ROOT), name="nvidia-device-plugin",
                         namespace="gpu-operator")
    rule = exception(kinds=["DaemonSet", "Pod"], names=["nvidia-device-plugin*"])
    assert decide(daemonset, rule).allowed
    assert decide(root_pod(), rule).allowed


def test_wildcards_only_where_the_config_allows_them() -> None:
    rule = exception(policies=[{"id": "*"}])
    assert not decide(root_pod(), rule).allowed
    allowing = with_config(exceptionNamespaces=["quickq-guard"], exceptionWildcards=True)
    assert decide(root_pod(), rule, policies=allowing).allowed


def test_dry_run_mode_counts_an_excepted_denial_as_none() -> None:
    dry = with_config(exceptionNamespaces=["quickq-guard"], mode="dry-run")
    assert decide(root_pod(), policies=dry).outcome == "would-deny"
    assert decide(root_pod(), exception(), policies=dry).outcome == "allowed"


def test_exceptions_apply_as_of_the_time_the_review_was_made_unless_given_one() -> None:
    # Was: evaluate() raised ValueError at run time when exceptions came without now=. A
    # Review always holds a time: the one it was made at, unless given.
    made = datetime.now(UTC)
    review = Review(exceptions=index([read_exception(exception(
        expires=made + timedelta(hours=1)))]))
    assert made <= review.now <= datetime.now(UTC)
    assert judge(root_pod(), POLICIES, review).allowed
    expired = Review(exceptions=index([read_exception(exception(
        expires=made - timedelta(seconds=1)))]))
    assert not judge(root_pod(), POLICIES, expired).allowed


def test_a_thousand_exceptions_are_indexed_by_policy_and_namespace() -> None:
    many = [read_exception(exception(name=f"e{i}", policies=[{"id": "require-labels"}],
                                     namespaces=[f"team-{i}"])) for i in range(1000)]
    globbed = read_exception(exception(name="g", namespaces=["gpu-*"]))
    loaded = index([*many, read_exception(exception()), globbed])
    assert len(loaded) == 1002
    assert [e.key for e, _ in loaded.candidates("disallow-root-user", "gpu-operator")] == [
        "quickq-guard/gpu-root", "quickq-guard/g"]
    assert [e.key for e, _ in loaded.candidates("require-labels", "team-7")] == [
        "quickq-guard/e7"]
    assert list(loaded.candidates("require-labels", "default")) == []
    assert judge(root_pod(), POLICIES, Review(exceptions=loaded, now=NOW)).allowed


# The checks on a PolicyException object itself, as the webhook applies them.

def denial(obj: dict[str, Any], now: datetime | None = NOW, **config: Any) -> str:
    policies = with_config(exceptionNamespaces=["quickq-guard"], **config)
    decision = judge(obj, policies, Review(now=now))
    assert not decision.allowed, decision
    return decision.message


def test_a_valid_exception_is_admitted() -> None:
    decision = judge(exception(), POLICIES, Review(now=NOW))
    assert decision.allowed and not decision.warnings
    assert result(decision, "policy-exception").status == "pass"


def test_unknown_policy_ids_are_refused_with_the_known_ones() -> None:
    message = denial(exception(policies=[{"id": "disallow-rot-user"}]))
    assert "spec.policies[0].id: no policy 'disallow-rot-user'" in message
    assert "disallow-root-user" in message


def test_mutate_policies_cannot_be_excepted() -> None:
    assert "mutate policy" in denial(exception(policies=[{"id": "inject-startup-probe"}]))


def test_wildcards_are_refused_unless_allowed() -> None:
    assert "exceptionWildcards" in denial(exception(policies=[{"id": "*"}]))
    allowing = with_config(exceptionNamespaces=["quickq-guard"], exceptionWildcards=True)
    assert judge(exception(policies=[{"id": "*"}]), allowing, Review(now=NOW)).allowed
    assert "matches no loaded policy" in denial(exception(policies=[{"id": "nothing-*"}]),
                                                exceptionWildcards=True)


def test_expiry_in_the_past_or_too_far_is_refused_with_the_latest_allowed() -> None:
    assert "is in the past" in denial(exception(expires=NOW - timedelta(minutes=1)))
    message = denial(exception(expires=NOW + timedelta(days=120)))
    assert "more than 90 days away" in message and "2027-03-01T10:00:00Z or earlier" in message
    assert judge(exception(expires=NOW + timedelta(days=120)),
                 with_config(exceptionMaxDays=180),
                 Review(now=NOW)).allowed


@pytest.mark.parametrize(("change", "field"), [
    (lambda s: s.pop("reason"), "spec.reason: Field required"),
    (lambda s: s.pop("expires"), "spec.expires: Field required"),
    (lambda s: s.update(expires="2026-12-02T00:00:00"), "spec.expires"),  # no offset
    (lambda s: s.update(policies=[]), "spec.policies"),
    (lambda s: s["match"].pop("namespaces"), "spec.match.namespaces"),
    (lambda s: s.update(reason="x" * 1025), "spec.reason"),
    (lambda s: s.update(extra=1), "spec.extra: unknown field"),
])
def test_malformed_exceptions_are_refused_naming_the_field(change: Any, field: str) -> None:
    obj = exception()
    change(obj["spec"])
    assert field in denial(obj)
    with pytest.raises(ExceptionError, match=field.split(":")[0].replace("[", r"\[")):
        read_exception(obj)


def test_an_exception_outside_the_exception_namespaces_is_admitted_with_a_warning() -> None:
    decision = judge(exception(namespace="gpu-operator"), POLICIES, Review(now=NOW))
    assert decision.allowed
    [warning] = decision.warnings
    assert "has no effect" in warning and "quickq-guard" in warning


def test_any_api_version_of_the_group_is_an_exception() -> None:
    other = {**exception(), "apiVersion": "quickq.io/v1"}
    assert policy_exceptions.is_exception(other)
    assert not policy_exceptions.is_exception({**exception(), "apiVersion": "example.com/v1alpha1"})
    # Whatever version wrote it, it is honoured from the exception namespaces only.
    assert not decide(root_pod(), {**exception(namespace="gpu-operator"),
                                   "apiVersion": "quickq.io/v1"}).allowed


def test_without_a_time_the_time_checks_are_left_out() -> None:
    # The webhook's view reads exceptions without a time (the review checks expiry).
    expired = read_exception(exception(expires=NOW - timedelta(days=1)))
    assert policy_exceptions.problems(expired, POLICIES, None) == []
    # Was: evaluate() without now= left them out for a PolicyException object too. A Review
    # always holds a time, so the object is checked as of it.
    assert not judge(exception(expires=NOW - timedelta(days=1)), POLICIES,
                     Review(now=NOW)).allowed
    assert judge(exception(expires=NOW + timedelta(days=1)), POLICIES, Review(now=NOW)).allowed


def test_the_namespace_comes_from_the_request_when_metadata_has_none() -> None:
    obj = exception()
    del obj["metadata"]["namespace"]
    assert read_exception(obj, "quickq-guard").key == "quickq-guard/gpu-root"
    assert "metadata.namespace: Field required" in denial(obj)


def docs_exceptions() -> list[dict[str, Any]]:
    import re
    from pathlib import Path

    import yaml

    section = (Path(__file__).resolve().parent.parent / "docs" / "exceptions.md").read_text()
    return [document for block in re.findall(r"```yaml\n(.*?)```", section, re.S)
            for document in yaml.safe_load_all(block) if policy_exceptions.is_exception(document)]


def test_the_docs_examples_are_exceptions_the_webhook_admits() -> None:
    examples = docs_exceptions()
    assert len(examples) == 2
    for example in examples:
        assert judge(example, POLICIES, Review(now=NOW)).allowed


def test_the_docs_gpu_operator_example_excepts_the_device_plugin_only() -> None:
    gpu = read_exception(docs_exceptions()[0])
    labels = {"app": "nvidia-device-plugin-daemonset"}
    plugin = workload("DaemonSet", container("nvidia-device-plugin", **ROOT),
                      container("sidecar", **ROOT), name="nvidia-device-plugin-daemonset",
                      namespace="gpu-operator", labels=labels)
    decision = judge(plugin, POLICIES, Review(exceptions=index([gpu]), now=NOW))
    assert not decision.allowed and "sidecar" in decision.message
    alone = workload("DaemonSet", container("nvidia-device-plugin", **ROOT),
                     name="nvidia-device-plugin-daemonset", namespace="gpu-operator",
                     labels=labels)
    assert judge(alone, POLICIES, Review(exceptions=index([gpu]), now=NOW)).allowed
