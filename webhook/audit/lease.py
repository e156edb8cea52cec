"""Leader election with a coordination.k8s.io/v1 Lease: of several audit replicas, only the
Lease's holder writes reports.

As client-go's leader election does: the holder renews the Lease every few seconds; another
replica takes it once it has seen the same record unchanged for the Lease's duration, by its
own clock (no two clocks are compared); every change goes through a replace with the
resourceVersion read, so of two replicas racing for it one wins. A holder that could not
renew for RENEW_DEADLINE of the duration stops writing at once, before anyone else may take
over; one that stops cleanly gives the Lease up, so the next takes over at its next try.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError

from webhook.api_resources import resource

log = logging.getLogger("quickq_guard.audit")

LEASE = resource("coordination.k8s.io", "v1", "Lease", "leases")
RENEW_DEADLINE = 2 / 3  # of the duration: a holder that could not renew this long stops
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def identity() -> str:
    """This replica's name in the Lease: the pod's name (its hostname) and a random part."""
    return f"{socket.gethostname()}_{uuid.uuid4().hex[:8]}"


def pod_namespace() -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE, encoding="utf-8") as file:
            return file.read().strip() or "default"
    except OSError:
        return os.environ.get("POD_NAMESPACE", "default")


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Lease:
    """Whether this replica holds the Lease now (`leading`), kept by `run`."""

    def __init__(self, api: AsyncClient, namespace: str, name: str, duration: float = 15.0,
                 me: str | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.api = api
        self.namespace = namespace
        self.name = name
        self.duration = duration
        self.me = me or identity()
        self._clock = clock
        self._renewed: float | None = None  # when this replica last renewed, by its clock
        self._seen: tuple[Any, ...] | None = None  # the other holder's record, as last read
        self._seen_at = 0.0

    @property
    def leading(self) -> bool:
        renewed = self._renewed
        return renewed is not None and \
            self._clock() - renewed < self.duration * RENEW_DEADLINE

    async def run(self, changed: Callable[[bool], None]) -> None:
        """Try for the Lease, and renew it, every third of its duration until cancelled;
        `changed(leading)` is called each time leading changes."""
        was = False
        try:
            while True:
                try:
                    await self.attempt()
                except Exception as error:  # the API server unreachable, say: try again
                    log.warning("lease: cannot read or renew", extra={"fields": {
                        "event": "lease-failed", "problem": f"{type(error).__name__}: "
                        f"{error}"[:300]}})
                if self.leading != was:
                    was = self.leading
                    log.info("lease: " + ("leading" if was else "not leading"), extra={
                        "fields": {"event": "leader" if was else "follower",
                                   "identity": self.me}})
                    changed(was)
                await asyncio.sleep(self.duration / 3 if was else min(2.0, self.duration / 3))
        finally:
            if self.leading:
                await self.release()

    async def attempt(self) -> None:
        """One try: create the Lease, renew it, or take it over once it expired."""
        try:
            lease = await self.api.get(LEASE, self.name, namespace=self.namespace)
        except ApiError as error:
            if error.status.code != 404:
                raise
            await self._create()
            return
        spec = dict(lease.get("spec") or {})
        holder = spec.get("holderIdentity") or ""
        if holder == self.me:
            spec["renewTime"] = _now()
            await self._replace(lease, spec)
            return
        record = (holder, spec.get("renewTime"), spec.get("leaseTransitions"))
        now = self._clock()
        if record != self._seen:
            self._seen, self._seen_at = record, now
        self._renewed = None
        if holder and now - self._seen_at < self.duration:
            return  # held, and renewed within its duration as far as we can tell
        spec.update(holderIdentity=self.me, acquireTime=_now(), renewTime=_now(),
                    leaseDurationSeconds=max(1, round(self.duration)),
                    leaseTransitions=int(spec.get("leaseTransitions") or 0) + (1 if holder
                                                                                else 0))
        await self._replace(lease, spec)

    async def release(self) -> None:
        """Give the Lease up (a clean stop): the next replica need not wait it out."""
        self._renewed = None
        try:
            lease = await self.api.get(LEASE, self.name, namespace=self.namespace)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") == self.me:
                spec.update(holderIdentity="", leaseDurationSeconds=1)
                lease["spec"] = spec
                await self.api.replace(lease)
        except Exception as error:  # it expires on its own
            log.warning("lease: not released", extra={"fields": {
                "event": "lease-release-failed", "problem": f"{type(error).__name__}"}})

    async def _create(self) -> None:
        body = LEASE.from_dict({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                      "metadata": {"name": self.name, "namespace": self.namespace},
                      "spec": {"holderIdentity": self.me,
                               "leaseDurationSeconds": max(1, round(self.duration)),
                               "acquireTime": _now(), "renewTime": _now(),
                               "leaseTransitions": 0}})
        started = self._clock()
        try:
            await self.api.create(body)
        except ApiError as error:
            if error.status.code == 409:  # another replica created it first
                return
            raise
        self._renewed = started

    async def _replace(self, lease: Any, spec: dict[str, Any]) -> None:
        started = self._clock()
        lease["spec"] = spec
        try:
            await self.api.replace(lease)
        except ApiError as error:
            if error.status.code == 409:  # changed since read: someone else holds it
                self._renewed = None
                return
            raise
        self._renewed = started
