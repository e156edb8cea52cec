"""What a worker does once it has loaded everything: the start-up heap is moved out of the
garbage collector's way, and log records skip looking up their caller (no line names it)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Run in a process of its own: freezing and the logging switches are process-wide.
LOAD_A_WORKER = """
import gc, json, logging, sys
from webhook.server.app import Settings
from webhook.server.serve import WorkerConfig

settings = Settings(cert=sys.argv[1], key=sys.argv[2], policies=None, config=None)
config = WorkerConfig(settings, host="127.0.0.1", port=0, log_config=None)
before = {"frozen": gc.get_freeze_count(), "srcfile": logging._srcfile}
config.load()
after = {"frozen": gc.get_freeze_count(), "srcfile": logging._srcfile}
cycle = []
cycle.append(cycle)
del cycle
print(json.dumps({"before": before, "after": after, "collected": gc.collect()}))
"""


def test_a_loaded_worker_freezes_its_heap_and_skips_caller_lookups(certs_dir: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LOAD_A_WORKER, str(certs_dir / "tls.crt"),
         str(certs_dir / "tls.key")], capture_output=True, text=True, timeout=60, check=True)
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["before"]["frozen"] == 0 and seen["before"]["srcfile"] is not None
    # Modules, policies and compiled programs: tens of thousands of objects.
    assert seen["after"]["frozen"] > 10_000, seen
    assert seen["after"]["srcfile"] is None
    # What comes later is still collected.
    assert seen["collected"] >= 1
