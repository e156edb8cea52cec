"""Dynamic Resource Allocation: which device classes the claims a container consumes ask for.

A Pod lists `spec.resourceClaims[]` (each a `resourceClaimName` or a
`resourceClaimTemplateName`) and a container consumes one by `resources.claims[].name`. The
device classes are in the ResourceClaim or ResourceClaimTemplate the entry names, so they are
looked up in a `ClaimLookup`: offline, the claims of the same input (`claims_from`); online,
the webhook's cached view of the cluster (webhook.server.claim_view). Pure: the lookup is
handed in, never read here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol

from webhook.engine.patch import Path
from webhook.engine.workload import ClaimUse, Container, PodSpec, Workload, api_group

DRA_GROUP = "resource.k8s.io"
CLAIM = "ResourceClaim"
TEMPLATE = "ResourceClaimTemplate"
CLAIM_KINDS = frozenset({CLAIM, TEMPLATE})
# (kind, namespace, name) of a ResourceClaim or ResourceClaimTemplate
ClaimKey = tuple[str, str, str]


class ClaimLookup(Protocol):
    """Where the claims a pod names are found; `where` names it in messages (`the input`,
    `the cluster`)."""

    @property
    def where(self) -> str: ...

    def device_classes(self, kind: str, namespace: str, name: str) -> tuple[str, ...] | None:
        """The device classes the claim or template asks for, or None when it is unknown."""
        ...


@dataclass(frozen=True, slots=True)
class Claims:
    """A ClaimLookup over claims already read: the objects of one input, or a snapshot."""

    classes: Mapping[ClaimKey, tuple[str, ...]]
    where: str = "the input"

    def device_classes(self, kind: str, namespace: str, name: str) -> tuple[str, ...] | None:
        """The claim in the namespace, else one that names no namespace (in a manifest, it
        lands in the namespace it is applied to, like the pod)."""
        found = self.classes.get((kind, namespace, name))
        return self.classes.get((kind, "", name)) if found is None and namespace else found


NO_CLAIMS = Claims({}, "the objects judged")


def is_claim_object(obj: Mapping[str, Any]) -> bool:
    return obj.get("kind") in CLAIM_KINDS and api_group(str(obj.get("apiVersion"))) == DRA_GROUP


def devices_of(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """`spec.devices` of a ResourceClaim, `spec.spec.devices` of a ResourceClaimTemplate."""
    spec = obj.get("spec")
    if obj.get("kind") == TEMPLATE:
        spec = spec.get("spec") if isinstance(spec, Mapping) else None
    devices = spec.get("devices") if isinstance(spec, Mapping) else None
    return devices if isinstance(devices, Mapping) else {}


def device_requests(devices: Mapping[str, Any]) -> list[tuple[Path, Mapping[str, Any]]]:
    """(path below `devices`, request) of each device request that names a class: the
    `exactly` of each request, each of its `firstAvailable` alternatives, and the request
    itself in the v1beta1 shape (deviceClassName beside the name)."""
    found: list[tuple[Path, Mapping[str, Any]]] = []
    requests = devices.get("requests")
    for index, request in enumerate(requests if isinstance(requests, list) else ()):
        if not isinstance(request, Mapping):
            continue
        exactly = request.get("exactly")
        if isinstance(exactly, Mapping):
            found.append((("requests", index, "exactly"), exactly))
        alternatives = request.get("firstAvailable")
        for position, item in enumerate(alternatives if isinstance(alternatives, list) else ()):
            if isinstance(item, Mapping):
                found.append((("requests", index, "firstAvailable", position), item))
        if "deviceClassName" in request:
            found.append((("requests", index), request))
    return found


def device_classes(obj: Mapping[str, Any]) -> tuple[str, ...]:
    """The device classes a ResourceClaim or ResourceClaimTemplate asks for."""
    return tuple(str(request.get("deviceClassName"))
                 for _, request in device_requests(devices_of(obj))
                 if isinstance(request.get("deviceClassName"), str))


def claims_from(objects: Iterable[Any], where: str = "the input") -> Claims:
    """The lookup over the ResourceClaims and ResourceClaimTemplates among `objects`."""
    classes: dict[ClaimKey, tuple[str, ...]] = {}
    for obj in objects:
        if not isinstance(obj, Mapping) or not is_claim_object(obj):
            continue
        metadata = obj.get("metadata")
        metadata = metadata if isinstance(metadata, Mapping) else {}
        name, namespace = metadata.get("name"), metadata.get("namespace") or ""
        if isinstance(name, str) and isinstance(namespace, str):
            classes[(str(obj["kind"]), namespace, name)] = device_classes(obj)
    return Claims(classes, where)


def with_claims(workload: Workload, lookup: ClaimLookup, namespace: str) -> Workload:
    """The workload with each container's ClaimUses filled in; the same object when no pod
    spec lists resourceClaims (almost every workload)."""
    for pod in workload.pod_specs:
        if pod.data.get("resourceClaims"):
            break
    else:
        return workload
    pods = tuple(_pod_with_claims(pod, lookup, namespace) for pod in workload.pod_specs)
    containers = tuple(container for pod in pods for container in pod.containers)
    return replace(workload, pod_specs=pods, containers=containers)


def _pod_with_claims(pod: PodSpec, lookup: ClaimLookup, namespace: str) -> PodSpec:
    entries = pod.data.get("resourceClaims")
    if not isinstance(entries, list) or not entries:
        return pod
    listed: dict[str, tuple[str, str, Path]] = {}
    for index, entry in enumerate(entries):
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str):
            continue
        path = pod.field_path("resourceClaims", index)
        if isinstance(entry.get("resourceClaimName"), str):
            listed[entry["name"]] = (CLAIM, entry["resourceClaimName"], path)
        elif isinstance(entry.get("resourceClaimTemplateName"), str):
            listed[entry["name"]] = (TEMPLATE, entry["resourceClaimTemplateName"], path)
    containers = tuple(_container_with_claims(container, listed, lookup, namespace)
                       for container in pod.containers)
    return replace(pod, containers=containers)


def _container_with_claims(container: Container, listed: Mapping[str, tuple[str, str, Path]],
                           lookup: ClaimLookup, namespace: str) -> Container:
    resources = container.data.get("resources")
    consumed = resources.get("claims") if isinstance(resources, Mapping) else None
    if not isinstance(consumed, list) or not consumed:
        return container
    uses = []
    for item in consumed:
        name = item.get("name") if isinstance(item, Mapping) else None
        if not isinstance(name, str):
            continue
        kind, source, path = listed.get(name, ("", "", ()))
        classes = lookup.device_classes(kind, namespace, source) if kind else None
        uses.append(ClaimUse(name, kind, source, classes, path, lookup.where))
    return replace(container, claims=tuple(uses))
