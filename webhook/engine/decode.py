"""decode(): a manifest as the Kubernetes API server hands it to a webhook, or what it refuses.

The first of the engine's two steps (`evaluate(decode(manifest), policies, review)`): what
`kubectl apply` does to an object before any webhook sees it, made offline, so that
`quickq-guard check` judges what the webhook judges. The webhook itself skips this step: the
API server has decoded its objects already, and `evaluate` takes them as they are.
Pure: no I/O, the manifest passed in is never changed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from webhook.engine.normalize import Problem, normalize
from webhook.engine.schema import is_mapping
from webhook.engine.workload import unserved_api_version


@dataclass(frozen=True, slots=True)
class Decoded:
    """A manifest decoded as the API server decodes it: `object` is what a webhook would be
    handed (defaulted, normalized: see webhook.engine.normalize); `refusals` (each a field's
    path and what is wrong with it) are why the API server would refuse the manifest
    instead, and then no webhook ever sees it."""

    object: Any
    refusals: tuple[Problem, ...] = ()

    @property
    def refused(self) -> bool:
        return bool(self.refusals)


def decode(manifest: Any) -> Decoded:
    """The manifest as the API server hands it to a webhook, or its refusals: a built-in
    kind decoded into its Go type and defaulted, quickq-guard's own kinds decoded by their
    CRD's schema, any other kind as it is; an apiVersion the API server no longer (or never)
    serves for a kind it knows is refused."""
    obj, refusals = normalize(manifest)
    if not refusals and is_mapping(obj):
        kind, api_version = obj.get("kind"), obj.get("apiVersion")
        if isinstance(kind, str) and isinstance(api_version, str):
            unserved = unserved_api_version(api_version, kind)
            if unserved:
                refusals = [(("apiVersion",), unserved)]
    return Decoded(obj, tuple(refusals))
