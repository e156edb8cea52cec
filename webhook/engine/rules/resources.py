"""Resource requests and quantities: the scheduler can only place what declares its needs."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from webhook.engine.quantity import parse_quantity
from webhook.engine.results import Finding
from webhook.engine.rules._base import NoParams, Params, finding, resource_field
from webhook.engine.workload import Container, Workload


class RequireRequestsParams(Params):
    resources: tuple[str, ...] = ("cpu", "memory")


def require_requests(workload: Workload, params: RequireRequestsParams) -> list[Finding]:
    """Every container and initContainer requests cpu and memory, and not zero of either.

    A limit without a request counts as a request: the API server defaults the request to the
    limit before admission, so the offline verdict matches the cluster's. So do pod-level
    resources (spec.resources, Kubernetes 1.34+): the scheduler places the pod by them and
    it is not BestEffort, whatever its containers say. A zero request (`"0"`, `0m`, `0Mi`)
    reserves nothing: the scheduler overcommits for it, and a pod whose requests are all zero
    is BestEffort, which is what the rule exists to prevent.
    """
    findings = []
    for pod_spec in workload.pod_specs:
        pod_level = pod_spec.data.get("resources")
        shared = _named(pod_level) if isinstance(pod_level, Mapping) else frozenset()
        for container in pod_spec.containers:
            if container.group == "ephemeralContainers":
                continue  # ephemeral containers cannot carry resources
            requests, limits = container.requests, container.limits
            # A composed kind's operator fills what its containers leave out (llm-d's base
            # Deployments: webhook.engine.workload.composed), a TrainJob a Trainer runtime's `node`
            # container's when none runs it here (webhook.engine.trainjobs): only what they
            # write is judged.
            given = "resources" in container.elsewhere
            for name in params.resources:
                amount = requests.get(name)
                if amount is None:
                    amount = limits.get(name)
                if amount is None and name not in shared and not given:
                    findings.append(finding(
                        container, f"add {resource_field(container, 'requests', name)}",
                        container.field_path("resources", "requests", name)))
                elif amount is not None and _may_be_zero(amount) \
                        and parse_quantity(amount) == 0:
                    field = resource_field(container, "requests", name)
                    findings.append(finding(
                        container, f"{field} is zero, which requests nothing (a pod whose "
                        f"requests are all zero is BestEffort); set {field} to what the "
                        "container needs", container.field_path("resources", "requests", name)))
    return findings


def _named(resources: Mapping[str, Any]) -> frozenset[Any]:
    """The resources a pod-level `resources` requests or limits (a limit becomes a request)."""
    return frozenset(name for which in ("requests", "limits")
                     if isinstance(quantities := resources.get(which), Mapping)
                     for name, value in quantities.items() if value is not None)


def _may_be_zero(amount: Any) -> bool:
    """Whether a quantity can be zero at all: "0", "0m", "+0", ".0", 0. Most are not (2,
    8Gi), and are not parsed again here."""
    if isinstance(amount, str):
        return amount.lstrip("+-")[:1] in ("0", ".")
    return not amount


def valid_resource_quantities(workload: Workload, params: NoParams) -> list[Finding]:
    """Every request and limit is a valid quantity, and no request exceeds its limit."""
    findings: list[Finding] = []
    for container in workload.containers:
        requests = _amounts(container, "requests", findings)
        limits = _amounts(container, "limits", findings)
        for name, request in requests.items():
            limit = limits.get(name)
            if limit is not None and request > limit:
                findings.append(finding(
                    container,
                    f"{resource_field(container, 'requests', name)} "
                    f"({container.requests[name]}) exceeds "
                    f"{resource_field(container, 'limits', name)} ({container.limits[name]}); "
                    "lower the request or raise the limit",
                    container.field_path("resources", "requests", name)))
    return findings


def _amounts(container: Container, which: str, findings: list[Finding]) -> dict[Any, Decimal]:
    """The valid amounts of a container's requests or limits; a finding for each invalid one."""
    amounts = {}
    quantities = container.requests if which == "requests" else container.limits
    for name, value in quantities.items():
        amount = parse_quantity(value)
        if amount is not None:
            amounts[name] = amount
            continue
        shown = repr(value) if isinstance(value, str) else str(value)
        findings.append(finding(
            container,
            f"{resource_field(container, which, name)} {shown} is not a valid "
            "quantity; use a non-negative amount such as 500m, 2, 256Mi or 1Gi",
            container.field_path("resources", which, name)))
    return amounts
