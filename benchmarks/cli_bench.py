"""The CLI end to end: `quickq-guard check --output json DIR` on the 5,000-file corpus.

Wall time and max RSS (process start-up, reading, judging, JSON out) of `--runs` runs, median
reported, measured with /usr/bin/time -v when it exists (RSS of the largest process; with
workers that is the parent or one worker, whichever is larger) and wall time alone otherwise.
With --checkov PATH it also runs that Checkov on the same files and prints the ratio:

    python benchmarks/cli_bench.py
    python benchmarks/cli_bench.py --checkov /tmp/checkov-venv/bin/checkov --checkov-runs 1

Outputs (the corpus, each run's JSON and timings) stay under benchmarks/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus

OUT = Path(__file__).resolve().parent / "out"
TARGET_RATIO = 50
TIME = Path("/usr/bin/time")


def ensure_corpus(directory: Path, count: int, seed: int) -> tuple[int, int]:
    """Generate the corpus unless the directory already holds `count` files of it."""
    stamp = directory / ".corpus"
    wanted = f"{count} {seed}"
    if not (stamp.exists() and stamp.read_text() == wanted):
        corpus.write(directory, count, seed)
        stamp.write_text(wanted)
    files = [p for p in directory.iterdir() if p.suffix == ".yaml"]
    return len(files), sum(p.stat().st_size for p in files)


def measure(command: list[str], output: Path, timeout: float) -> tuple[float, float | None, int]:
    """(wall seconds, max RSS in MB or None, exit code) of one run; stdout goes to `output`."""
    timed = [str(TIME), "-v", *command] if TIME.exists() else command
    start = time.perf_counter()
    with output.open("wb") as out:
        done = subprocess.run(timed, stdout=out, stderr=subprocess.PIPE, timeout=timeout,
                              check=False)
    wall = time.perf_counter() - start
    rss = None
    found = re.search(rb"Maximum resident set size \(kbytes\): (\d+)", done.stderr)
    if found:
        rss = int(found.group(1)) / 1024
    code = done.returncode
    status = re.search(rb"Exit status: (\d+)", done.stderr)
    if status:
        code = int(status.group(1))
    return wall, rss, code


def median_runs(command: list[str], runs: int, name: str,
                timeout: float) -> tuple[float, float | None, list[float], int]:
    walls, rsses, code = [], [], 0
    for run in range(runs):
        wall, rss, code = measure(command, OUT / f"{name}-{run + 1}.json", timeout)
        walls.append(wall)
        if rss is not None:
            rsses.append(rss)
    return (statistics.median(walls), statistics.median(rsses) if rsses else None, walls, code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=0, help="quickq-guard check --jobs")
    parser.add_argument("--checkov", metavar="PATH", help="a checkov executable to compare with")
    parser.add_argument("--checkov-runs", type=int, default=1)
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    args = parser.parse_args(argv)

    OUT.mkdir(exist_ok=True)
    directory = OUT / "corpus"
    files, size = ensure_corpus(directory, args.count, args.seed)
    guard = shutil.which("quickq-guard", path=str(Path(sys.executable).parent)) \
        or shutil.which("quickq-guard")
    command = [guard] if guard else [sys.executable, "-m", "webhook.cli"]
    command += ["check", "--output", "json", "--jobs", str(args.jobs), str(directory)]

    wall, rss, walls, code = median_runs(command, args.runs, "quickq-guard", args.timeout)
    report = json.loads((OUT / "quickq-guard-1.json").read_text())
    figures = {"files": files, "megabytes": round(size / 1e6, 2), "cpus": os.cpu_count(),
               "quickq_guard": {"wall_s": round(wall, 3), "max_rss_mb": rss and round(rss, 1),
                                "runs_s": [round(w, 3) for w in walls], "exit_code": code,
                                "resources": report["summary"]["resources"]}}
    rows = [("quickq-guard check -o json", wall, rss, args.runs)]
    if args.checkov:
        checkov = [args.checkov, "-d", str(directory), "--framework", "kubernetes", "--quiet",
                   "--compact", "-o", "json"]
        c_wall, c_rss, c_walls, c_code = median_runs(checkov, args.checkov_runs, "checkov",
                                                     args.timeout)
        rows.append(("checkov --framework kubernetes", c_wall, c_rss, args.checkov_runs))
        figures["checkov"] = {"wall_s": round(c_wall, 3), "max_rss_mb": c_rss and round(c_rss, 1),
                              "runs_s": [round(w, 3) for w in c_walls], "exit_code": c_code,
                              "ratio": round(c_wall / wall, 1)}
    (OUT / "cli_bench.json").write_text(json.dumps(figures, indent=2) + "\n")

    print(f"corpus: {files} files, {size / 1e6:.2f} MB ({size / files / 1000:.2f} KB/object), "
          f"{os.cpu_count()} CPUs; median of the runs")
    print(f"{'command':<34}{'runs':>5}{'wall s':>9}{'max RSS MB':>12}")
    for name, w, r, n in rows:
        shown = f"{r:,.0f}" if r is not None else "n/a"
        print(f"{name:<34}{n:>5}{w:>9.2f}{shown:>12}")
    if args.checkov:
        ratio = figures["checkov"]["ratio"]  # type: ignore[index]
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        print(f"checkov / quickq-guard wall time: {ratio}x (target >= {TARGET_RATIO}x: {verdict})")
    else:
        print("(pass --checkov PATH to compare with Checkov)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
