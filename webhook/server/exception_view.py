"""The PolicyExceptions the webhook applies: those of a cluster view of the config's
exceptionNamespaces, read into the engine's index whenever the view or the policies change.

No view (not asked for, or not listed yet): no exception applies, so nothing is admitted
that the policies deny. A view whose watch is down is kept, and its age is in the metric
quickq_guard_cluster_view_age_seconds.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from webhook.engine import policy_exceptions
from webhook.engine.policy import Config, PolicySet
from webhook.engine.policy_exceptions import NONE, Exceptions
from webhook.server.cluster_view import ClusterView, Kind, Snapshot, client, report_age

log = logging.getLogger("quickq_guard.server")

KIND = Kind(policy_exceptions.GROUP, policy_exceptions.VERSION, policy_exceptions.KIND,
            policy_exceptions.PLURAL)


class ExceptionView:
    """One worker's exceptions: the view, and the index last built from it."""

    def __init__(self, view: ClusterView | None) -> None:
        self.view = view
        self._built: tuple[Snapshot, PolicySet, Exceptions] | None = None
        self._tasks: list[asyncio.Task[Any]] = []

    @classmethod
    def start(cls, watch: bool, kubeconfig: str | None, config: Config) -> ExceptionView:
        """The view `serve --watch-exceptions` asks for (`kubeconfig`: None for the pod's
        service account), or none."""
        if not watch:
            return cls(None)
        if not config.exceptionNamespaces:
            log.warning("--watch-exceptions: the config's exceptionNamespaces is empty, so "
                        "no exception is honoured", extra={"fields": {"event": "no-view"}})
            return cls(None)
        return cls(ClusterView(KIND, config.exceptionNamespaces, lambda: client(kubeconfig)))

    def watches(self, config: Config) -> bool:
        """Whether this view is the one `config` asks for (the same exception namespaces)."""
        namespaces = self.view.namespaces if self.view is not None else ()
        return tuple(namespaces) == tuple(config.exceptionNamespaces)

    def begin(self) -> None:
        """Start watching (in the running loop) until stop()."""
        if self.view is not None and not self._tasks:
            self._tasks = [asyncio.create_task(self.view.run()),
                           asyncio.create_task(report_age(self.view))]

    def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        self._tasks = []

    def current(self, policies: PolicySet) -> Exceptions:
        """The exceptions as the view has them now, indexed once per change."""
        snapshot = self.view.snapshot() if self.view is not None else None
        if snapshot is None:
            return NONE
        built = self._built
        if built is not None and built[0] is snapshot and built[1] is policies:
            return built[2]
        exceptions = read(snapshot, policies)
        self._built = (snapshot, policies, exceptions)
        return exceptions


def read(snapshot: Snapshot, policies: PolicySet) -> Exceptions:
    """The exceptions of a snapshot the webhook would admit today (time aside: the engine
    checks expiry at every review); one it would refuse is logged and left out."""
    kept = []
    for obj in snapshot.values():
        try:
            exception = policy_exceptions.read_exception(obj)
        except policy_exceptions.ExceptionError as error:
            _left_out(obj, str(error))
            continue
        refused = policy_exceptions.problems(exception, policies, None)
        if refused:
            _left_out(obj, "; ".join(refused))
            continue
        kept.append(exception)
    return policy_exceptions.index(kept)


def _left_out(obj: Any, problem: str) -> None:
    metadata = obj.get("metadata") or {}
    log.warning("PolicyException not applied", extra={"fields": {
        "event": "exception-refused", "exception":
        f"{metadata.get('namespace', '')}/{metadata.get('name', '')}", "problem": problem}})
