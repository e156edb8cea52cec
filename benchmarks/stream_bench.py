"""`quickq-guard check` on one large stream, in every output format: wall, CPU and peak RSS.

The input is one file of --count Pods (default 110,048: a cluster's worth, as `kubectl get pods
-A -o yaml` or a rendered chart hands it over), made by corpus.pod_stream. The targets: peak
RSS <= 300 MB in every format, and no format slower than the table output of the CLI before it
streamed (pass that checkout with --reference to time it in the same run):

    python benchmarks/stream_bench.py
    python benchmarks/stream_bench.py --reference /tmp/quickq-guard-before --formats table

Peak RSS is the largest single process's (/usr/bin/time -v), workers included. Outputs stay
under benchmarks/out/.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from cli_bench import OUT, Run, measure

FORMATS = ("table", "json", "sarif", "junit", "github", "policyreport")
TARGET_RSS_MB = 300


def ensure_stream(path: Path, count: int, seed: int) -> int:
    stamp = path.with_suffix(".stamp")
    wanted = f"{count} {seed}"
    if not (path.exists() and stamp.exists() and stamp.read_text() == wanted):
        corpus.pod_stream(path, count, seed)
        stamp.write_text(wanted)
    return path.stat().st_size


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=110_048)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--formats", nargs="+", choices=FORMATS, default=list(FORMATS))
    parser.add_argument("--jobs", type=int, default=0,
                        help="quickq-guard check --jobs (default: check's own choice)")
    parser.add_argument("--reference", type=Path, metavar="CHECKOUT",
                        help="a checkout of the CLI to compare with (its table output)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    stream = out / f"pods-{args.count}.yaml"
    size = ensure_stream(stream, args.count, args.seed)
    rows: list[tuple[str, Run]] = []
    command = [sys.executable, "-m", "webhook.cli", "check"]
    if args.jobs:
        command += ["--jobs", str(args.jobs)]
    if args.reference:
        reference = [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv.pop(1)); "
                     "from webhook.cli import main; sys.exit(main())", str(args.reference),
                     "check", str(stream)]
        rows.append(("table (reference)", measure(reference, out / "stream-reference.out",
                                                  args.timeout)))
    for name in args.formats:
        rows.append((name, measure([*command, "-o", name, str(stream)],
                                   out / f"stream-{name}.out", args.timeout)))
    figures: dict[str, Any] = {"pods": args.count, "megabytes": round(size / 1e6, 1),
                               "cpus": os.cpu_count(), "runs": {}}
    print(f"input: one file of {args.count:,} Pods, {size / 1e6:.1f} MB; {os.cpu_count()} CPUs")
    print(f"{'output':<20}{'wall s':>8}{'CPU s':>8}{'max RSS MB':>12}{'output MB':>11}{'exit':>6}")
    for name, run in rows:
        written = (out / ("stream-reference.out" if "reference" in name
                          else f"stream-{name}.out")).stat().st_size / 1e6
        cpu = f"{run.cpu:.1f}" if run.cpu is not None else "n/a"
        rss = f"{run.rss:,.0f}" if run.rss is not None else "n/a"
        print(f"{name:<20}{run.wall:>8.1f}{cpu:>8}{rss:>12}{written:>11.0f}{run.code:>6}")
        figures["runs"][name] = {"wall_s": round(run.wall, 2), "cpu_s": run.cpu,
                                 "max_rss_mb": run.rss, "output_mb": round(written, 1),
                                 "exit_code": run.code}
    ours = [run for name, run in rows if "reference" not in name]
    peak = max((run.rss or 0) for run in ours)
    print(f"peak RSS {peak:,.0f} MB (target <= {TARGET_RSS_MB} MB: "
          f"{'met' if peak <= TARGET_RSS_MB else 'NOT met'})")
    if args.reference:
        before = rows[0][1]
        slowest = max(run.wall for run in ours)
        print(f"slowest format {slowest:.1f} s vs the reference table {before.wall:.1f} s: "
              f"{'met' if slowest <= before.wall else 'NOT met'}")
        if before.cpu is not None and all(run.cpu is not None for run in ours):
            # The reference runs in one process; with workers, wall time gains from a free
            # core that CPU time does not show.
            costliest = max(run.cpu or 0.0 for run in ours)
            print(f"by CPU time: costliest format {costliest:.1f} s vs the reference table "
                  f"{before.cpu:.1f} s")
    (out / "stream_bench.json").write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
