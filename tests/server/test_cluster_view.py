"""The cluster view: listed, then watched; the last view kept (and aged) while the watch is
down; no view at all before the first list, and then no exception applies."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from server_helpers import Item, Listing

from webhook.loader import load_policies
from webhook.server import cluster_view, exception_view
from webhook.server.cluster_view import ClusterView


def exception(name: str, namespace: str = "grants") -> dict[str, Any]:
    return {"apiVersion": "quickq.io/v1", "kind": "PolicyException",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"policies": [{"id": "disallow-root-user"}],
                     "match": {"namespaces": ["team"]}, "expires": "2030-01-01T00:00:00Z",
                     "reason": "needed"}}




class FakeApi:
    """list() answers with `objects` (or fails while `down`); watch() yields queued events
    and fails on a queued exception."""

    def __init__(self) -> None:
        self.objects: list[dict[str, Any]] = []
        self.events: asyncio.Queue[Any] = asyncio.Queue()
        self.down = False
        self.lists = 0  # list() calls, answered or failed

    def list(self, resource: Any, namespace: str) -> Listing:
        self.lists += 1
        if self.down:
            raise ConnectionError("the API server is gone")
        return Listing([o for o in self.objects if o["metadata"]["namespace"] == namespace])

    async def _events(self) -> AsyncIterator[tuple[str, Item]]:
        while True:
            event = await self.events.get()
            if isinstance(event, Exception):
                raise event
            yield event[0], Item(event[1])

    def watch(self, resource: Any, **kwargs: Any) -> AsyncIterator[tuple[str, Item]]:
        return self._events()

    async def close(self) -> None:
        pass


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def until(check: Callable[[], bool], what: str) -> None:
    """Let the view's task run (it retries every RETRY_SECONDS) until `check` holds."""
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster_view, "RETRY_SECONDS", 0.01)


def test_listed_watched_kept_and_aged() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.objects = [exception("first")]
        now = [100.0]
        view = ClusterView(exception_view.KIND, ["grants"], lambda: api,  # type: ignore[arg-type,return-value]
                           clock=lambda: now[0])
        assert view.snapshot() is None and view.age() is None
        task = asyncio.create_task(view.run())
        await settle()
        snapshot = view.snapshot()
        assert snapshot is not None and list(snapshot.objects) == [("grants", "first")]
        assert view.age() == 0.0
        api.events.put_nowait(("ADDED", exception("second")))
        await settle()
        assert set(view.snapshot().objects) == {("grants", "first"), ("grants", "second")}  # type: ignore[union-attr]
        api.events.put_nowait(("DELETED", exception("first")))
        await settle()
        assert set(view.snapshot().objects) == {("grants", "second")}  # type: ignore[union-attr]
        # The watch breaks and the API server stays away: the last view stays, aging.
        api.down = True
        api.events.put_nowait(ConnectionError("reset"))
        await settle()
        now[0] = 130.0
        assert view.age() == 30.0
        assert set(view.snapshot().objects) == {("grants", "second")}  # type: ignore[union-attr]
        # Back: listed again, current again.
        api.down = False
        api.objects = [exception("third")]
        await until(lambda: set(view.snapshot().objects) == {("grants", "third")},  # type: ignore[union-attr]
                    "the view to list again")
        assert view.age() == 0.0
        task.cancel()

    asyncio.run(scenario())


def test_no_view_before_every_namespace_was_listed() -> None:
    async def scenario() -> None:
        api = FakeApi()
        api.down = True
        view = ClusterView(exception_view.KIND, ["grants", "more"], lambda: api)  # type: ignore[arg-type,return-value]
        task = asyncio.create_task(view.run())
        await until(lambda: api.lists >= 3, "the view to try listing again")
        assert view.snapshot() is None and view.age() is None
        assert not exception_view.ExceptionView(view).current(load_policies())
        task.cancel()

    asyncio.run(scenario())


def test_exceptions_the_webhook_would_refuse_are_left_out() -> None:
    policies = load_policies()
    good, unknown = exception("good"), exception("unknown")
    unknown["spec"]["policies"] = [{"id": "no-such-policy"}]
    broken = exception("broken")
    del broken["spec"]["reason"]
    snapshot = cluster_view.Snapshot({("grants", o["metadata"]["name"]): o
                                      for o in (good, unknown, broken)})
    read = exception_view.read(snapshot, policies)
    assert [e.key for e, _ in read.candidates("disallow-root-user")] == ["grants/good"]
    assert len(read) == 1
