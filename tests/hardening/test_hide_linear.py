"""Cutting hidden values out of a text takes time linear in the text and the values: a CEL
policy's message, error text or patch is passed through `hide` with every secret value the
object holds, and both can be as large as the body limit allows.

The old `hide` tested each value against the text and then ran a `re` alternation of those
found, trying every value at every position: on the case below it was still running after
120 s, with the GIL held. Run in a child process, as tests/hardening/test_linear.py does, so
a slow one fails instead of hanging the suite.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BOUND = 10.0  # CPU seconds: a linear pass takes about one on this machine's shared cores
HANG = 120.0  # wall seconds before the child is killed
SIZE = 1_000_000


def case() -> tuple[str, list[str]]:
    """A 1 MB text and 20,000 distinct values: runs of `a` of every length up to 1,003, each
    inside the next, against a run of `a`; values that begin with 16 `b`, against a run of
    `b` (each position a near miss of every one of them); and each of those values once."""
    runs = ["a" * size for size in range(4, 1004)]
    near = [f"{'b' * 16}{number:05d}" for number in range(19_000)]
    tail = " ".join(near)
    return "a" * 100_000 + " " + "b" * (SIZE - 100_000 - len(tail) - 2) + " " + tail, \
        runs + near


def worker() -> None:
    sys.path.insert(0, str(REPO))
    from webhook.engine.hidden import hide

    text, values = case()
    started = time.process_time()
    shown = hide(text, values)
    seconds = time.process_time() - started
    a_run, b_run, tail = shown.split(" ", 2)
    # The `a` run goes as values of 1,003 `a`; what is left of it, 4 or more, as one more.
    whole, left = divmod(100_000, 1003)
    assert a_run == "(hidden)" * (whole + (left >= 4)) + "a" * (left if left < 4 else 0)
    assert b_run == text.split(" ", 2)[1]
    assert tail == " ".join(["(hidden)"] * 19_000)
    print(f"{seconds:.3f}", flush=True)


def test_hide_is_linear_in_the_text_and_the_values() -> None:
    try:
        done = subprocess.run([sys.executable, __file__], capture_output=True, text=True,
                              timeout=HANG, check=False)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"hide still running after {HANG} s") from None
    assert done.returncode == 0, done.stderr[-2000:]
    seconds = float(done.stdout)
    assert seconds < BOUND, f"hide took {seconds} CPU seconds"


if __name__ == "__main__":
    worker()
