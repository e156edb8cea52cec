"""What /validate and /mutate answer, checked as the API server checks it."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import httpx
import jsonpatch
import kubernetes_validate
from server_helpers import Server, bad_pod, pod, post, review, with_probe

from webhook.testing import wait_until


def patched(obj: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    assert response["patchType"] == "JSONPatch"
    operations = json.loads(base64.b64decode(response["patch"]))
    assert isinstance(operations, list) and operations
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(obj), operations)
    # The patched object is still a Pod the API server accepts.
    kubernetes_validate.validate(result, "1.31", strict=True)
    return result


def test_allow(client: httpx.Client) -> None:
    response = post(client, "/validate", review(pod()))
    assert response["allowed"] is True
    assert "status" not in response and "patch" not in response and "patchType" not in response
    assert "warnings" not in response


def test_deny_lists_every_violation_with_its_fix(client: httpx.Client) -> None:
    response = post(client, "/validate", review(bad_pod()))
    assert response["allowed"] is False
    status = response["status"]
    assert status["code"] == 403
    message = status["message"]
    for policy in ("disallow-latest-tag", "disallow-root-user", "no-plaintext-secrets"):
        assert f"[{policy}]" in message
    assert "runAsNonRoot: true" in message and "secretKeyRef" in message
    assert "hunter2" not in message


def test_warn_findings_are_whole_warnings_of_at_most_256_bytes(client: httpx.Client) -> None:
    response = post(client, "/validate", review(with_probe(pod())))
    assert response["allowed"] is True
    warnings = response["warnings"]
    [warning] = [w for w in warnings if "liveness-probe-tolerance" in w]
    assert "restarts after 30s" in warning and warning.endswith("to 6 or more (>= 60s)")
    assert all(0 < len(w.encode()) <= 256 for w in warnings)
    assert sum(len(w.encode()) for w in warnings) < 4096
    # /mutate answers for mutate policies only: the validate warning is not repeated there.
    mutated = post(client, "/mutate", review(with_probe(pod())))
    assert not any("liveness-probe-tolerance" in w for w in mutated.get("warnings", []))


def test_audit_findings_are_audit_annotations(client: httpx.Client) -> None:
    obj = pod()
    del obj["metadata"]["labels"]
    response = post(client, "/validate", review(obj))
    assert response["allowed"] is True
    assert "metadata.labels.app" in response["auditAnnotations"]["require-labels"]
    assert all(len(key) <= 63 for key in response["auditAnnotations"])


def test_mutate_returns_a_patch_that_applies_and_validates(client: httpx.Client) -> None:
    obj = with_probe(pod())
    obj["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "1"
    obj["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "1"
    response = post(client, "/mutate", review(obj))
    assert response["allowed"] is True
    result = patched(obj, response)
    container = result["spec"]["containers"][0]
    assert container["startupProbe"]["httpGet"] == {"path": "/healthz", "port": 8080}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} \
        in result["spec"]["tolerations"]
    # Called again on the patched object (reinvocation), the webhook has nothing to add.
    again = post(client, "/mutate", review(result))
    assert "patch" not in again and "patchType" not in again


def test_validate_never_returns_a_patch(client: httpx.Client) -> None:
    response = post(client, "/validate", review(with_probe(pod())))
    assert "patch" not in response and "patchType" not in response


def test_no_patch_when_nothing_to_change(client: httpx.Client) -> None:
    response = post(client, "/mutate", review(pod()))
    assert response["allowed"] is True
    assert "patch" not in response and "patchType" not in response


def test_update_with_preexisting_violation_warns(client: httpx.Client) -> None:
    old = bad_pod()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["version"] = "2"
    response = post(client, "/validate", review(new, operation="UPDATE", old=old))
    assert response["allowed"] is True
    assert "(already violated before this update)" in " ".join(response["warnings"])
    # A new violation on UPDATE is still denied.
    fresh = pod()
    worse = copy.deepcopy(fresh)
    worse["spec"]["containers"][0]["image"] = "nginx:latest"
    denied = post(client, "/validate", review(worse, operation="UPDATE", old=fresh))
    assert denied["allowed"] is False


def test_excluded_namespace_and_mirror_pod_are_untouched(client: httpx.Client) -> None:
    obj = bad_pod()
    obj["metadata"]["namespace"] = "kube-system"
    for path in ("/validate", "/mutate"):
        response = post(client, path, review(obj, namespace="kube-system"))
        assert response["allowed"] is True
        assert "patch" not in response and "warnings" not in response
    mirror = with_probe(bad_pod())
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    from_kubelet = review(mirror, username="system:node:gpu-1")
    from_kubelet["request"]["userInfo"]["groups"] = ["system:nodes", "system:authenticated"]
    for path in ("/validate", "/mutate"):
        response = post(client, path, from_kubelet)
        assert response["allowed"] is True and "patch" not in response


def test_a_mirror_pod_not_made_by_a_kubelet_is_judged(client: httpx.Client) -> None:
    mirror = bad_pod()
    mirror["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc"}
    response = post(client, "/validate", review(mirror, username="system:node:gpu-1"))
    assert response["allowed"] is False  # a node's name without the system:nodes group
    assert "[disallow-latest-tag]" in response["status"]["message"]


def test_v1beta1_is_answered_in_v1beta1(client: httpx.Client) -> None:
    body = review(bad_pod(), version="admission.k8s.io/v1beta1")
    response = post(client, "/validate", body)
    assert response["allowed"] is False


def test_delete_is_allowed_without_judging(client: httpx.Client) -> None:
    body = review(bad_pod(), operation="DELETE")
    body["request"]["oldObject"], body["request"]["object"] = body["request"]["object"], None
    for path in ("/validate", "/mutate"):
        response = post(client, path, body)
        assert response["allowed"] is True and "patch" not in response


def test_object_that_cannot_be_judged_is_denied_naming_the_problem(
        client: httpx.Client) -> None:
    obj = pod()
    obj["spec"]["containers"] = "oops"
    response = post(client, "/validate", review(obj))
    assert response["allowed"] is False
    assert "spec.containers: expected a list" in response["status"]["message"]


def test_request_dry_run_is_judged_normally(client: httpx.Client) -> None:
    response = post(client, "/validate", review(bad_pod(), dry_run=True))
    assert response["allowed"] is False


def test_review_log_line_names_findings_not_values(server: Server,
                                                   client: httpx.Client) -> None:
    body = review(bad_pod())
    post(client, "/validate", body)
    # The server writes a review's line at the end of its event loop's pass, which may come
    # after the client has read the answer.
    def logged() -> list[dict[str, Any]]:
        return [line for line in server.logs() if line.get("uid") == body["request"]["uid"]]

    wait_until(lambda: bool(logged()), timeout=5, what="the review's log line", interval=0.02)
    lines = logged()
    assert len(lines) == 1
    line = lines[0]
    assert line["decision"] == "denied" and line["operation"] == "CREATE"
    assert line["namespace"] == "team-a" and line["name"] == "bad" and line["user"] == "alice"
    assert {"policy": "no-plaintext-secrets", "verdict": "deny", "container": "web",
            "path": "spec.containers[0].env[0].value", "preexisting": False} in line["findings"]
    assert isinstance(line["latency_ms"], float)
    assert "hunter2" not in server.log_path.read_text()


def test_health_ready_and_metrics(server: Server, client: httpx.Client) -> None:
    assert client.get("/healthz").status_code == 200
    assert client.get("/readyz").status_code == 200
    post(client, "/validate", review(bad_pod()))
    text = client.get("/metrics").text
    assert 'quickq_guard_reviews_total{decision="denied",endpoint="validate",kind="Pod",' \
           'operation="CREATE"}' in text
    assert 'quickq_guard_findings_total{mode="enforce",policy="no-plaintext-secrets",' \
           'verdict="deny"}' in text
    assert "quickq_guard_review_duration_seconds_bucket" in text
    assert "quickq_guard_certificate_expiry_timestamp_seconds " in text
