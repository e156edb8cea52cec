"""What the API server's own validation refuses in a Pod or pod template before it calls any
webhook. quickq-guard judges such objects only offline (the CLI, the library); at
`kubectl apply` the user sees the API server's error instead, so the verdict says so."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from webhook.engine.patch import Path
from webhook.engine.quantity import is_whole, parse_quantity
from webhook.engine.workload import Workload

REFUSED = "the API server itself refuses this field before any webhook is called"
# A kind of another project (a LeaderWorkerSet, a PyTorchJob) is stored as it is: only the
# pods its controller makes from it are refused.
PODS_REFUSED = ("the API server stores this {kind}, but refuses every pod made from it with "
                "this field, so none will start")


def refusal(kind: str, group: str, undecodable: bool) -> str:
    """What the API server does with a field refused_fields names, in this kind: it refuses
    a Pod or a built-in controller outright, and another project's kind only when a quantity
    cannot be decoded at all (its CRD's schema checks the format)."""
    if group in ("", "apps", "batch") or undecodable:
        return REFUSED
    return PODS_REFUSED.format(kind=kind)
# Resources the API server lets a request exceed the limit of nothing, and be fractional:
# every other (extended) resource, a GPU among them, is a whole count with request == limit.
_NATIVE_PREFIXES = ("cpu", "memory", "ephemeral-storage", "hugepages-", "kubernetes.io/",
                    "requests.", "limits.")


def refused_fields(workload: Workload) -> dict[Path, bool]:
    """The paths of the requests and limits the API server refuses in a Pod or pod
    template: a quantity it cannot decode (True), a request above its limit, and an extended
    resource that is not a whole count, lacks a limit or differs from it (False)."""
    if workload.is_node_template:  # a custom resource: its quantities are plain strings
        return {}
    refused: dict[Path, bool] = {}
    for container in workload.containers:
        amounts: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
        for which, values in (("requests", container.requests), ("limits", container.limits)):
            for name, value in values.items():
                amount = parse_quantity(value)
                if amount is None:
                    refused[_path(container, which, name)] = True
                elif amount < 0 or (_extended(name) and not is_whole(amount)):
                    refused.setdefault(_path(container, which, name), False)
                elif isinstance(name, str):
                    amounts[which][name] = amount
        for name, request in amounts["requests"].items():
            limit = amounts["limits"].get(name)
            if _extended(name) and name not in container.limits:
                refused.setdefault(_path(container, "limits", name), False)
            elif limit is not None and (request != limit if _extended(name) else request > limit):
                refused.setdefault(_path(container, "limits", name), False)
                refused.setdefault(_path(container, "requests", name), False)
    return refused


def _extended(name: Any) -> bool:
    return isinstance(name, str) and not name.startswith(_NATIVE_PREFIXES)


def _path(container: Any, which: str, name: Any) -> Path:
    path: Path = container.field_path("resources", which, name)
    return path
