"""The pre-commit case: `quickq-guard check` of one small Deployment with the default
policies, a process each run, almost all of it imports.

Prints the median and the fastest wall time of `--runs` runs. With --before DIR it also times
that checkout (`python -m webhook.cli` in DIR, this interpreter), a run of each in turn, so
a shared machine's load weighs on both. With --floor it times, in the same rounds, what no
`check` can go below while it imports them: the interpreter alone, the other libraries
`check` reads a manifest with (PyYAML, orjson, re2), and those with pydantic and one model:

    python benchmarks/small_file.py
    python benchmarks/small_file.py --runs 21 --before /tmp/before
    python benchmarks/small_file.py --runs 21 --floor

The package's bytecode is compiled first, as an installed quickq-guard has it (pip compiles
it): where PYTHONDONTWRITEBYTECODE is set, each run would otherwise compile every module.
"""

from __future__ import annotations

import argparse
import compileall
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MANIFEST = ROOT / "examples" / "good" / "deployment.yaml"


# What `check` imports besides its own modules: the standard library it uses, PyYAML, orjson
# and re2; then pydantic, with a model validated (its schema machinery loads on the first).
LIBRARIES = "import argparse, dataclasses, datetime, json, pathlib, re, typing, yaml, orjson, re2"
PYDANTIC = (LIBRARIES + "\nfrom pydantic import BaseModel, ConfigDict\n"
            "class Model(BaseModel):\n    model_config = ConfigDict(extra='forbid', frozen=True)\n"
            "    name: str = ''\nModel.model_validate({'name': 'x'})\n")
FLOORS = {"floor: python": "pass", "floor: + libraries": LIBRARIES,
          "floor: + libraries + pydantic": PYDANTIC}


def floor(source: str) -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", source], check=True)
    return time.perf_counter() - started


def once(checkout: Path) -> float:
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "webhook.cli", "check", str(MANIFEST)], cwd=checkout,
                   env=env, stdout=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--runs", type=int, default=15)
    arguments.add_argument("--before", type=Path, help="another checkout, timed alternately")
    arguments.add_argument("--floor", action="store_true",
                           help="also time the interpreter and the libraries alone")
    args = arguments.parse_args()
    checkouts = {"after" if args.before else "this": ROOT}
    if args.before:
        checkouts["before"] = args.before.resolve()
    for checkout in checkouts.values():
        compileall.compile_dir(checkout / "webhook", quiet=1)
        once(checkout)  # warm the file cache
    floors = FLOORS if args.floor else {}
    times: dict[str, list[float]] = {name: [] for name in (*checkouts, *floors)}
    for _ in range(args.runs):
        for name, checkout in checkouts.items():
            times[name].append(once(checkout))
        for name, source in floors.items():
            times[name].append(floor(source))
    for name, measured in times.items():
        what = "" if name in floors else f" of `check {MANIFEST.relative_to(ROOT)}`"
        print(f"{name}: median {statistics.median(measured):.3f} s, "
              f"fastest {min(measured):.3f} s ({args.runs} runs{what})")


if __name__ == "__main__":
    main()
