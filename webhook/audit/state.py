"""What the audit keeps between scans: per object its few results, never the object.

A report is rebuilt from these whenever its namespace is marked dirty; an object whose
results come back empty (fixed, deleted, now excluded) is dropped, so memory follows the
number of objects that fail a policy, not the number in the cluster. Pure: no I/O.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from webhook.audit.scan import Entry, Subject


@dataclass(frozen=True, slots=True)
class Held:
    """One object's results, and since when it has had exactly these (Unix seconds): the
    report's timestamp, which stays put while nothing changes."""

    subject: Subject
    entries: tuple[Entry, ...]
    since: int


class Results:
    """Results by object uid, the uids of each report's namespace ("" for cluster scope),
    the namespaces whose report changed since `take_dirty`, and counts by policy and
    result for the metrics."""

    def __init__(self) -> None:
        self.objects: dict[str, Held] = {}
        self.namespaces: dict[str, set[str]] = {}
        self.dirty: set[str] = set()
        self.counts: Counter[tuple[str, str]] = Counter()

    def put(self, subject: Subject, entries: tuple[Entry, ...], now: int) -> None:
        """Record an object's results (none: forget it); its namespace is dirty if they
        changed."""
        uid = subject.uid
        old = self.objects.get(uid)
        if old is not None and old.subject == subject and old.entries == entries:
            return
        if old is not None:
            self._forget(uid, old)
        if entries:
            since = old.since if old is not None and old.entries == entries else now
            self.objects[uid] = Held(subject, entries, since)
            self.namespaces.setdefault(subject.namespace, set()).add(uid)
            self.counts.update((entry.policy, entry.result) for entry in entries)
            self.dirty.add(subject.namespace)

    def drop(self, uid: str) -> None:
        old = self.objects.get(uid)
        if old is not None:
            self._forget(uid, old)

    def keep_only(self, seen: set[str]) -> None:
        """After a full scan: forget every object it did not see."""
        for uid in [uid for uid in self.objects if uid not in seen]:
            self.drop(uid)

    def drop_namespace(self, namespace: str) -> None:
        for uid in list(self.namespaces.get(namespace, ())):
            self.drop(uid)
        self.dirty.add(namespace)

    def held(self, namespace: str) -> Iterator[Held]:
        for uid in self.namespaces.get(namespace, ()):
            yield self.objects[uid]

    def take_dirty(self) -> set[str]:
        dirty, self.dirty = self.dirty, set()
        return dirty

    def mark(self, namespaces: Iterable[str]) -> None:
        self.dirty.update(namespaces)

    def _forget(self, uid: str, old: Held) -> None:
        del self.objects[uid]
        namespace = old.subject.namespace
        uids = self.namespaces.get(namespace)
        if uids is not None:
            uids.discard(uid)
            if not uids:
                del self.namespaces[namespace]
        self.counts.subtract((entry.policy, entry.result) for entry in old.entries)
        self.dirty.add(namespace)
