"""Liveness and readiness of the audit, as the chart's probes ask them on the metrics port.

Alive: the event loop beat within LOOP_SECONDS (a loop blocked or gone stops beating), no
job of the controller nor any watch of the current scan ended without a re-scan to replace
it, and a running full scan judged an object within SCAN_STALL_SECONDS. Ready: a full scan
has ended. Every replica scans, the Lease holder and the one following it alike (the
follower keeps its results current to take over at once), so readiness means the same on
both. The loop writes these values and the metrics server's threads read them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

LOOP_SECONDS = 30.0
SCAN_STALL_SECONDS = 120.0  # a page of 500 objects takes well under a second to judge


@dataclass(slots=True)
class Health:
    beat: float = field(default_factory=time.monotonic)  # the loop's last heartbeat
    problem: str = ""  # what the loop found dead at that heartbeat
    progress: float | None = None  # when the running scan last judged an object; None: idle
    ready: bool = False

    def liveness(self, now: float | None = None) -> str:
        """Why the controller is not alive, in one line; "" when it is."""
        now = time.monotonic() if now is None else now
        if now - self.beat > LOOP_SECONDS:
            return f"the event loop has not run for {now - self.beat:.0f} s"
        if self.problem:
            return self.problem
        if self.progress is not None and now - self.progress > SCAN_STALL_SECONDS:
            return f"the full scan has judged nothing for {now - self.progress:.0f} s"
        return ""

    def readiness(self) -> str:
        """Why the controller is not ready, in one line; "" when it is."""
        return "" if self.ready else "no full scan has ended yet"
