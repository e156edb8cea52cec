"""Subresources: `kubectl debug` adds an ephemeral container through pods/ephemeralcontainers,
and the webhook judges it as it judges a Pod's ephemeral containers; a subresource that does
not carry the judged object (pods/status) is admitted untouched."""

from __future__ import annotations

import copy
from typing import Any

import httpx
from server_helpers import pod, post, review

# What `kubectl debug -it web --image=busybox:latest --profile=sysadmin` adds to the Pod.
DEBUGGER = {"name": "debugger-x7k2p", "image": "busybox:latest", "stdin": True, "tty": True,
            "imagePullPolicy": "Always", "terminationMessagePolicy": "File",
            "securityContext": {"privileged": True, "runAsUser": 0}}



def debug_review(debugger: dict[str, Any], sub_resource: str = "ephemeralcontainers",
                 old: dict[str, Any] | None = None) -> dict[str, Any]:
    """The review the API server sends for an UPDATE of the subresource: the whole Pod."""
    before = old or pod()
    after = copy.deepcopy(before)
    after["spec"]["ephemeralContainers"] = [debugger]
    body = review(after, operation="UPDATE", old=before)
    body["request"]["subResource"] = body["request"]["requestSubResource"] = sub_resource
    return body


def test_a_debug_container_is_denied_naming_it_and_its_fields(client: httpx.Client) -> None:
    response = post(client, "/validate", debug_review(DEBUGGER))
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "[disallow-latest-tag] ephemeralContainer 'debugger-x7k2p'" in message
    assert "spec.ephemeralContainers[0].image" in message
    assert "[disallow-root-user] ephemeralContainer 'debugger-x7k2p'" in message
    # The Pod's own container was admitted before; nothing is said about it.
    assert "container 'web'" not in message


def test_a_pinned_non_root_debug_container_is_admitted(client: httpx.Client) -> None:
    debugger = {**DEBUGGER, "image": "busybox:1.37",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}
    response = post(client, "/validate", debug_review(debugger))
    assert response["allowed"] is True, response


def test_what_the_pod_broke_before_only_warns(client: httpx.Client) -> None:
    old = pod()
    old["spec"]["containers"][0]["image"] = "nginx:latest"
    debugger = {**DEBUGGER, "image": "busybox:1.37",
                "securityContext": {"runAsNonRoot": True, "runAsUser": 1000}}
    response = post(client, "/validate", debug_review(debugger, old=old))
    assert response["allowed"] is True
    assert any("already violated before this update" in w for w in response["warnings"])


def test_the_mutating_webhook_never_patches_the_subresource(client: httpx.Client) -> None:
    response = post(client, "/mutate", debug_review(DEBUGGER))
    assert response["allowed"] is True
    assert "patch" not in response and "patchType" not in response


def test_other_subresources_are_admitted_untouched(client: httpx.Client) -> None:
    response = post(client, "/validate", debug_review(DEBUGGER, sub_resource="status"))
    assert response == {"uid": response["uid"], "allowed": True}
