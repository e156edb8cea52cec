"""What the API server's own validation refuses in a Pod or pod template before it calls any
webhook. quickq-guard judges such objects only offline (the CLI, the library); at
`kubectl apply` the user sees the API server's error instead, so the verdict says so."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from webhook.engine.quantity import is_whole, parse_quantity
from webhook.engine.workload import Workload, dotted

REFUSED = "the API server itself refuses this field before any webhook is called"
# Resources the API server lets a request exceed the limit of nothing, and be fractional:
# every other (extended) resource, a GPU among them, is a whole count with request == limit.
_NATIVE_PREFIXES = ("cpu", "memory", "ephemeral-storage", "hugepages-", "kubernetes.io/",
                    "requests.", "limits.")


def refused_fields(workload: Workload) -> frozenset[str]:
    """The dotted paths of the requests and limits the API server refuses in a Pod or pod
    template: a quantity it cannot decode, a request above its limit, and an extended
    resource that is not a whole count, lacks a limit or differs from it."""
    if workload.is_node_template:  # a custom resource: its quantities are plain strings
        return frozenset()
    refused: set[str] = set()
    for container in workload.containers:
        amounts: dict[str, dict[str, Decimal]] = {"requests": {}, "limits": {}}
        for which, values in (("requests", container.requests), ("limits", container.limits)):
            for name, value in values.items():
                amount = parse_quantity(value)
                if amount is None or amount < 0 or (_extended(name) and not is_whole(amount)):
                    refused.add(_path(container, which, name))
                elif isinstance(name, str):
                    amounts[which][name] = amount
        for name, request in amounts["requests"].items():
            limit = amounts["limits"].get(name)
            if _extended(name) and name not in container.limits:
                refused.add(_path(container, "limits", name))
            elif limit is not None and (request != limit if _extended(name) else request > limit):
                refused.add(_path(container, "limits", name))
                refused.add(_path(container, "requests", name))
    return frozenset(refused)


def _extended(name: Any) -> bool:
    return isinstance(name, str) and not name.startswith(_NATIVE_PREFIXES)


def _path(container: Any, which: str, name: Any) -> str:
    return dotted(container.field_path("resources", which, name))
