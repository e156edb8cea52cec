"""GPUs: whole devices, limits equal to requests, a priority class, a toleration, and the
Dynamic Resource Allocation claims that hand them out.

Which extended resources and DRA device classes are accelerators is the global config's
`accelerators` setting (webhook.engine.accelerators), which every policy here reads; a
policy's own `gpuResources` or `taintKeys` still wins for that policy.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from functools import cached_property, lru_cache
from typing import Any

from pydantic import Field

from webhook.engine.accelerators import DEFAULT_RESOURCES, Accelerators
from webhook.engine.claims import CLAIM, device_requests, devices_of
from webhook.engine.patch import Path, add
from webhook.engine.quantity import is_whole, parse_quantity
from webhook.engine.results import Finding
from webhook.engine.rules._base import Params, finding, matches_any, resource_field
from webhook.engine.workload import CORE_RESOURCES, Container, PodSpec, Workload, dotted

DEFAULT_GPU_RESOURCES = DEFAULT_RESOURCES


class GpuParams(Params):
    # The global config's setting (the loader hands it in); a policy may name its own list.
    accelerators: Accelerators = Accelerators()
    gpuResources: tuple[str, ...] | None = None

    @cached_property
    def resources(self) -> tuple[str, ...]:
        """The GPU resource globs this policy judges by."""
        return self.gpuResources if self.gpuResources is not None \
            else self.accelerators.resources

    @cached_property
    def device_classes(self) -> tuple[str, ...]:
        return self.accelerators.gpuDeviceClasses


class GpuTolerationParams(GpuParams):
    # GPU resource glob -> the taint key GPU nodes of that vendor carry, before the
    # accelerators' own (see taint_key).
    taintKeys: Mapping[str, str] = Field(default_factory=dict)
    effect: str = "NoSchedule"

    @cached_property
    def taint_keys(self) -> Mapping[str, str]:
        """This policy's taint keys, then the accelerators'; the first glob that matches wins."""
        return {**self.taintKeys, **{pattern: key for pattern, key
                                     in self.accelerators.taintKeys.items()
                                     if pattern not in self.taintKeys}}


class ResourceClaimParams(GpuParams):
    # Namespace glob -> the device class globs claims there may name; the first glob that
    # matches the namespace wins, and a namespace no glob names may name any class.
    allowedDeviceClasses: Mapping[str, tuple[str, ...]] = Field(default_factory=dict)
    # `allocationMode: All` takes every matching GPU of a node; `adminAccess` reaches devices
    # other pods hold.
    allowAllocationModeAll: bool = False
    allowAdminAccess: bool = False
    # The most GPUs one request may ask for; None: no cap.
    maxCount: int | None = Field(None, ge=1)


class KueueQueueParams(GpuParams):
    # Namespace globs whose GPU workloads must be queued (the policy is off until its action
    # is set).
    namespaces: tuple[str, ...] = ("*",)
    label: str = "kueue.x-k8s.io/queue-name"


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


def gpu_classes(container: Container, device_classes: tuple[str, ...]) -> list[str]:
    """The GPU device classes of the DRA claims a container consumes (resolved ones only)."""
    return [name for use in container.claims for name in use.classes or ()
            if matches_any(name, device_classes)]


def uses_gpu_claim(workload: Workload | PodSpec, device_classes: tuple[str, ...]) -> bool:
    for container in workload.containers:  # almost always: none consumes a claim
        if container.claims and gpu_classes(container, device_classes):
            return True
    return False


@lru_cache(maxsize=64)
def names_a_core_resource(patterns: tuple[str, ...]) -> bool:
    """Whether a policy's GPU patterns name cpu, memory or ephemeral-storage (then every
    container has to be looked at); worked out once per parameter set."""
    return any(matches_any(name, patterns) for name in CORE_RESOURCES)


def gpu_resources_used(workload: Workload | PodSpec, patterns: tuple[str, ...]) -> set[str]:
    """GPU resource names that some container (of the workload, or of one of its pod specs)
    asks a count above zero of."""
    used = set()
    for container in workload.containers:
        for _, name, value in gpus(container, patterns):  # almost always: none
            amount = parse_quantity(value)
            if amount is not None and amount > 0:
                used.add(name)
    return used


def require_gpu_limits(workload: Workload, params: GpuParams) -> list[Finding]:
    """A GPU request has an equal limit, and GPU counts are whole numbers.

    A GPU only in limits is fine: the API server copies the limit into the request. A count
    of 0 (a chart's CPU-only profile) is no GPU, as for every other GPU policy, not a fault.
    """
    findings: list[Finding] = []
    for container in workload.containers:
        requests, limits = container.requests, container.limits
        for which, name, value in gpus(container, params.resources):
            amount = parse_quantity(value)
            if amount is not None and not is_whole(amount):
                findings.append(finding(
                    container, f"{resource_field(container, which, name)} must be a whole "
                    f"number of GPUs, not {value}",
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
    if workload.is_node_template or not (gpu_resources_used(workload, params.resources)
                                         or uses_gpu_claim(workload, params.device_classes)):
        return []
    findings = []
    for pod_spec in workload.pod_specs:  # each GPU pod spec of the workload
        if pod_spec.data.get("priorityClassName") or "priorityClassName" in pod_spec.elsewhere \
                or not (gpu_resources_used(pod_spec, params.resources)
                        or uses_gpu_claim(pod_spec, params.device_classes)):
            continue
        path = pod_spec.field_path("priorityClassName")
        findings.append(finding(None, f"set {dotted(path)} (a PriorityClass name) so this "
                                "accelerator workload is not preempted by lower-priority "
                                "work", path))
    return findings


def taint_key(resource: str, taint_keys: Mapping[str, str]) -> str:
    """The taint key the nodes that offer `resource` carry: the first glob's that matches,
    else the resource's own name (the key of Kubernetes' ExtendedResourceToleration)."""
    for pattern, key in taint_keys.items():
        if matches_any(resource, (pattern,)):
            return key
    return resource


def class_taint_key(device_class: str, taint_keys: Mapping[str, str]) -> str | None:
    """The taint key of the nodes whose devices a DRA device class hands out, or None when
    no glob names it (nothing is known to taint them)."""
    for pattern, key in taint_keys.items():
        if matches_any(device_class, (pattern,)):
            return key
    return None


def tolerates(toleration: Mapping[str, Any], key: str, effect: str) -> bool:
    """True when an existing toleration already tolerates the GPU taint `key:effect`."""
    if toleration.get("operator") != "Exists":
        return False
    if toleration.get("effect") not in (None, "", effect):
        return False
    return toleration.get("key") in (key, None, "")


def inject_gpu_toleration(workload: Workload, params: GpuTolerationParams) -> list[Finding]:
    """A GPU pod tolerates its vendor's GPU-node taint, or it stays Pending forever: for a
    GPU resource, or a DRA claim of a GPU device class (`accelerators.deviceClassTaintKeys`)."""
    used = gpu_resources_used(workload, params.resources)
    claimed = uses_gpu_claim(workload, params.device_classes)
    if not used and not claimed:  # most pods: no GPU, nothing to tolerate
        return []
    findings = []
    single = len(workload.pod_specs) == 1
    for pod_spec in workload.pod_specs:
        keys = [taint_key(name, params.taint_keys) for name in sorted(
            used if single else gpu_resources_used(pod_spec, params.resources))]
        if claimed:
            class_keys = params.accelerators.deviceClassTaintKeys
            keys += sorted({key for container in pod_spec.containers
                            for name in gpu_classes(container, params.device_classes)
                            if (key := class_taint_key(name, class_keys)) is not None})
        if keys:
            findings += _gpu_toleration(pod_spec, keys, params)
    return findings


def _gpu_toleration(pod_spec: PodSpec, taint_keys: list[str],
                    params: GpuTolerationParams) -> list[Finding]:
    keys = list(dict.fromkeys(taint_keys))
    tolerations_path = pod_spec.field_path("tolerations")
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
    device = _device_word(missing)
    return [Finding(message=f"add a toleration for the {device} taint {shown} so the pod can "
                    f"schedule on {device} nodes", at=tolerations_path, patch=ops)]


def _device_word(taint_keys: list[str]) -> str:
    """What the nodes hold, in their vendor's word: TPU for Google's TPU taint, GPU for the
    GPU vendors', accelerator for a mix or a key of neither."""
    words = {"TPU" if "tpu" in key.lower() else "GPU" if "gpu" in key.lower() else ""
             for key in taint_keys}
    return words.pop() if len(words) == 1 and "" not in words else "accelerator"


