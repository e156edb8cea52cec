"""The default policies' export (`quickq-guard export --format vap` of the shipped policies:
disallow-latest-tag from its CEL form) on the real API server: with quickq-guard's webhooks
unregistered, the ValidatingAdmissionPolicy denies exactly the objects the engine's built-in
rule denies, with the rule's messages, over images of every shape in Pods and every pod
controller, in containers and initContainers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from cluster_helpers import (
    API_VERSION,
    ControlPlane,
    Guard,
    container,
    controller,
    dry_run_create,
    export,
    exported_in_force,
    pod,
    pod_spec,
)

from webhook import Review, decode, evaluate, load_policies

NAMESPACE = "vap-defaults"
POLICY = "disallow-latest-tag"
_DENIED = re.compile(r"ValidatingAdmissionPolicy 'quickq-guard-disallow-latest-tag' with "
                     r"binding '[^']+' denied request: (.*)$", re.MULTILINE)
# Not " app:1 ": the API server refuses an image with spaces around it before any admission
# policy sees it.
IMAGES = ["app", "app:latest", "app:1.2.3", "registry:5000/app", "registry:5000/app:2",
          "registry:5000/app:latest", "a/b/c:latest", "app@sha256:" + "b" * 64,
          "app:latest@sha256:" + "c" * 64, "$IMAGE", "${REGISTRY}/app:1",
          "{{ .Values.image }}", "ghcr.io/org/app:v1.0-rc1"]


def corpus() -> list[dict[str, Any]]:
    objects = []
    for index, image in enumerate(IMAGES):
        for where in ("containers", "initContainers"):
            spec = pod_spec(container()) if where == "initContainers" \
                else pod_spec(container(image=image))
            if where == "initContainers":
                spec["initContainers"] = [container("init", image=image)]
            name = f"i{index}-{where.lower()}"
            objects.append(pod(name, NAMESPACE, *spec["containers"],
                               **{k: v for k, v in spec.items() if k != "containers"}))
            objects += [controller(kind, f"{name}-{kind.lower()}", NAMESPACE, spec)
                        for kind in sorted(API_VERSION)]
    return objects


@pytest.fixture(scope="module")
def exported(guard: Guard, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    plane = guard.plane
    plane.namespace(NAMESPACE)
    out = tmp_path_factory.mktemp("defaults") / "vap.yaml"
    export("vap", out, "--policies", str(guard.policies), "--config", str(guard.config))
    probe = pod("probe", NAMESPACE, container(image="app:latest"))
    with exported_in_force(guard, out, lambda: dry_run_create(plane, probe).returncode != 0,
                           lambda: dry_run_create(plane, probe).returncode == 0,
                           what="the exported disallow-latest-tag"):
        yield plane


def test_the_native_policy_denies_what_the_rule_denies_with_its_messages(
        exported: ControlPlane, guard: Guard) -> None:
    policies = load_policies(guard.policies)
    differences = []
    objects = corpus()
    denied = 0
    for obj in objects:
        [result] = [r for r in evaluate(decode(obj), policies, Review(namespace=NAMESPACE)).results
                    if r.policy == POLICY]
        expected = "; ".join(f.message for f in result.findings)
        done = dry_run_create(exported, obj)
        messages = _DENIED.findall(done.stderr)
        got = messages[0] if messages else ""
        denied += bool(got)
        if got != expected or (done.returncode == 0) != (not expected):
            differences.append((obj["kind"], obj["metadata"]["name"], expected, done.stderr))
    assert differences == []
    assert len(objects) == len(IMAGES) * 2 * (len(API_VERSION) + 1) and 0 < denied < len(objects)



# Env variables of every sort no-plaintext-secrets' form runs its regular expressions on:
# (name, value) holding a secret, and not.
SECRETS = [("DATABASE_URL", "https://user:p4ss@db.example.com:5432/app?sslmode=require"),
           ("WEBHOOK_URL", "https://hooks.example.com/services/T000/B000?token=" + "x" * 48),
           ("ENCRYPTION_KEY", "kQ8vX2mZp4Lr7Tn1Wy6Bc3Hd9Fg5Js0AeUoIiYt" * 2),
           ("DB_PASSWORD", "a literal password of some length, " * 3)]
SETTINGS = [("DATABASE_URL", "https://db.example.com:5432/app?sslmode=require&timeout=10"),
            ("TOKEN_TTL", "3600"), ("CREDENTIALS_FILE", "/var/run/secrets/app/key.json"),
            ("CHECKSUM", "kQ8vX2mZp4Lr7Tn1Wy6Bc3Hd9Fg5Js0AeUoIiYt" * 2),
            ("SECRET_ROTATION", "https://rotation.example.com/policy/" + "a" * 64),
            ("APP_NOTE", "a plain setting of more than thirty-two characters, " * 3)]


def heavy_pod(name: str, containers: int, variables: int,
              env: list[tuple[str, str]]) -> dict[str, Any]:
    """A Pod whose containers request GPUs and each hold `variables` env variables drawn in
    turn from `env`: where the exported forms' regular expressions run, so that what their
    evaluation costs grows."""
    entries = [{"name": f"{env[i % len(env)][0]}_{i}", "value": env[i % len(env)][1]}
               for i in range(variables)]
    gpu = {"requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
           "limits": {"nvidia.com/gpu": "1"}}
    return pod(name, NAMESPACE, *(container(f"c{i}", env=entries, resources=gpu)
                                  for i in range(containers)))


@pytest.mark.parametrize(("containers", "variables"), [(4, 60), (2, 240)])
def test_a_large_pod_stays_within_the_exported_policies_cost_limit(
        exported: ControlPlane, guard: Guard, containers: int, variables: int) -> None:
    """Kubernetes stops an expression past 1,000,000 units of cost, and the API server then
    denies with that error: a Pod of 240 env variables of 40 to 150 characters (URLs, paths,
    key material, settings) is judged by every exported policy within the limit, admitted when
    it holds no secret, and denied with no-plaintext-secrets' messages when it does."""
    policies = load_policies(guard.policies)
    for env, denied in ((SETTINGS, False), (SECRETS, True)):
        obj = heavy_pod(f"heavy-{containers}-{variables}-{denied}".lower(), containers,
                        variables, env)
        done = dry_run_create(exported, obj)
        assert "cost" not in done.stderr and "resulted in error" not in done.stderr, done.stderr
        [result] = [r for r in evaluate(decode(obj), policies, Review(namespace=NAMESPACE)).results
                    if r.policy == "no-plaintext-secrets"]
        assert bool(result.findings) == denied == (done.returncode != 0), done.stderr
        assert not denied or "ValidatingAdmissionPolicy 'quickq-guard-no-plaintext-secrets'" \
            in done.stderr
