"""A policy whose cost grows with the square of the containers (issue 39), exported with
`quickq-guard export --format vap` and applied to the real API server: the API server's
ValidatingAdmissionPolicy, `quickq-guard check` and the webhook (`serve`) give the same
verdict at every size, since all three run Kubernetes' CEL with its cost accounting. Before,
`check` and the webhook refused at 100 and 150 containers what the API server admits (our
own cost estimate), and the API server refuses at 230 and 300 ("actual cost limit
exceeded")."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cluster_helpers import REPO, ControlPlane, dry_run_create, export
from support.controlplane import Webhook, started

from webhook.testing import wait_until

NAMESPACE = "cel-nested"
EXPRESSION = ("object.spec.containers.map(c, object.spec.containers.map(d, c.name + d.name))"
              ".all(l, l.all(s, size(s) > 0))")
POLICIES = [
    {"id": "nested-names", "description": "every pair of container names is non-empty",
     "type": "validate", "action": "enforce", "scope": "object",
     "match": {"kinds": ["Pod"]},
     "validations": [{"expression": EXPRESSION, "message": "an empty pair of names"}]},
    # A probe, to know when the exported policies are in force.
    {"id": "probe", "description": "no Pod named qq-probe", "type": "validate",
     "action": "enforce", "scope": "object", "match": {"kinds": ["Pod"]},
     "validations": [{"expression": "object.metadata.name != 'qq-probe'",
                      "message": "the probe"}]},
]
# Admitted by the API server below its per-call cost limit, refused above it.
EXPECTED = {100: "allowed", 150: "allowed", 230: "denied", 300: "denied"}


def pod(name: str, containers: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"containers": [{"name": f"c{i}", "image": "registry.example.com/a:1"}
                                    for i in range(containers)]}}


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("nested-policies")
    for policy in POLICIES:
        (folder / f"{policy['id']}.yaml").write_text(yaml.safe_dump(policy))
    return folder


@pytest.fixture(scope="module")
def nested_plane(plane: ControlPlane, policies: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """An API server of its own, with the exported policies in force."""
    workdir = tmp_path_factory.mktemp("nested-plane")
    with started(plane.assets, workdir, NAMESPACE) as own:
        out = workdir / "vap.yaml"
        export("vap", out, "--policies", str(policies))
        own.kubectl("apply", "-f", str(out))
        wait_until(lambda: dry_run_create(own, pod("qq-probe", 1)).returncode != 0,
                   what="the exported policies to be in force")
        yield own


def api_server(plane: ControlPlane, containers: int) -> tuple[str, str]:
    done = dry_run_create(plane, pod(f"p{containers}", containers))
    return ("allowed" if done.returncode == 0 else "denied"), done.stderr.strip()[-300:]


def offline(policies: Path, tmp_path: Path, containers: int) -> tuple[str, str]:
    manifest = tmp_path / f"pod-{containers}.yaml"
    manifest.write_text(json.dumps(pod(f"p{containers}", containers)))
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "check", "--no-default-policies",
                           "--policies", str(policies), str(manifest)], capture_output=True,
                          text=True, cwd=REPO, check=False, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr
    return ("allowed" if done.returncode == 0 else "denied"), (done.stdout + done.stderr)[-300:]


def online(webhook: Webhook, containers: int) -> tuple[str, str]:
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": f"u{containers}", "operation": "CREATE", "namespace": NAMESPACE,
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "userInfo": {"username": "alice"}, "object": pod(f"p{containers}", containers)}}
    with webhook.client() as client:
        answer = client.post("/validate", json=review, timeout=120).json()["response"]
    return ("allowed" if answer["allowed"] else "denied"), \
        str(answer.get("status", {}).get("message", ""))[-300:]


def test_the_api_server_check_and_the_webhook_agree_at_every_size(
        nested_plane: ControlPlane, policies: Path, certs: Path, tmp_path: Path) -> None:
    webhook = Webhook(tmp_path, certs, "--policies", str(policies))
    try:
        verdicts = {n: (api_server(nested_plane, n), offline(policies, tmp_path, n),
                        online(webhook, n)) for n in EXPECTED}
    finally:
        webhook.stop()
    said = "\n".join(f"{n}: API server {a}; check {c}; webhook {w}"
                     for n, (a, c, w) in verdicts.items())
    for n, (server, check, served) in verdicts.items():
        assert server[0] == check[0] == served[0] == EXPECTED[n], said
    assert all("cost" in server[1] for n, (server, _, _) in verdicts.items()
               if EXPECTED[n] == "denied"), said