def gpu_resource_claims(workload: Workload, params: ResourceClaimParams) -> list[Finding]:
    """A ResourceClaim or ResourceClaimTemplate asks only for the device classes its
    namespace may use, and for GPUs by count: not every GPU of a node, not admin access, not
    more than the cap."""
    if not workload.is_claim:
        return []
    obj = workload.obj
    base: Path = ("spec", "spec", "devices") if obj.get("kind") != CLAIM \
        else ("spec", "devices")
    metadata = obj.get("metadata")
    namespace = metadata.get("namespace") if isinstance(metadata, Mapping) else None
    allowed = _allowed_classes(namespace if isinstance(namespace, str) else "",
                               params.allowedDeviceClasses)
    findings = []
    for where, request in device_requests(devices_of(obj)):
        path = (*base, *where)
        name = request.get("deviceClassName")
        if not isinstance(name, str):
            continue
        if allowed is not None and not matches_any(name, allowed):
            findings.append(finding(None, f"{dotted((*path, 'deviceClassName'))}: device class "
                                    f"{name} may not be claimed in namespace {namespace}; use "
                                    f"one of {', '.join(allowed)}",
                                    (*path, "deviceClassName")))
        if not matches_any(name, params.device_classes):
            continue
        if request.get("allocationMode") == "All" and not params.allowAllocationModeAll:
            findings.append(finding(None, f"{dotted((*path, 'allocationMode'))}: All claims "
                                    f"every {name} device of a node; set allocationMode: "
                                    "ExactCount with a count",
                                    (*path, "allocationMode")))
        if request.get("adminAccess") is True and not params.allowAdminAccess:
            findings.append(finding(None, f"{dotted((*path, 'adminAccess'))}: admin access "
                                    f"reaches {name} devices other pods are using; remove it",
                                    (*path, "adminAccess")))
        count = request.get("count")
        if params.maxCount is not None and isinstance(count, int) and count > params.maxCount:
            findings.append(finding(None, f"{dotted((*path, 'count'))}: {count} {name} "
                                    f"devices is above the cap of {params.maxCount}; ask for "
                                    f"{params.maxCount} or fewer", (*path, "count")))
    return findings


