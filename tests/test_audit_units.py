"""The audit's pure parts: what a report keeps of a verdict, its shape in both APIs, its caps,
its summary, hidden values, the results kept between scans; the Lease's decisions; and the
command's refusals. The controller against a real API server: tests/cluster/."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import msgspec
import pytest
from lightkube.core.exceptions import ApiError

from webhook.audit import cluster, lease, reports, scan, wire
from webhook.audit.state import Results
from webhook.engine.policy import Config
from webhook.engine.review import Review
from webhook.loader import load_policies
from webhook.testing import REPO

SECRET = "s3cr3t-planted-4711"


def deployment(name: str = "web", namespace: str = "team", uid: str = "u-1",
               **container: Any) -> dict[str, Any]:
    spec = {"name": "web", "image": "registry.example.com/web:1.0",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"memory": "64Mi"}}, **container}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "spec": {"selector": {"matchLabels": {"app": name}}, "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                         "containers": [spec]}}}}


def entries_of(obj: dict[str, Any], **config: Any) -> dict[str, scan.Entry]:
    policies = load_policies(None, Config(**config))
    judged = scan.judged(obj, "deployments", policies, Review())
    return {entry.policy: entry for entry in scan.entries(judged.decision)}


def test_a_clean_object_keeps_nothing():
    assert entries_of(deployment()) == {}


def test_an_object_of_an_excluded_namespace_keeps_nothing():
    assert entries_of(deployment(image="nginx:latest", namespace="kube-system")) == {}


def test_a_violation_is_a_fail_of_high_severity_naming_its_fix():
    found = entries_of(deployment(image="nginx:latest"))["disallow-latest-tag"]
    assert (found.result, found.severity, found.verdict, found.action) == \
        ("fail", "high", "deny", "enforce")
    assert "pin it to a version" in found.message


def test_in_dry_run_mode_a_violation_warns_with_what_enforce_would_do():
    found = entries_of(deployment(image="nginx:latest"), mode="dry-run")["disallow-latest-tag"]
    assert (found.result, found.severity, found.verdict) == ("warn", "high", "would-deny")


def test_a_patch_a_mutate_policy_would_make_is_a_pass_with_the_patch():
    probe = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10,
             "failureThreshold": 6}
    found = entries_of(deployment(livenessProbe=probe))["inject-startup-probe"]
    assert (found.result, found.severity, found.verdict) == ("pass", "info", "patch")
    assert found.message.startswith("would patch:")
    assert json.loads(found.patch)[0]["path"].endswith("/startupProbe")


def test_hidden_values_stay_hidden_in_messages_and_patches():
    probe = {"httpGet": {"path": "/", "port": 80, "httpHeaders": [
        {"name": "Authorization", "value": f"Bearer {SECRET}"}]}, "failureThreshold": 6,
        "periodSeconds": 10}
    obj = deployment(env=[{"name": "DB_PASSWORD", "value": SECRET}], livenessProbe=probe)
    found = entries_of(obj)
    assert {"no-plaintext-secrets", "inject-startup-probe"} <= set(found)
    results = Results()
    results.put(scan.subject(obj), tuple(found.values()), 1)
    text = json.dumps(reports.report(reports.OPENREPORTS, "team", results.held("team")))
    assert "DB_PASSWORD" in text and SECRET not in text


def rows(count: int, namespace: str = "team") -> Results:
    results = Results()
    for index in range(count):
        entry = scan.Entry("disallow-latest-tag" if index % 2 else "inject-startup-probe",
                           "fail" if index % 2 else "pass", f"message {index}", "high",
                           "validate", "enforce", "deny")
        results.put(scan.Subject("apps/v1", "Deployment", namespace, f"d{index}",
                                 f"u{index}"), (entry,), 100 + index)
    return results


def test_a_report_is_capped_with_a_last_result_saying_how_to_see_them_all():
    made = reports.report(reports.OPENREPORTS, "team", rows(6).held("team"), max_results=3)
    results = made["results"]
    assert len(results) == 4
    assert [r["result"] for r in results[:3]] == ["fail", "fail", "fail"]  # the worst first
    last = results[-1]
    assert last["policy"] == reports.TRUNCATED and "resources" not in last
    assert last["message"].startswith("3 more results left out")
    assert "quickq-guard audit --once --namespace team" in last["message"]
    assert made["summary"] == {"pass": 3, "fail": 3, "warn": 0, "error": 0, "skip": 0}


def test_a_report_stays_under_its_byte_budget_whatever_its_messages():
    results = Results()
    for index in range(400):
        entry = scan.Entry("require-requests", "fail", "x" * 4000, "high", "validate",
                           "enforce", "deny")
        results.put(scan.Subject("v1", "Pod", "team", f"p{index}", f"u{index}"), (entry,), 1)
    made = reports.report(reports.OPENREPORTS, "team", results.held("team"))
    assert len(json.dumps(made["results"], separators=(",", ":"))) < reports.REPORT_BYTES + 1024
    assert made["results"][-1]["policy"] == reports.TRUNCATED
    assert made["summary"]["fail"] == 400


def test_both_apis_have_the_same_results_in_their_own_kinds():
    held = list(rows(2).held("team"))
    open_reports = reports.report(reports.OPENREPORTS, "team", held)
    policy_report = reports.report(reports.WGPOLICYK8S, "team", held)
    cluster = reports.report(reports.WGPOLICYK8S, "", rows(1, "").held(""))
    assert (open_reports["apiVersion"], open_reports["kind"], open_reports["source"]) == \
        ("openreports.io/v1alpha1", "Report", "quickq-guard")
    assert (policy_report["apiVersion"], policy_report["kind"]) == \
        ("wgpolicyk8s.io/v1alpha2", "PolicyReport")
    assert "source" not in policy_report
    assert open_reports["results"] == policy_report["results"]
    assert open_reports["metadata"] == {
        "name": "quickq-guard", "namespace": "team",
        "labels": {"app.kubernetes.io/managed-by": "quickq-guard"}}
    assert cluster["kind"] == "ClusterPolicyReport" and "namespace" not in cluster["metadata"]
    result = open_reports["results"][0]
    assert result["source"] == "quickq-guard" and result["resources"] == [
        {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d1", "uid": "u1",
         "namespace": "team"}]


def test_the_fingerprint_ignores_timestamps_only():
    first = reports.report(reports.OPENREPORTS, "team", rows(2).held("team"))
    later = json.loads(json.dumps(first))
    for result in later["results"]:
        result["timestamp"]["seconds"] += 60
    assert reports.fingerprint(first) == reports.fingerprint(later)
    # what a write computes in one pass is what a report read back from the cluster gets
    made, fingerprint = reports.fingerprinted(reports.OPENREPORTS, "team", rows(2).held("team"))
    assert made == first and fingerprint == reports.fingerprint(later)
    capped = reports.fingerprinted(reports.OPENREPORTS, "team", rows(3).held("team"), 1)
    assert capped[1] == reports.fingerprint(json.loads(json.dumps(capped[0])))
    later["results"][0]["message"] = "other"
    assert reports.fingerprint(first) != reports.fingerprint(later)


@pytest.mark.parametrize("api", [reports.OPENREPORTS, reports.WGPOLICYK8S])
@pytest.mark.parametrize("namespace", ["team", ""])
def test_a_write_sends_the_report_field_for_field_and_reads_back_only_its_version(
        api: reports.ReportApi, namespace: str) -> None:
    made = reports.report(api, namespace, rows(3, namespace).held(namespace))
    made["metadata"]["resourceVersion"] = "41"
    of = cluster.kind(api.group, api.version, api.kind if namespace else api.cluster_kind,
                      api.plural if namespace else api.cluster_plural, bool(namespace))
    sent = wire.sent(made, of.resource)
    assert json.loads(msgspec.json.encode(sent)) == json.loads(json.dumps(made))
    answer = dict(made, status={"x": 1}, metadata=dict(
        made["metadata"], resourceVersion="42", uid="u", managedFields=[{"manager": "m"}]))
    assert wire.version(msgspec.json.decode(json.dumps(answer), type=type(sent))) == "42"


def test_results_follow_objects_and_mark_what_changed():
    results = Results()
    subject = scan.Subject("apps/v1", "Deployment", "team", "web", "u-1")
    entry = scan.Entry("disallow-latest-tag", "fail", "m", "high", "validate", "enforce",
                       "deny")
    results.put(subject, (entry,), 100)
    assert results.take_dirty() == {"team"}
    results.put(subject, (entry,), 200)  # the same again: nothing to write
    assert results.take_dirty() == set()
    assert next(results.held("team")).since == 100
    results.put(subject, (), 300)  # fixed
    assert results.take_dirty() == {"team"} and not results.objects
    assert results.counts[("disallow-latest-tag", "fail")] == 0
    results.put(subject, (entry,), 400)
    results.keep_only(set())  # deleted while no watch ran: the next scan did not see it
    assert not results.objects and results.take_dirty() == {"team"}


class FakeLeases:
    """The get, create and replace of one Lease, with resourceVersions, as the API server
    answers them."""

    def __init__(self) -> None:
        self.stored: dict[str, Any] | None = None
        self.version = 0

    async def get(self, resource: Any, name: str, namespace: str) -> dict[str, Any]:
        if self.stored is None:
            raise _api_error(404)
        return json.loads(json.dumps(self.stored))

    async def create(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.stored is not None:
            raise _api_error(409)
        return self._store(dict(body))

    async def replace(self, body: dict[str, Any]) -> dict[str, Any]:
        assert self.stored is not None
        if body["metadata"].get("resourceVersion") != self.stored["metadata"][
                "resourceVersion"]:
            raise _api_error(409)
        return self._store(dict(body))

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        body["metadata"] = {**body["metadata"], "resourceVersion": str(self.version)}
        self.stored = body
        return body


def _api_error(code: int) -> ApiError:
    class Response:
        status_code = code

        def json(self) -> dict[str, Any]:
            return {"kind": "Status", "code": code, "message": f"status {code}"}

    return ApiError(request=None, response=Response())  # type: ignore[arg-type]


def test_one_replica_leads_and_the_other_takes_over_once_the_lease_expires():
    api = FakeLeases()
    now = [0.0]
    first = lease.Lease(api, "ns", "audit", duration=15, me="first", clock=lambda: now[0])
    second = lease.Lease(api, "ns", "audit", duration=15, me="second", clock=lambda: now[0])

    async def steps() -> None:
        await first.attempt()
        await second.attempt()
        assert first.leading and not second.leading
        now[0] = 9.0
        await first.attempt()  # renewed
        now[0] = 20.0
        await second.attempt()  # renewed at 9, seen at 20: not expired by its clock yet
        assert not second.leading
        assert not first.leading  # 11 s since its renewal: past its deadline, it stops
        now[0] = 36.0
        await second.attempt()  # unchanged for 16 s of its own clock: it takes over
        assert second.leading
        await first.attempt()
        assert not first.leading
        assert api.stored is not None
        assert api.stored["spec"]["holderIdentity"] == "second"
        assert api.stored["spec"]["leaseTransitions"] == 1
        await second.release()
        assert api.stored["spec"]["holderIdentity"] == ""
        await first.attempt()  # given up: taken at once
        assert first.leading

    asyncio.run(steps())


def test_of_two_replicas_replacing_the_same_record_one_leads():
    api = FakeLeases()
    second = lease.Lease(api, "ns", "audit", duration=15, me="second")
    third = lease.Lease(api, "ns", "audit", duration=15, me="third")

    async def steps() -> None:
        await lease.Lease(api, "ns", "audit", me="gone").attempt()
        read_by_second = await api.get(None, "audit", "ns")
        read_by_third = await api.get(None, "audit", "ns")
        await second._replace(read_by_second, {"holderIdentity": "second"})
        await third._replace(read_by_third, {"holderIdentity": "third"})  # a conflict

    asyncio.run(steps())
    assert second.leading and not third.leading
    assert api.stored is not None and api.stored["spec"]["holderIdentity"] == "second"


def audit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook.cli", "audit", *args], cwd=REPO,
                          capture_output=True, text=True, check=False)


def test_a_metrics_port_in_use_is_said_clearly(tmp_path):
    import socket

    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        config = tmp_path / "kubeconfig"
        config.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: "
                          "'https://127.0.0.1:1'}}]\nusers: [{name: u, user: {token: t}}]\n"
                          "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
                          "current-context: c\n")
        done = audit("--kubeconfig", str(config), "--metrics-port",
                     str(taken.getsockname()[1]))
    assert done.returncode == 2, done.stderr
    assert "cannot serve metrics on port" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("args, says", [
    (("--namespace", "team"), "--namespace is for --once"),
    (("--once", "--kubeconfig", "/nonexistent/kubeconfig"), "no cluster to audit"),
    (("--kubeconfig", "/nonexistent/kubeconfig"), "no cluster to audit"),
    (("--once", "--max-results", "0"), "must be 1 or more"),
    (("--resync", "-1"), "must be more than 0"),
])
def test_the_command_refuses_bad_input_clearly(args, says):
    done = audit(*args)
    assert done.returncode == 2
    assert says in done.stderr and "Traceback" not in done.stderr


def test_namespaces_the_webhook_never_judges_are_left_alone():
    from webhook.audit.cluster import Namespaces, judged_namespace

    config = Config(excludeNamespaces=("kube-*", "platform"))
    seen = Namespaces().seen("ADDED", {"metadata": {"name": "quiet",
                                                    "labels": {"quickq.io/ignore": "true"}}})
    seen = seen.seen("MODIFIED", {"metadata": {"name": "old",
                                               "deletionTimestamp": "2026-12-07T00:00:00Z"}})
    assert seen.skipped == {"quiet", "old"}
    assert [judged_namespace(name, config, seen.skipped) for name in
            ("team", "", "kube-system", "platform", "quiet", "old")] == \
        [True, True, False, False, False, False]
    seen = seen.seen("MODIFIED", {"metadata": {"name": "quiet", "labels": {}}})
    seen = seen.seen("DELETED", {"metadata": {"name": "old"}})
    assert seen.skipped == frozenset()  # a namespace made again with that name is judged


def test_the_kinds_audited_are_those_the_webhook_judges():
    from webhook.audit.cluster import built_in_kinds, judged_custom_kind

    config = Config(customKinds=({"group": "example.com", "kind": "Trainer",
                                  "podTemplates": ["spec.template"]},))
    assert judged_custom_kind("ray.io", "RayCluster", config)
    assert judged_custom_kind("example.com", "Trainer", config)
    assert judged_custom_kind("quickq.io", "NodeTemplate", config)
    assert not judged_custom_kind("apps", "Deployment", config)  # a built-in one
    assert not judged_custom_kind("example.com", "Other", config)
    names = [kind.kind for kind in built_in_kinds(load_policies(None, config))]
    assert names[:2] == ["ResourceClaim", "ResourceClaimTemplate"]  # before the pods
    assert {"Pod", "Deployment", "CronJob", "ConfigMap"} <= set(names)
    off = Config(policies={"no-plaintext-secrets": {"action": "off"}})
    assert "ConfigMap" not in [kind.kind for kind in built_in_kinds(load_policies(None, off))]
