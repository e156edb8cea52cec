"""GPUs: whole devices, limits equal to requests, a priority class and a toleration.

GPU resources are named by glob patterns in each policy's `gpuResources` parameter. The
defaults are the names the vendors' device plugins publish:

- NVIDIA: `nvidia.com/gpu`; `nvidia.com/gpu.shared` (time-slicing or MPS replicas with
  renameByDefault); `nvidia.com/mig-<profile>` (MIG, `mixed` strategy), also `.shared`.
- AMD: `amd.com/gpu`; `amd.com/<compute>_<memory>` partitions such as `amd.com/cpx_nps4`
  (`resource_naming_strategy: mixed`); `amd.com/gpu_vf` and `amd.com/gpu_pf` (passthrough).
- Intel: `gpu.intel.com/i915` and `gpu.intel.com/xe`. Not `*_monitoring` (access to every
  GPU of a node for a monitoring agent) nor the fractional `millicores`/`memory.max`/`tiles`
  of Intel's GPU Aware Scheduling, which are not device counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from functools import lru_cache
from typing import Any

from webhook.engine.patch import add
from webhook.engine.quantity import is_whole, parse_quantity
from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding, matches_any, resource_field
from webhook.engine.workload import CORE_RESOURCES, Container, PodSpec, Workload, dotted

DEFAULT_GPU_RESOURCES = (
    "nvidia.com/gpu", "nvidia.com/gpu.shared", "nvidia.com/mig-*",
    "amd.com/gpu", "amd.com/gpu_vf", "amd.com/gpu_pf", "amd.com/*px_nps*",
    "gpu.intel.com/i915", "gpu.intel.com/xe",
)


class GpuParams(Params):
    gpuResources: tuple[str, ...] = DEFAULT_GPU_RESOURCES


def gpus(container: Container, patterns: tuple[str, ...]) -> list[tuple[str, str, Any]]:
    """(requests|limits, resource name, value) for each GPU resource of a container."""
    if (CORE_RESOURCES.issuperset(container.requests)
            and CORE_RESOURCES.issuperset(container.limits)
            and not names_a_core_resource(patterns)):
        return []  # most containers: cpu, memory and ephemeral-storage only
    return [(which, name, value)
            for which, resources in (("requests", container.requests),
                                     ("limits", container.limits))
            for name, value in resources.items()
            # A non-string key (`1:` or `yes:` in YAML) is no GPU; it must not crash the rule.
            if isinstance(name, str) and matches_any(name, patterns)]


@lru_cache(maxsize=64)
def names_a_core_resource(patterns: tuple[str, ...]) -> bool:
    """Whether a policy's GPU patterns name cpu, memory or ephemeral-storage (then every
    container has to be looked at); worked out once per parameter set."""
    return any(matches_any(name, patterns) for name in CORE_RESOURCES)


def gpu_resources_used(workload: Workload | PodSpec, patterns: tuple[str, ...]) -> set[str]:
    """GPU resource names that some container (of the workload, or of one of its pod specs)
    asks a count above zero of."""
    return {name for container in workload.containers
            for _, name, value in gpus(container, patterns)
            if (amount := parse_quantity(value)) is not None and amount > 0}


def require_gpu_limits(workload: Workload, params: GpuParams) -> list[Finding]:
    """A GPU request has an equal limit, and GPU counts are positive whole numbers.

    A GPU only in limits is fine: the API server copies the limit into the request.
    """
    findings: list[Finding] = []
    for container in workload.containers:
        requests, limits = container.requests, container.limits
        for which, name, value in gpus(container, params.gpuResources):
            amount = parse_quantity(value)
            if amount is not None and (amount <= 0 or not is_whole(amount)):
                findings.append(finding(
                    container, f"{resource_field(container, which, name)} must be a whole "
                    f"number of GPUs above 0, not {value}",
                    container.field_path("resources", which, name)))
            if which != "requests":
                continue
            limit = limits.get(name)
            if limit is None:
                findings.append(finding(
                    container, f"add {resource_field(container, 'limits', name)}: {value} "
                    f"(equal to {resource_field(container, 'requests', name)})",
                    container.field_path("resources", "limits", name)))
            elif _differ(parse_quantity(limit), amount):
                findings.append(finding(
                    container, f"set {resource_field(container, 'limits', name)} equal to "
                    f"{resource_field(container, 'requests', name)} ({limit} != {requests[name]})",
                    container.field_path("resources", "limits", name)))
    return findings


def _differ(limit: Decimal | None, request: Decimal | None) -> bool:
    return limit is not None and request is not None and limit != request


def gpu_priority_class(workload: Workload, params: GpuParams) -> list[Finding]:
    """A pod that uses GPUs sets priorityClassName, so cheap jobs cannot preempt it at random."""
    if workload.is_node_template or not gpu_resources_used(workload, params.gpuResources):
        return []
    findings = []
    for pod_spec in workload.pod_specs:  # each GPU pod spec of the workload
        if pod_spec.data.get("priorityClassName") \
                or not gpu_resources_used(pod_spec, params.gpuResources):
            continue
        path = (*pod_spec.path, "priorityClassName")
        findings.append(finding(None, f"set {dotted(path)} (a PriorityClass name) so this GPU "
                                "workload is not preempted by lower-priority work", path))
    return findings


class GpuTolerationParams(GpuParams):
    # GPU resource pattern -> the taint key GPU nodes of that vendor carry; the first pattern
    # that matches wins. A GPU resource no pattern names is tolerated under its own name, the
    # key Kubernetes' ExtendedResourceToleration admission plugin uses.
    taintKeys: Mapping[str, str] = {
        "nvidia.com/*": "nvidia.com/gpu",
        "amd.com/*": "amd.com/gpu",
        "gpu.intel.com/i915": "gpu.intel.com/i915",
        "gpu.intel.com/xe": "gpu.intel.com/xe",
    }
    effect: str = "NoSchedule"


def taint_key(resource: str, taint_keys: Mapping[str, str]) -> str:
    """The taint key the nodes that offer `resource` carry."""
    for pattern, key in taint_keys.items():
        if matches_any(resource, (pattern,)):
            return key
    return resource


def tolerates(toleration: Mapping[str, Any], key: str, effect: str) -> bool:
    """True when an existing toleration already tolerates the GPU taint `key:effect`."""
    if toleration.get("operator") != "Exists":
        return False
    if toleration.get("effect") not in (None, "", effect):
        return False
    return toleration.get("key") in (key, None, "")


def inject_gpu_toleration(workload: Workload, params: GpuTolerationParams) -> list[Finding]:
    """A GPU pod tolerates its vendor's GPU-node taint, or it stays Pending forever."""
    used = gpu_resources_used(workload, params.gpuResources)
    if not used:  # most pods: no GPU, nothing to tolerate
        return []
    findings = []
    for pod_spec in workload.pod_specs:
        pod_used = used if len(workload.pod_specs) == 1 \
            else gpu_resources_used(pod_spec, params.gpuResources)
        if pod_used:
            findings += _gpu_toleration(pod_spec, pod_used, params)
    return findings


def _gpu_toleration(pod_spec: PodSpec, used: set[str],
                    params: GpuTolerationParams) -> list[Finding]:
    keys = list(dict.fromkeys(taint_key(name, params.taintKeys) for name in sorted(used)))
    tolerations_path = (*pod_spec.path, "tolerations")
    existing = pod_spec.data.get("tolerations")
    current = existing if isinstance(existing, list) else []
    missing = [key for key in keys if not any(tolerates(t, key, params.effect) for t in current)]
    if not missing:
        return []
    new = [{"key": key, "operator": "Exists", "effect": params.effect} for key in missing]
    ops: tuple[dict[str, Any], ...]
    if existing is None:
        ops = (add(tolerations_path, new),)
    else:
        ops = tuple(add((*tolerations_path, "-"), toleration) for toleration in new)
    shown = ", ".join(f"{key}:{params.effect}" for key in missing)
    return [Finding(message=f"add a toleration for the GPU taint {shown} so the pod can "
                    "schedule on GPU nodes", path=dotted(tolerations_path), patch=ops)]
