"""The DRA claims the webhook resolves a pod's `resourceClaims` against: cluster views of the
ResourceClaims and ResourceClaimTemplates of every namespace, read into the engine's `Claims`
whenever either changes, so a review judges a pod consuming a GPU claim as `check` does
with the claim among its input.

A claim not in the view (not created yet, or the view not listed yet) resolves to nothing:
gpu-claim-usage says so, naming where it looked, and the GPU policies do not apply to it.
The views are read-only (get, list, watch); the chart's ClusterRole grants just that.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any

from webhook.engine.claims import CLAIM, DRA_GROUP, TEMPLATE, Claims, claims_from
from webhook.server.cluster_view import (
    ALL_NAMESPACES,
    ClusterView,
    Kind,
    Snapshot,
    client,
    report_age,
)

KINDS = (Kind(DRA_GROUP, "v1", CLAIM, "resourceclaims"),
         Kind(DRA_GROUP, "v1", TEMPLATE, "resourceclaimtemplates"))
WHERE = "the cluster"
# Short: the finding names it, and the API server cuts a warning to 256 characters.
NOT_WATCHED = Claims({}, "quickq-guard's view (serve --watch-claims is off)")
NOT_LISTED = Claims({}, "the cluster (quickq-guard has not listed claims yet)")


class ClaimView:
    """One worker's claims: a view per kind, and the lookup last built from them."""

    def __init__(self, views: tuple[ClusterView, ...]) -> None:
        self.views = views
        self._built: tuple[tuple[Snapshot, ...], Claims] | None = None
        self._tasks: list[asyncio.Task[Any]] = []

    @classmethod
    def start(cls, watch: bool, kubeconfig: str | None) -> ClaimView:
        """The views `serve --watch-claims` asks for (`kubeconfig`: None for the pod's
        service account), or none."""
        if not watch:
            return cls(())
        return cls(tuple(ClusterView(kind, [ALL_NAMESPACES], lambda: client(kubeconfig),
                                     keep=spec_only)
                         for kind in KINDS))

    def begin(self) -> None:
        """Start watching (in the running loop) until stop()."""
        if not self._tasks:
            self._tasks = [asyncio.create_task(job) for view in self.views
                           for job in (view.run(), report_age(view))]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    def current(self) -> Claims:
        """The claims as the views have them now, read once per change."""
        if not self.views:
            return NOT_WATCHED
        snapshots = tuple(view.snapshot() for view in self.views)
        if any(snapshot is None for snapshot in snapshots):
            return NOT_LISTED
        listed = tuple(snapshot for snapshot in snapshots if snapshot is not None)
        built = self._built
        if built is not None and all(a is b for a, b in zip(built[0], listed, strict=True)):
            return built[1]
        claims = read(dict(zip((view.kind for view in self.views), listed, strict=True)))
        self._built = (listed, claims)
        return claims


def spec_only(obj: dict[str, Any]) -> dict[str, Any]:
    """What a claim's lookup reads: its name, namespace and spec (a ResourceClaim's status,
    the devices allocated and the pods reserving it, and managedFields are left out)."""
    metadata = obj.get("metadata") or {}
    return {"metadata": {"name": metadata.get("name"), "namespace": metadata.get("namespace")},
            "spec": obj.get("spec")}


def read(snapshots: Mapping[Kind, Snapshot]) -> Claims:
    """The lookup over the snapshots' objects (a list's items carry no kind: each is its
    view's)."""
    def objects() -> Iterator[Mapping[str, Any]]:
        for kind, snapshot in snapshots.items():
            for obj in snapshot.values():
                yield {**obj, "apiVersion": f"{kind.group}/{kind.version}", "kind": kind.kind}

    return claims_from(objects(), WHERE)
