"""`quickq-guard export --format map` (MutatingAdmissionPolicy, admissionregistration.k8s.io/v1)
on the real API server: with quickq-guard's webhooks unregistered, the objects the API server
stores after its own MutatingAdmissionPolicies equal those it stores after the webhook's
patches, on a corpus of GPU and non-GPU Pods and pod controllers: the built-in
inject-startup-probe and inject-gpu-toleration, and the CEL mutate policies of
tests/map_policies/, which a webhook runs beside the chart's policies.

MutatingAdmissionPolicy v1 is served from Kubernetes 1.36; on an older API server the test
skips and says so."""

from __future__ import annotations

import copy
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import (
    API_VERSION,
    GPU_TOLERATION,
    REPO,
    ControlPlane,
    Guard,
    Webhook,
    container,
    controller,
    export,
    gpu_container,
    liveness,
    pod,
    pod_spec,
    running,
    template_spec,
    wait_until,
)
from support.controlplane import printed_objects

NAMESPACE = "map-export"
USER_POLICIES = REPO / "tests" / "map_policies"
MAP_RESOURCE = "mutatingadmissionpolicies.admissionregistration.k8s.io"
_TOKEN_VOLUME = re.compile(r"kube-api-access-[a-z0-9]+")
_SERVER_SET = ("uid", "creationTimestamp", "resourceVersion", "managedFields", "generation")


def _serves_map(plane: ControlPlane) -> bool:
    done = plane.kubectl("api-resources", "--api-group=admissionregistration.k8s.io",
                         "-o", "name", check=False)
    return MAP_RESOURCE in done.stdout.split()


def _gpu(name: str, resource: str = "nvidia.com/gpu", **fields: Any) -> dict[str, Any]:
    """A GPU container of `resource` with a liveness probe (so both mutations apply)."""
    out = gpu_container(name)
    out["resources"] = {"requests": {"cpu": "1", "memory": "1Gi", resource: "1"},
                        "limits": {"memory": "1Gi", resource: "1"}}
    out.update(fields)
    return {key: value for key, value in out.items() if value is not None}


def _probe(handler: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {**handler, "periodSeconds": 10, "failureThreshold": 6, **fields}


TCP = {"tcpSocket": {"port": 8080}}
EXEC = {"exec": {"command": ["/bin/check"]}}
# Pod specs: what each mutation adds, keeps or leaves alone.
SPECS: dict[str, dict[str, Any]] = {
    "plain": pod_spec(container()),
    "liveness-only": pod_spec(container(livenessProbe=liveness())),
    "gpu": pod_spec(gpu_container()),
    "gpu-tolerated": pod_spec(gpu_container(), tolerations=[dict(GPU_TOLERATION)]),
    "gpu-other-toleration": pod_spec(gpu_container(),
                                     tolerations=[{"key": "x", "operator": "Exists"}]),
    "gpu-noexecute-toleration": pod_spec(gpu_container(), tolerations=[
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}]),
    "tolerate-everything": pod_spec(gpu_container(), tolerations=[{"operator": "Exists"}]),
    "two-vendors": pod_spec(_gpu("amd", "amd.com/gpu"), _gpu("mig", "nvidia.com/mig-1g.5gb")),
    "tpu-init": pod_spec(container(), initContainers=[
        _gpu("init", "google.com/tpu", livenessProbe=None)]),
    "long-initial-delay": pod_spec(container(livenessProbe=_probe(
        TCP, initialDelaySeconds=900))),
    "exec-long-tolerance": pod_spec(container(livenessProbe=_probe(
        EXEC, timeoutSeconds=5, periodSeconds=20, failureThreshold=100))),
    "model-server-image": pod_spec(container(image="vllm/vllm-openai:v0.6.3",
                                             livenessProbe=liveness())),
    "has-startup-probe": pod_spec(container(livenessProbe=liveness(),
                                            startupProbe=_probe(TCP))),
    "two-containers": pod_spec(container(livenessProbe=liveness()),
                               container("side", livenessProbe=_probe(TCP))),
    # A native sidecar (an init container with restartPolicy Always) is probed as a container.
    "native-sidecar": pod_spec(container(livenessProbe=liveness()), initContainers=[
        container("proxy", restartPolicy="Always", livenessProbe=_probe(TCP))]),
}

