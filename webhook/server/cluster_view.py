"""A read-only, cached view of one kind of namespaced cluster objects, kept by list + watch.

The webhook reads cluster objects (PolicyExceptions today; any namespaced kind, such as
ResourceClaims, the same way) from this view, never from the API server while a review
waits: a review costs no API call, and a slow API server cannot slow admission. Each
namespace is listed, then watched from the list's resourceVersion; a watch that fails is
listed and watched again after a pause, and until then the last view is kept, with its age
(`age()`) in a metric. A view that was never listed holds nothing (`snapshot()` is None).
The namespace `*` (ALL_NAMESPACES) is every namespace, in one list and one watch.

The client is lightkube's AsyncClient: small, typed, asyncio-native (the server's loop), with
generic resources for custom kinds and the list's resourceVersion to watch from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from lightkube import ALL_NS, AsyncClient, KubeConfig

from webhook.api_resources import resource
from webhook.server import metrics

log = logging.getLogger("quickq_guard.server")

RETRY_SECONDS = 2.0  # after a failed list or watch
# A watch that brings nothing for this long is listed again: a connection that died without
# a word would otherwise keep an old view looking current.
RESYNC_SECONDS = 120.0
AGE_INTERVAL = 1.0  # how often the age metric is set
ALL_NAMESPACES = ALL_NS


@dataclass(frozen=True, slots=True)
class Kind:
    """A namespaced kind: its group, version, kind and plural (the URL's)."""

    group: str
    version: str
    kind: str
    plural: str


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The objects seen, by (namespace, name), replaced whole on every change: a review
    reads one consistent snapshot."""

    objects: Mapping[tuple[str, str], Mapping[str, Any]] = field(
        default_factory=lambda: MappingProxyType({}))

    def values(self) -> tuple[Mapping[str, Any], ...]:
        return tuple(self.objects.values())


class ClusterView:
    """The objects of `kind` in `namespaces`, as the API server last told them."""

    def __init__(self, kind: Kind, namespaces: Sequence[str],
                 client: Callable[[], AsyncClient],
                 clock: Callable[[], float] = time.monotonic,
                 keep: Callable[[dict[str, Any]], dict[str, Any]] | None = None) -> None:
        self.kind = kind
        # What of each object is kept (all of it by default): a view of many objects keeps
        # only the fields it reads, not their status and managedFields.
        self._trim = keep or _whole
        self.namespaces = tuple(namespaces)
        self._client = client
        self._clock = clock
        self._resource = resource(kind.group, kind.version, kind.kind, kind.plural)
        self._by_namespace: dict[str, Mapping[tuple[str, str], Mapping[str, Any]]] = {}
        self._up: set[str] = set()  # namespaces whose watch is open
        self._current_at: float | None = None  # when the view was last known current
        self._snapshot: Snapshot | None = None

    def snapshot(self) -> Snapshot | None:
        """The objects, or None before every namespace was listed once."""
        return self._snapshot

    def age(self) -> float | None:
        """Seconds since the view was last known current: 0 while every watch is open;
        None when it was never listed."""
        if self._current_at is None:
            return None
        if self._up.issuperset(self.namespaces):
            return 0.0
        return max(0.0, self._clock() - self._current_at)

    async def run(self) -> None:
        """List and watch every namespace until cancelled."""
        client = self._client()
        try:
            await asyncio.gather(*(self._keep(client, namespace)
                                   for namespace in self.namespaces))
        finally:
            with contextlib.suppress(Exception):
                await client.close()

    async def _keep(self, client: AsyncClient, namespace: str) -> None:
        while True:
            try:
                version = await self._list(client, namespace)
                await self._watch(client, namespace, version)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # a watch that fails is started again, never fatal
                self._down(namespace)
                log.warning("cluster view: watch failed; the last view is kept", extra={
                    "fields": {"event": "watch-failed", "kind": self.kind.kind,
                               "namespace": namespace,
                               "problem": f"{type(error).__name__}: {error}"[:300]}})
                await asyncio.sleep(RETRY_SECONDS)

    async def _list(self, client: AsyncClient, namespace: str) -> str:
        listing = client.list(self._resource, namespace=namespace)
        objects = {}
        async for item in listing:
            obj = self._trim(_plain(item))
            objects[_key(obj, namespace)] = obj
        self._by_namespace[namespace] = MappingProxyType(objects)
        self._up.add(namespace)
        self._publish()
        return listing.resourceVersion  # set once the list was read, even an empty one


    async def _watch(self, client: AsyncClient, namespace: str, version: str) -> None:
        events = client.watch(self._resource, namespace=namespace,
                              resource_version=version or None,
                              server_timeout=int(RESYNC_SECONDS // 2)).__aiter__()
        while True:
            try:
                kind, item = await asyncio.wait_for(events.__anext__(), RESYNC_SECONDS)
            except TimeoutError:
                return  # quiet for long: list again to be sure the view is current
            obj = self._trim(_plain(item))
            key = _key(obj, namespace)
            objects = dict(self._by_namespace.get(namespace, {}))
            if kind == "DELETED":
                objects.pop(key, None)
            else:
                objects[key] = obj
            self._by_namespace[namespace] = MappingProxyType(objects)
            self._publish()

    def _publish(self) -> None:
        self._current_at = self._clock()
        if not all(namespace in self._by_namespace for namespace in self.namespaces):
            return  # not yet listed everywhere: no view rather than part of one
        merged: dict[tuple[str, str], Mapping[str, Any]] = {}
        for namespace in self.namespaces:
            merged.update(self._by_namespace[namespace])
        self._snapshot = Snapshot(MappingProxyType(merged))

    def _down(self, namespace: str) -> None:
        if namespace in self._up:
            self._up.discard(namespace)
            self._current_at = self._clock()


async def report_age(view: ClusterView) -> None:
    """Keep quickq_guard_cluster_view_age_seconds{kind} current: +Inf until the first list."""
    gauge = metrics.VIEW_AGE.labels(view.kind.kind)
    while True:
        age = view.age()
        gauge.set(math.inf if age is None else age)
        await asyncio.sleep(AGE_INTERVAL)


def _key(obj: Mapping[str, Any], namespace: str) -> tuple[str, str]:
    """(namespace, name): the object's own namespace, which a list of every namespace needs."""
    return (obj["metadata"].get("namespace") or namespace, obj["metadata"]["name"])


def _whole(obj: dict[str, Any]) -> dict[str, Any]:
    return obj


def _plain(item: Any) -> dict[str, Any]:
    """A lightkube generic object (a dict whose metadata may be a model) as plain JSON."""
    plain: dict[str, Any] = item.to_dict()
    return plain


def client(kubeconfig: str | None) -> AsyncClient:
    """A client from the kubeconfig file, or the pod's service account (then KUBECONFIG);
    no proxy from the environment: the webhook talks to its API server only."""
    config = KubeConfig.from_file(kubeconfig) if kubeconfig else KubeConfig.from_env()
    return AsyncClient(config=config, trust_env=False)
