"""evaluate() in two builds of quickq-guard, each in a process of its own, timed in alternate
rounds: the pure-Python checkout against the mypyc-compiled build the image ships (or any two
directories that hold a `webhook` package). A compiled module cannot be imported twice in one
process under two names, which is why engine_ab.py's one-process way does not do here; the
alternation keeps a shared machine's noise on both sides alike. Rates are evaluations per
second of each process's CPU time, the best of the rounds.

    python benchmarks/build_ab.py                          # the checkout vs $(scripts/compiled)
    python benchmarks/build_ab.py /tmp/before "$(scripts/compiled)"   # any two builds
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# What each process runs: the rows below, one timed loop per line read from stdin.
CHILD = r"""
import gc, json, sys
from engine_bench import WEBHOOK_REVIEW, load_objects, rate, split
import webhook.engine.normalize
from webhook.engine.decode import decode
from webhook.engine.evaluate import evaluate
from webhook.engine.policy import Config
from webhook.loader import load_policies
from webhook.manifests import read_text
from webhook.testing import typical_pod

policies = load_policies(None, Config())
pod_yaml = sys.argv[1]
with open(pod_yaml, "rb") as file:
    typical = [next(read_text(file.read(), pod_yaml)).obj]
mixed = [obj for objs in load_objects(1000, 7).values() for obj in objs]
rows = {
    "typical Pod, as applied (check's path)": (typical, policies, None, True),
    "typical Pod, as given": (typical, policies, None, False),
    "webhook /validate, review Pod": ([typical_pod()], split(policies, "validate"),
                                      WEBHOOK_REVIEW, False),
    "mixed corpus, as applied": (mixed, policies, None, True),
}
for objects, chosen, review, decoded in rows.values():
    for obj in objects[:200]:
        evaluate(decode(obj) if decoded else obj, chosen, review)
gc.collect()
gc.freeze()
compiled = webhook.engine.normalize.__file__.endswith(".so")
print(json.dumps({"rows": list(rows), "compiled": compiled,
                  "from": webhook.engine.normalize.__file__}), flush=True)
for line in sys.stdin:
    name, seconds = json.loads(line)
    objects, chosen, review, decoded = rows[name]
    print(json.dumps(rate(objects, chosen, seconds, 1, review, decoded)), flush=True)
"""


def start(build: Path) -> tuple[subprocess.Popen[str], dict[str, object]]:
    """A process that imports `webhook` from `build` first, and what it says of itself."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(build), str(ROOT / "benchmarks")])}
    process = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(ROOT / "examples" / "good" / "pod.yaml")],
        # -c puts the working directory first on sys.path: not the checkout's webhook/
        cwd=tempfile.gettempdir(), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        env=env)
    assert process.stdout is not None
    return process, json.loads(process.stdout.readline())


def timed(process: subprocess.Popen[str], row: str, seconds: float) -> float:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.write(json.dumps([row, seconds]) + "\n")
    process.stdin.flush()
    return float(json.loads(process.stdout.readline()))


def compiled_site() -> Path:
    out = subprocess.run([str(ROOT / "scripts" / "compiled")], check=True,
                         capture_output=True, text=True).stdout
    return Path(out.strip())


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("builds", nargs="*", type=Path,
                        help="two directories holding a webhook package (default: this "
                             "checkout and its compiled build, scripts/compiled)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--seconds", type=float, default=0.4, help="per timed loop")
    args = parser.parse_args(argv)
    builds = args.builds or [ROOT, compiled_site()]
    if len(builds) != 2:
        parser.error("give two builds, or none")
    sides = [start(build) for build in builds]
    rows: list[str] = list(sides[0][1]["rows"])  # type: ignore[call-overload]
    for number, (_, said) in enumerate(sides):
        kind = "compiled by mypyc" if said["compiled"] else "pure Python"
        print(f"build {'AB'[number]}: {builds[number]} ({kind})")
    print(f"{'row':<44}{'A evals/s':>12}{'B evals/s':>12}{'B/A':>7}")
    for row in rows:
        best = [0.0, 0.0]
        for _ in range(args.rounds):
            for side, (process, _) in enumerate(sides):
                best[side] = max(best[side], timed(process, row, args.seconds))
        print(f"{row:<44}{best[0]:>12,.0f}{best[1]:>12,.0f}{best[1] / best[0]:>6.2f}x")
    for process, _ in sides:
        assert process.stdin is not None
        process.stdin.close()
        process.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