# And every combination of a liveness handler, a GPU resource and the tolerations already set.
HANDLERS = {"none": None, "http": {"httpGet": liveness()["httpGet"]},
            "tcp": TCP, "exec": EXEC}
RESOURCES = (None, "nvidia.com/gpu", "amd.com/gpu", "google.com/tpu", "nvidia.com/mig-2g.10gb")
TOLERATIONS = {"none": None, "gpu": [dict(GPU_TOLERATION)],
               "other": [{"key": "dedicated", "operator": "Equal", "value": "ml",
                          "effect": "NoSchedule"}]}
for _index, ((_h, _handler), _resource, (_t, _tolerations)) in enumerate(
        (h, r, t) for h in HANDLERS.items() for r in RESOURCES for t in TOLERATIONS.items()):
    _probe_fields = _probe(_handler, initialDelaySeconds=300 * (_index % 3)) if _handler else None
    _main = _gpu("main", _resource, livenessProbe=_probe_fields) if _resource \
        else container("main", livenessProbe=_probe_fields)
    SPECS[f"gen-{_h}-{(_resource or 'cpu').replace('/', '-').replace('.', '-')}-{_t}"] = \
        pod_spec({k: v for k, v in _main.items() if v is not None},
                 **({"tolerations": _tolerations} if _tolerations else {}))


def corpus() -> list[dict[str, Any]]:
    """Every pod spec as a Pod and in every pod controller."""
    objects = []
    for case, spec in SPECS.items():
        objects.append(pod(case, NAMESPACE, *copy.deepcopy(spec["containers"]),
                           **{k: copy.deepcopy(v) for k, v in spec.items()
                              if k != "containers"}))
        for kind in sorted(API_VERSION):
            objects.append(controller(kind, f"{case}-{kind.lower()}", NAMESPACE,
                                      copy.deepcopy(spec)))
    return objects


