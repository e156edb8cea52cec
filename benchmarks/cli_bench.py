"""The CLI end to end: `quickq-guard check --output json DIR` on the 5,000-file corpus.

Wall time, CPU time (user + system, workers included) and max RSS (process start-up, reading,
judging, JSON out) of `--runs` runs, medians reported, measured with /usr/bin/time -v when it
exists (RSS of the largest single process) and wall time alone otherwise. On a shared machine
the CPU-time ratio is the steadier one; the target is about wall time.
With --checkov PATH it also runs that Checkov on the same files and prints the ratio:

    python benchmarks/cli_bench.py
    python benchmarks/cli_bench.py --checkov /tmp/checkov-venv/bin/checkov --checkov-runs 1
    python benchmarks/cli_bench.py --checkov-figures OUT/cli_bench.json  # that Checkov time again
    python benchmarks/cli_bench.py --before /tmp/before   # another checkout, timed alternately

Checkov takes minutes a run: --checkov-figures reuses the Checkov figures an earlier run wrote
(same corpus). --before DIR times that checkout's CLI (`python -m webhook.cli` in DIR, this
interpreter) in the same run, a run of each in turn, so a shared machine's load weighs on both.

Outputs (the corpus, each run's JSON and timings) stay under $TMPDIR/quickq-guard-cli-bench/
(outside the checkout: `check DIR` leaves out what .gitignore ignores, and benchmarks/out/ is
ignored); a run that judges fewer objects than the corpus has is an error. The package's
bytecode is compiled first, as an installed quickq-guard has it (pip compiles it): where
PYTHONDONTWRITEBYTECODE is set, each run would otherwise compile every module anew.
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
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus

WEBHOOK = Path(__file__).resolve().parent.parent / "webhook"
# Outside the checkout: check's walk leaves out what .gitignore ignores (benchmarks/out/ is).
OUT = Path(tempfile.gettempdir()) / "quickq-guard-cli-bench"
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


class Run(NamedTuple):
    wall: float  # seconds
    cpu: float | None  # user + system seconds, the process and its workers
    rss: float | None  # MB, the largest single process
    code: int


def measure(command: list[str], output: Path, timeout: float, cwd: Path | None = None) -> Run:
    """One run of the command (in `cwd`), its stdout going to `output`."""
    timed = [str(TIME), "-v", *command] if TIME.exists() else command
    start = time.perf_counter()
    with output.open("wb") as out:
        done = subprocess.run(timed, stdout=out, stderr=subprocess.PIPE, timeout=timeout,
                              check=False, cwd=cwd)
    wall = time.perf_counter() - start
    def field(name: bytes) -> float | None:
        found = re.search(name + rb": ([\d.]+)", done.stderr)
        return float(found.group(1)) if found else None

    user, system, rss = (field(rb"User time \(seconds\)"), field(rb"System time \(seconds\)"),
                         field(rb"Maximum resident set size \(kbytes\)"))
    status = field(rb"Exit status")
    return Run(wall, user + system if user is not None and system is not None else None,
               rss / 1024 if rss is not None else None,
               int(status) if status is not None else done.returncode)


def median_runs(command: list[str], runs: int, out: Path, name: str,
                timeout: float) -> tuple[Run, list[Run]]:
    """The median of each figure over the runs, and the runs."""
    return alternate([(name, command, None)], runs, out, timeout)[name]


def alternate(commands: list[tuple[str, list[str], Path | None]], runs: int, out: Path,
              timeout: float) -> dict[str, tuple[Run, list[Run]]]:
    """median_runs of several (name, command, cwd), a run of each in turn."""
    done: dict[str, list[Run]] = {name: [] for name, _, _ in commands}
    for run in range(runs):
        for name, command, cwd in commands:
            done[name].append(measure(command, out / f"{name}-{run + 1}.json", timeout, cwd))
    return {name: (_median(their_runs), their_runs) for name, their_runs in done.items()}


def _median(done: list[Run]) -> Run:
    def median(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    wall = statistics.median(r.wall for r in done)
    return Run(wall, median([r.cpu for r in done]), median([r.rss for r in done]),
               done[-1].code)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=0,
                        help="quickq-guard check --jobs (default: check's own choice)")
    parser.add_argument("--checkov", metavar="PATH", help="a checkov executable to compare with")
    parser.add_argument("--checkov-runs", type=int, default=1)
    parser.add_argument("--checkov-figures", type=Path, metavar="JSON",
                        help="the cli_bench.json of an earlier run with --checkov: reuse its "
                             "Checkov figures instead of running Checkov")
    parser.add_argument("--before", type=Path, metavar="CHECKOUT",
                        help="another checkout of quickq-guard to time in the same run")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run")
    parser.add_argument("--out", type=Path, default=OUT, help="where the corpus and outputs go")
    args = parser.parse_args(argv)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    directory = out / "corpus"
    files, size = ensure_corpus(directory, args.count, args.seed)
    guard = shutil.which("quickq-guard", path=str(Path(sys.executable).parent)) \
        or shutil.which("quickq-guard")
    command = [guard] if guard else [sys.executable, "-m", "webhook.cli"]
    command += ["check", "--output", "json", str(directory)]
    if args.jobs:
        command[-1:-1] = ["--jobs", str(args.jobs)]

    timed: list[tuple[str, list[str], Path | None]] = []
    if args.before:
        before = args.before.resolve()
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(before / "webhook")],
                       check=True)
        timed.append(("before", [sys.executable, "-m", "webhook.cli", *command[1 if guard else 3:]],
                      before))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(WEBHOOK)], check=True)
    timed.append(("quickq-guard", command, None))
    medians = alternate(timed, args.runs, out, args.timeout)
    ours, runs = medians["quickq-guard"]
    report = json.loads((out / "quickq-guard-1.json").read_text())
    judged = report["summary"]["resources"]
    if judged < files:
        # check's directory walk leaves out what a .gitignore ignores (benchmarks/out/ is):
        # a run that judged nothing must not pass for a fast one.
        print(f"quickq-guard judged {judged} of the {files} files in {directory}: put the "
              "corpus where no .gitignore leaves it out (--out)", file=sys.stderr)
        return 2
    figures: dict[str, Any] = {
        "files": files, "megabytes": round(size / 1e6, 2), "cpus": os.cpu_count(),
        "quickq_guard": {**_figures(ours, runs), "resources": report["summary"]["resources"]}}
    rows = [("quickq-guard check -o json", ours, len(runs))]
    if args.before:
        first, first_runs = medians["before"]
        rows.insert(0, (f"before: {args.before}"[:33], first, len(first_runs)))
        figures["before"] = {**_figures(first, first_runs), "checkout": str(args.before),
                             "wall_ratio": round(first.wall / ours.wall, 2)}
        if first.cpu and ours.cpu:
            figures["before"]["cpu_ratio"] = round(first.cpu / ours.cpu, 2)
    if args.checkov_figures:
        earlier = json.loads(args.checkov_figures.read_text())
        if earlier.get("files") != files or "checkov" not in earlier:
            print(f"{args.checkov_figures} holds no Checkov figures for this corpus",
                  file=sys.stderr)
            return 2
        theirs = Run(earlier["checkov"]["wall_s"], earlier["checkov"]["cpu_s"],
                     earlier["checkov"]["max_rss_mb"], earlier["checkov"]["exit_code"])
        rows.append(("checkov (earlier run)", theirs, len(earlier["checkov"]["runs_wall_s"])))
        figures["checkov"] = {**earlier["checkov"], "reused_from": str(args.checkov_figures),
                              "wall_ratio": round(theirs.wall / ours.wall, 1)}
        if theirs.cpu and ours.cpu:
            figures["checkov"]["cpu_ratio"] = round(theirs.cpu / ours.cpu, 1)
    elif args.checkov:
        checkov = [args.checkov, "-d", str(directory), "--framework", "kubernetes", "--quiet",
                   "--compact", "-o", "json"]
        theirs, their_runs = median_runs(checkov, args.checkov_runs, out, "checkov",
                                         args.timeout)
        rows.append(("checkov --framework kubernetes", theirs, len(their_runs)))
        figures["checkov"] = {**_figures(theirs, their_runs),
                              "wall_ratio": round(theirs.wall / ours.wall, 1)}
        if theirs.cpu and ours.cpu:
            figures["checkov"]["cpu_ratio"] = round(theirs.cpu / ours.cpu, 1)
    (out / "cli_bench.json").write_text(json.dumps(figures, indent=2) + "\n")

    print(f"corpus: {files} files, {size / 1e6:.2f} MB ({size / files / 1000:.2f} KB/object), "
          f"{os.cpu_count()} CPUs; median of the runs")
    print(f"{'command':<34}{'runs':>5}{'wall s':>9}{'CPU s':>8}{'max RSS MB':>12}")
    for name, run, count in rows:
        cpu = f"{run.cpu:.2f}" if run.cpu is not None else "n/a"
        rss = f"{run.rss:,.0f}" if run.rss is not None else "n/a"
        print(f"{name:<34}{count:>5}{run.wall:>9.2f}{cpu:>8}{rss:>12}")
    if args.before:
        ratio = figures["before"]
        print(f"before / now: wall time {ratio['wall_ratio']}x"
              + (f", CPU time {ratio['cpu_ratio']}x" if "cpu_ratio" in ratio else ""))
    if "checkov" in figures:
        ratio = figures["checkov"]["wall_ratio"]
        verdict = "met" if ratio >= TARGET_RATIO else "NOT met"
        cpu_ratio = figures["checkov"].get("cpu_ratio")
        print(f"checkov / quickq-guard: wall time {ratio}x (target >= {TARGET_RATIO}x: {verdict})"
              + (f", CPU time {cpu_ratio}x" if cpu_ratio else ""))
    else:
        print("(pass --checkov PATH to compare with Checkov)")
    return 0


def _figures(median: Run, runs: list[Run]) -> dict[str, Any]:
    return {"wall_s": round(median.wall, 3),
            "cpu_s": round(median.cpu, 2) if median.cpu is not None else None,
            "max_rss_mb": round(median.rss, 1) if median.rss is not None else None,
            "runs_wall_s": [round(r.wall, 3) for r in runs], "exit_code": median.code}


if __name__ == "__main__":
    sys.exit(main())
