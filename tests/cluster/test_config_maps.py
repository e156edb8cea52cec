"""ConfigMaps judged by no-plaintext-secrets through a real kube-apiserver, in the chart's
entry of their own: a data key named like a secret with a literal value is denied, the
cluster's own components are never held up (skipped by a matchCondition, and admitted while
the webhook is down, failurePolicy Ignore), and an OCI image volume's `latest` is denied."""

from __future__ import annotations

import json
from typing import Any

from cluster_helpers import (
    ControlPlane,
    Guard,
    container,
    dry_run_create,
    pod,
    wait_until,
)

NAMESPACE = "config-maps"
PLANTED = "pl4nted-S3cret-cm-93f1"
DEAD = "https://127.0.0.1:1"  # nothing listens: every call fails at once
FAILED_CALL = "failed calling webhook"


def config_map(name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": NAMESPACE}, "data": data}


def test_a_config_map_holding_a_secret_is_denied_without_echoing_it(kube: ControlPlane) -> None:
    done = dry_run_create(kube, config_map("db-credentials", DB_PASSWORD=PLANTED,
                                           LOG_LEVEL="info"))
    assert done.returncode == 1
    assert 'admission webhook "configmaps.quickq-guard.quickq.io" denied the request' \
        in done.stderr
    assert "[no-plaintext-secrets] data key DB_PASSWORD holds a literal value" in done.stderr
    assert PLANTED not in done.stderr
    assert dry_run_create(kube, config_map("settings", LOG_LEVEL="info",
                                           TOKEN_TTL="3600")).returncode == 0


def test_the_clusters_own_components_are_not_judged(kube: ControlPlane) -> None:
    """kube-controller-manager writes kube-root-ca.crt in every namespace: whatever it
    writes, no webhook call (the matchCondition) holds it up."""
    obj = config_map("written-by-the-controller-manager", DB_PASSWORD=PLANTED)
    as_controller = ("--as=system:kube-controller-manager", "--as-group=system:masters")
    assert dry_run_create(kube, obj, *as_controller).returncode == 0
    assert dry_run_create(kube, obj).returncode == 1


def test_a_webhook_that_is_down_holds_up_pods_but_never_config_maps(guard: Guard) -> None:
    kube = guard.plane

    def refused() -> bool:
        done = dry_run_create(kube, pod("probe", NAMESPACE, container()))
        return FAILED_CALL in done.stderr

    with guard.pointed_at(DEAD, refused):
        config = json.loads(kube.kubectl("get", "validatingwebhookconfiguration",
                                         "quickq-guard", "-o", "json").stdout)
        policies = {hook["name"]: hook["failurePolicy"] for hook in config["webhooks"]}
        assert policies["validate.quickq-guard.quickq.io"] == "Fail"
        assert policies["configmaps.quickq-guard.quickq.io"] == "Ignore"
        root_ca = config_map("kube-root-ca.crt", **{"ca.crt": "-----BEGIN CERTIFICATE-----"})
        done = dry_run_create(kube, root_ca)
        assert done.returncode == 0, done.stderr
    wait_until(lambda: dry_run_create(kube, config_map("after", PASSWORD=PLANTED)).returncode
               == 1, what="ConfigMaps to be judged again")


def test_an_oci_image_volume_with_the_latest_tag_is_denied(kube: ControlPlane) -> None:
    volume = {"name": "tools", "image": {"reference": "attacker/tools:latest",
                                         "pullPolicy": "Always"}}
    done = dry_run_create(kube, pod("image-volume", NAMESPACE, container(), volumes=[volume]))
    assert done.returncode == 1
    assert "volume 'tools': image.reference 'attacker/tools:latest' uses the 'latest' tag" \
        in done.stderr
    pinned = {**volume, "image": {"reference": "registry.example.com/tools:1.2.3"}}
    done = dry_run_create(kube, pod("image-volume", NAMESPACE, container(), volumes=[pinned]))
    assert done.returncode == 0, done.stderr