def _allowed_classes(namespace: str,
                     allowed: Mapping[str, tuple[str, ...]]) -> tuple[str, ...] | None:
    for pattern, classes in allowed.items():
        if matches_any(namespace, (pattern,)):
            return tuple(classes)
    return None


def gpu_claim_usage(workload: Workload, params: GpuParams) -> list[Finding]:
    """How pods consume DRA claims: a claim quickq-guard cannot resolve is said (the GPU
    policies cannot tell whether it holds GPUs); a controller's template that names one
    ResourceClaim shares its GPUs between every replica; a container that also asks for a GPU
    resource asks for GPUs twice."""
    findings: list[Finding] = []
    for container in workload.containers:
        if container.claims:
            break
    else:  # almost every workload: no container consumes a claim
        return findings
    for pod_spec in workload.pod_specs:
        shared: set[Path] = set()
        for container in pod_spec.containers:
            if not container.claims:
                continue
            classes = gpu_classes(container, params.device_classes)
            for use in container.claims:
                if not use.kind:
                    findings.append(finding(
                        container, f"consumes claim '{use.name}', which "
                        f"{dotted(pod_spec.field_path('resourceClaims'))} does not list; add it "
                        "there", container.field_path("resources", "claims")))
                    continue
                field = "resourceClaimName" if use.kind == CLAIM else "resourceClaimTemplateName"
                if use.classes is None:
                    # short: the API server cuts a warning to 256 characters
                    findings.append(finding(
                        container, f"claim '{use.name}': {use.kind} '{use.source}' is not in "
                        f"{use.where}, so whether it hands out GPUs is unknown; judge the "
                        f"{use.kind} with the pod", (*use.path, field)))
                gpu_or_unknown = use.classes is None or any(
                    matches_any(name, params.device_classes) for name in use.classes)
                if use.kind == CLAIM and not workload.is_pod and gpu_or_unknown \
                        and use.path not in shared:
                    shared.add(use.path)
                    findings.append(finding(
                        None, f"{dotted((*use.path, field))}: every replica shares "
                        f"ResourceClaim '{use.source}' and its devices; name a "
                        "ResourceClaimTemplate with resourceClaimTemplateName so each pod gets "
                        "its own", (*use.path, field)))
            extended = sorted({name for _, name, value in gpus(container, params.resources)
                               if (amount := parse_quantity(value)) is not None and amount > 0})
            if extended and classes:
                findings.append(finding(
                    container, f"asks for GPUs twice: {', '.join(extended)} in resources and "
                    f"a DRA claim of {', '.join(dict.fromkeys(classes))}; the device plugin and "
                    "the DRA driver each hand out devices, so keep one of them",
                    container.field_path("resources", "claims")))
    return findings


def require_kueue_queue(workload: Workload, params: KueueQueueParams) -> list[Finding]:
    """A GPU workload in the chosen namespaces names its Kueue LocalQueue: without the label,
    Kueue (manageJobsWithoutQueueName: false, its default) lets it bypass quota entirely.
    Objects a controller owns (a Job's pods, a Deployment's ReplicaSets) are queued through
    their owner and left alone."""
    if not params.namespaces or workload.is_node_template or workload.is_claim:
        return []
    metadata = workload.obj.get("metadata")
    metadata = metadata if isinstance(metadata, Mapping) else {}
    namespace = metadata.get("namespace")
    if not isinstance(namespace, str) or not matches_any(namespace, params.namespaces):
        return []
    if params.label in workload.labels or _controlled(metadata):
        return []
    if not (gpu_resources_used(workload, params.resources)
            or uses_gpu_claim(workload, params.device_classes)):
        return []
    path = ("metadata", "labels", params.label)
    return [finding(None, f"add the label {dotted(path)} (the name of a Kueue LocalQueue in "
                    f"namespace {namespace}) so this accelerator workload is admitted through "
                    "quota",
                    path)]


def _controlled(metadata: Mapping[str, Any]) -> bool:
    owners = metadata.get("ownerReferences")
    return isinstance(owners, list) and any(
        isinstance(owner, Mapping) and owner.get("controller") is True for owner in owners)