def _stored(plane: ControlPlane, objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """What the API server would store for each object (server-side dry run), by kind/name,
    without what it sets itself (uid, timestamps, the token volume's random name)."""
    listed = {"apiVersion": "v1", "kind": "List", "items": objects}
    done = plane.kubectl("create", "--dry-run=server", "-o", "json", "-f", "-",
                         input=json.dumps(listed), check=False)
    assert done.returncode == 0, done.stderr
    out = {}
    for obj in printed_objects(done.stdout):
        uid = obj["metadata"]["uid"]  # also in a Job's controller-uid labels
        for key in _SERVER_SET:
            obj["metadata"].pop(key, None)
        text = _TOKEN_VOLUME.sub("kube-api-access-x", json.dumps(obj, sort_keys=True))
        text = text.replace(uid, "(uid)")
        out[f"{obj['kind']}/{obj['metadata']['name']}"] = json.loads(text)
    return out


def _startup_probed(plane: ControlPlane) -> bool:
    probe = pod("map-probe", NAMESPACE, container(livenessProbe=liveness()))
    stored = _stored(plane, [probe])["Pod/map-probe"]
    return "startupProbe" in stored["spec"]["containers"][0]


@pytest.fixture(scope="module")
def policies(guard: Guard, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The chart's policies and the CEL mutate policies of tests/map_policies/."""
    out = tmp_path_factory.mktemp("map-policies") / "policies"
    shutil.copytree(guard.policies, out)
    for path in USER_POLICIES.glob("*.yaml"):
        shutil.copy(path, out / path.name)
    return out


def _team_labelled(plane: ControlPlane) -> bool:
    probe = pod("map-probe", NAMESPACE, container())
    return "team" in _stored(plane, [probe])["Pod/map-probe"]["metadata"]["labels"]


@pytest.fixture(scope="module")
def webhook_stored(guard: Guard, policies: Path) -> Iterator[dict[str, dict[str, Any]]]:
    """The corpus as stored after the patches of a webhook that runs `policies`."""
    if not _serves_map(guard.plane):
        pytest.skip(f"kube-apiserver {guard.plane.version()} does not serve {MAP_RESOURCE} "
                    "(MutatingAdmissionPolicy v1 is GA from Kubernetes 1.36)")
    plane = guard.plane
    plane.namespace(NAMESPACE)
    with running(Webhook(guard.workdir, guard.certs, "--policies", str(policies),
                         "--config", str(guard.config))) as webhook, \
            guard.pointed_at(webhook.url, lambda: _team_labelled(plane)):
        yield _stored(plane, corpus())


@pytest.fixture(scope="module")
def native_stored(guard: Guard, policies: Path, webhook_stored: dict[str, dict[str, Any]],
                  tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The corpus as stored after the exported MutatingAdmissionPolicies alone (webhooks
    unregistered), exported from the same policies and the chart's config."""
    plane = guard.plane
    out = tmp_path_factory.mktemp("map") / "map.yaml"
    export("map", out, "--policies", str(policies), "--config", str(guard.config))
    with guard.paused():
        assert not _startup_probed(plane)
        plane.kubectl("apply", "-f", str(out))
        try:
            wait_until(lambda: _startup_probed(plane),
                       what="the exported MutatingAdmissionPolicies to patch")
            yield _stored(plane, corpus())
        finally:
            plane.kubectl("delete", "mutatingadmissionpolicybindings,"
                          "mutatingadmissionpolicies", "-l",
                          "app.kubernetes.io/managed-by=quickq-guard", "--wait=true")
            wait_until(lambda: not _startup_probed(plane),
                       what="the exported MutatingAdmissionPolicies to be gone")


def test_objects_stored_after_the_native_policies_equal_the_webhooks(
        webhook_stored: dict[str, dict[str, Any]], native_stored: dict[str, Any]) -> None:
    assert sorted(native_stored) == sorted(webhook_stored)
    differ = [name for name in webhook_stored if native_stored[name] != webhook_stored[name]]
    assert differ == [], {name: _differences(webhook_stored[name], native_stored[name])
                          for name in differ[:3]}


def _differences(webhook: Any, native: Any, path: str = "") -> list[str]:
    """Where two stored objects differ, as `path: webhook's != native's`."""
    if isinstance(webhook, dict) and isinstance(native, dict):
        return [line for key in sorted({*webhook, *native})
                for line in _differences(webhook.get(key), native.get(key), f"{path}.{key}")]
    if isinstance(webhook, list) and isinstance(native, list) and len(webhook) == len(native):
        return [line for index, (a, b) in enumerate(zip(webhook, native, strict=True))
                for line in _differences(a, b, f"{path}[{index}]")]
    return [] if webhook == native else [f"{path}: {webhook!r} != {native!r}"]


def test_the_corpus_is_patched_by_both_mutations(webhook_stored: dict[str, Any]) -> None:
    """The comparison means something: most objects got a startup probe or a toleration,
    and some got neither."""
    specs = [template_spec(obj) for obj in webhook_stored.values()]
    probed = [s for s in specs if any("startupProbe" in c for c in s["containers"])]
    tolerated = [s for s in specs if any(t.get("key", "").startswith(("nvidia", "amd", "google"))
                                         for t in s.get("tolerations", []))]
    untouched = [s for s in specs if s not in probed and s not in tolerated]
    labelled = [o for o in webhook_stored.values() if o["metadata"]["labels"].get("team")]
    annotated = [o for o in webhook_stored.values()
                 if o["metadata"].get("annotations", {}).get("quickq.io/gpu") == "true"]
    assert len(labelled) == len(webhook_stored) and 0 < len(annotated) < len(labelled)
    count = len(API_VERSION) + 1
    assert len(specs) == len(SPECS) * count
    assert len(probed) >= 50 * count and len(tolerated) >= 40 * count and untouched


def test_a_startup_probe_follows_the_liveness_allowance(webhook_stored: dict[str, Any]) -> None:
    delay = template_spec(webhook_stored["Pod/long-initial-delay"])["containers"][0]
    assert delay["startupProbe"]["failureThreshold"] == 96  # (900 + 6 x 10) / 10
    model = template_spec(webhook_stored["Pod/model-server-image"])["containers"][0]
    assert model["startupProbe"]["failureThreshold"] == 180  # vLLM's 30 minutes

