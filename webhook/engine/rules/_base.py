"""What every rule module shares: the parameter base model and finding helpers."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from webhook.engine.globs import matches_any
from webhook.engine.patch import Path
from webhook.engine.results import Finding
from webhook.engine.workload import Container, dotted

__all__ = ["NoParams", "Params", "finding", "matches_any", "resource_field"]


class Params(BaseModel):
    """A rule's parameters: a typo in a policy's `params` fails at load, naming the field."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class NoParams(Params):
    pass


def finding(container: Container | None, message: str, path: Path,
            patch: tuple[dict[str, Any], ...] = ()) -> Finding:
    """A finding whose message starts with the container it is about; `patch` is a mutate
    rule's fix."""
    if container is None:
        return Finding(message, path, None, patch)
    return Finding(f"{container.label}: {message}", path, container.key, patch)


def resource_field(container: Container, which: str, resource: str) -> str:
    """How a message names a resource field: resources.limits[nvidia.com/gpu]."""
    return dotted(("resources", which, resource))
