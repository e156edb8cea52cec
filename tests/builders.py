"""Builders for the objects quickq-guard judges, so each test states only what it is about.

`pod()` and `container()` start from an object that passes every default policy; a test
overrides the fields it cares about (a value of `None` removes a field).
"""

from __future__ import annotations

import copy
from typing import Any

from webhook import Decision, Result, evaluate, load_policies
from webhook.engine.policy import Config, PolicySet

GOOD_IMAGE = "registry.example.com/app:1.2.3"
POD_SPEC_PATHS = {
    "Pod": ("v1", ("spec",)),
    "Deployment": ("apps/v1", ("spec", "template", "spec")),
    "ReplicaSet": ("apps/v1", ("spec", "template", "spec")),
    "StatefulSet": ("apps/v1", ("spec", "template", "spec")),
    "DaemonSet": ("apps/v1", ("spec", "template", "spec")),
    "Job": ("batch/v1", ("spec", "template", "spec")),
    "CronJob": ("batch/v1", ("spec", "jobTemplate", "spec", "template", "spec")),
}
CONTROLLERS = [kind for kind in POD_SPEC_PATHS if kind != "Pod"]


def _merge(base: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    for key, value in changes.items():
        if value is None:
            base.pop(key, None)
        else:
            base[key] = value
    return base


def container(name: str = "app", **changes: Any) -> dict[str, Any]:
    """A container that passes every default policy (requests set, pinned image)."""
    base: dict[str, Any] = {
        "name": name,
        "image": GOOD_IMAGE,
        "resources": {"requests": {"cpu": "100m", "memory": "128Mi"},
                      "limits": {"memory": "256Mi"}},
    }
    return _merge(base, changes)


def gpu_container(name: str = "model", count: Any = 1, resource: str = "nvidia.com/gpu",
                  **changes: Any) -> dict[str, Any]:
    resources = {"requests": {"cpu": "1", "memory": "1Gi", resource: count},
                 "limits": {"memory": "1Gi", resource: count}}
    return container(name, resources=resources, **changes)


def probe(period: int | None = None, threshold: int | None = None,
          **extra: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"httpGet": {"path": "/healthz", "port": 8080}}
    if period is not None:
        found["periodSeconds"] = period
    if threshold is not None:
        found["failureThreshold"] = threshold
    return {**found, **extra}


def pod_spec(*containers: dict[str, Any], **changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
        "containers": list(containers) or [container()],
    }
    return _merge(base, changes)


def pod(*containers: dict[str, Any], name: str = "web", namespace: str | None = "default",
        labels: dict[str, Any] | None = None, annotations: dict[str, Any] | None = None,
        **spec_changes: Any) -> dict[str, Any]:
    """A Pod that passes every validate policy; keyword arguments change its spec."""
    return workload("Pod", *containers, name=name, namespace=namespace, labels=labels,
                    annotations=annotations, **spec_changes)


def workload(kind: str, *containers: dict[str, Any], name: str = "web",
             namespace: str | None = "default", labels: dict[str, Any] | None = None,
             annotations: dict[str, Any] | None = None, **spec_changes: Any) -> dict[str, Any]:
    """A Pod or controller of `kind` around the pod spec."""
    api_version = POD_SPEC_PATHS[kind][0]
    metadata: dict[str, Any] = {"name": name, "labels": {"app": name} if labels is None
                                else labels}
    if namespace is not None:
        metadata["namespace"] = namespace
    if annotations is not None:
        metadata["annotations"] = annotations
    obj: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "metadata": metadata}
    spec = pod_spec(*containers, **spec_changes)
    if kind == "Pod":
        obj["spec"] = spec
        return obj
    template = {"metadata": {"labels": {"app": name}}, "spec": spec}
    if kind == "CronJob":
        spec["restartPolicy"] = "OnFailure"
        obj["spec"] = {"schedule": "0 * * * *", "jobTemplate": {"spec": {"template": template}}}
    elif kind == "Job":
        spec["restartPolicy"] = "Never"
        obj["spec"] = {"template": template}
    elif kind in ("Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"):
        obj["spec"] = {"selector": {"matchLabels": {"app": name}}, "template": template}
        if kind == "StatefulSet":
            obj["spec"]["serviceName"] = name
    return obj


def pointer_prefix(kind: str) -> str:
    """The JSON pointer of the pod spec of `kind`: /spec/template/spec for a Deployment."""
    return "".join("/" + part for part in POD_SPEC_PATHS[kind][1])


def dotted_prefix(kind: str) -> str:
    return ".".join(POD_SPEC_PATHS[kind][1])


def node_template(api_version: str = "quickq.io/v1", **spec_changes: Any) -> dict[str, Any]:
    """A NodeTemplate that passes every validate policy."""
    spec: dict[str, Any] = {
        "image": "registry.example.com/model-server:2.0.1",
        "resources": {"requests": {"cpu": "1", "memory": "4Gi"},
                      "limits": {"cpu": "2", "memory": "8Gi"}},
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
    }
    return {"apiVersion": api_version, "kind": "NodeTemplate",
            "metadata": {"name": "gpu-inference-01", "labels": {"app": "model-server"}},
            "spec": _merge(spec, spec_changes)}


_DEFAULT: PolicySet | None = None


def default_policies() -> PolicySet:
    global _DEFAULT
    if _DEFAULT is None:
        _DEFAULT = load_policies()
    return _DEFAULT


def with_config(**config: Any) -> PolicySet:
    """The shipped policies under a config built from keyword arguments."""
    return load_policies(None, Config.model_validate(config))


def judge(obj: Any, policies: PolicySet | None = None, **kwargs: Any) -> Decision:
    """evaluate() on a deep copy, asserting the engine never modifies its input."""
    before = copy.deepcopy(obj)
    decision = evaluate(obj, policies or default_policies(), **kwargs)
    assert obj == before, "evaluate() modified the object it was given"
    return decision


def result(decision: Decision, policy: str) -> Result:
    for found in decision.results:
        if found.policy == policy:
            return found
    raise AssertionError(f"no result for {policy}: {[r.policy for r in decision.results]}")


def statuses(decision: Decision) -> dict[str | None, str]:
    return {found.policy: found.status for found in decision.results}


def failing(decision: Decision) -> set[str | None]:
    return {found.policy for found in decision.results if found.status == "fail"}


def messages(decision: Decision, policy: str) -> list[str]:
    return [found.message for found in result(decision, policy).findings]


def paths(decision: Decision, policy: str) -> list[str]:
    return [found.path for found in result(decision, policy).findings]
