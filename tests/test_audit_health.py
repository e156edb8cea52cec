"""The audit's probes: /healthz fails when the event loop stops beating, a job or a watch dies
with no re-scan to replace it, or a full scan stops judging; /readyz passes once a full scan
has ended. Both say why in one line."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from test_audit_page import call

from webhook.audit import health, metrics
from webhook.audit.controller import Controller
from webhook.audit.health import Health


def probe(state: Health, path: str) -> tuple[str, bytes]:
    status, headers, body = call(metrics.app(state, None), path)
    assert headers["Content-Type"] == "text/plain"
    return status, body


def test_readyz_is_503_until_a_full_scan_ended_then_200() -> None:
    state = Health()
    assert probe(state, "/readyz") == ("503 Service Unavailable",
                                       b"no full scan has ended yet\n")
    state.ready = True
    assert probe(state, "/readyz") == ("200 OK", b"ok\n")


def test_healthz_fails_when_the_loop_stops_beating() -> None:
    state = Health()
    assert probe(state, "/healthz") == ("200 OK", b"ok\n")
    state.beat -= health.LOOP_SECONDS + 5
    status, body = probe(state, "/healthz")
    assert status.startswith("503") and body.startswith(b"the event loop has not run for 3")


def test_healthz_fails_on_a_scan_that_judges_nothing_and_on_a_dead_task() -> None:
    state = Health(progress=0.0)
    assert state.liveness(now=health.SCAN_STALL_SECONDS - 1) == ""
    assert state.liveness(now=health.SCAN_STALL_SECONDS + 10) == (
        f"the full scan has judged nothing for {health.SCAN_STALL_SECONDS + 10:.0f} s")
    state = Health(problem="a task of the controller ended")
    assert probe(state, "/healthz")[1] == b"a task of the controller ended\n"


def test_the_heartbeat_names_a_dead_job_or_a_watch_not_replaced() -> None:
    async def steps() -> list[str]:
        said = []
        alive = asyncio.create_task(asyncio.sleep(60))
        ended = asyncio.create_task(asyncio.sleep(0))
        await ended
        audit: Any = SimpleNamespace(health=Health(), watching=[alive],
                                     rescan=asyncio.Event())

        async def beat() -> str:
            beating = asyncio.create_task(Controller.heartbeats(audit, jobs))
            await asyncio.sleep(0.01)
            beating.cancel()
            return str(audit.health.liveness())

        jobs = [alive]
        said.append(await beat())
        audit.watching = [alive, ended]  # a watch ended and nothing re-scans
        said.append(await beat())
        audit.rescan.set()  # a watch that ends asks for a re-scan: the scan replaces it
        said.append(await beat())
        jobs = [alive, ended]
        said.append(await beat())
        alive.cancel()
        return said

    assert asyncio.run(steps()) == ["", "a watch ended and no re-scan replaces it", "",
                                    "a task of the controller ended"]
