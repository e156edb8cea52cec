"""Large reviews are bounded in number, not only in size: at most LARGE_AT_ONCE of them have
their body read (one judged beside the event loop, the next read and waiting for it); the
others wait for their turn with their body unread. Before, every connection's body was read
as it came and queued for the judging thread: twelve 2.95 MiB reviews at once took a worker
from 100 to 191 MiB, past the chart's memory limit. (The memory itself:
benchmarks/hostile_load.py.)"""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from server_helpers import pod, review

from webhook.server import app as app_module
from webhook.server.app import Guard, Settings, build_app

SENT = 6


def _large() -> bytes:
    obj = pod()
    obj["spec"]["containers"] = [dict(obj["spec"]["containers"][0], name=f"c{i}")
                                 for i in range(1000)]
    body = json.dumps(review(obj)).encode()
    assert len(body) > app_module.INLINE_MAX
    return body


def test_large_reviews_past_the_bound_wait_with_their_body_unread(
        certs_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    guard = Guard(Settings(cert=str(certs_dir / "tls.crt"), key=str(certs_dir / "tls.key"),
                           policies=None, config=None))
    release = threading.Event()
    judging = threading.Event()
    real_answer = app_module.answer
    real_read = app_module.read_body
    read: list[int] = []

    def answer(*args: Any) -> Any:  # the judging thread: held until the reads are counted
        judging.set()
        release.wait(30)
        return real_answer(*args)

    async def read_body(request: Any, limit: int) -> bytes:
        body = await real_read(request, limit)
        read.append(len(body))
        return body

    monkeypatch.setattr(app_module, "answer", answer)
    monkeypatch.setattr(app_module, "read_body", read_body)
    body = _large()

    async def run() -> tuple[list[httpx.Response], int]:
        transport = httpx.ASGITransport(app=build_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="https://test") as client:
            posted = [asyncio.create_task(client.post(
                "/validate", content=body, headers={"content-type": "application/json"}))
                for _ in range(SENT)]
            while not judging.is_set():
                await asyncio.sleep(0.01)
            for _ in range(200):  # let every request go as far as it can (no I/O here)
                await asyncio.sleep(0)
            held = len(read)
            release.set()
            return list(await asyncio.gather(*posted)), held

    answers, held = asyncio.run(run())
    guard.judging.shutdown()
    assert held == app_module.LARGE_AT_ONCE, held
    assert [a.status_code for a in answers] == [200] * SENT
    assert all(a.json()["response"]["allowed"] for a in answers)
    assert len(read) == SENT


def test_small_reviews_do_not_wait_for_large_ones(certs_dir: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A typical review is judged in the event loop as it comes, while the large ones wait."""
    guard = Guard(Settings(cert=str(certs_dir / "tls.crt"), key=str(certs_dir / "tls.key"),
                           policies=None, config=None))
    release = threading.Event()
    judging = threading.Event()
    real_answer = app_module.answer

    def answer(*args: Any) -> Any:
        if threading.current_thread() is not threading.main_thread():
            judging.set()
            release.wait(30)
        return real_answer(*args)

    monkeypatch.setattr(app_module, "answer", answer)
    body = _large()

    async def run() -> tuple[httpx.Response, list[httpx.Response]]:
        transport = httpx.ASGITransport(app=build_app(guard))
        async with httpx.AsyncClient(transport=transport, base_url="https://test") as client:
            large = [asyncio.create_task(client.post(
                "/validate", content=body, headers={"content-type": "application/json"}))
                for _ in range(SENT)]
            while not judging.is_set():
                await asyncio.sleep(0.01)
            small = await client.post("/validate", json=review(pod()))
            release.set()
            return small, list(await asyncio.gather(*large))

    small, large = asyncio.run(run())
    guard.judging.shutdown()
    assert small.status_code == 200 and small.json()["response"]["allowed"] is True
    assert [a.status_code for a in large] == [200] * SENT

