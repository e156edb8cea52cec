"""The HTML report of the 5,000-object corpus: its size and its time to interactive.

    python benchmarks/html_report.py               # targets: < 3 MB, interactive in < 2 s
    python benchmarks/html_report.py --runs 5 --json

`quickq-guard check -o html corpus/` is run from the corpus's parent folder (a relative path,
as a CI job names its manifests), then the page is opened from disk in headless Chromium
(Debian's chromium, through chromium-driver; scripts/install-browser) `--runs` times. Time to
interactive is the `interactive` mark the page's script sets once its filters and sorting
work, in milliseconds from the start of navigation (reading, parsing and laying out the page
included); the median is reported. Without chromium only the size is printed.

The corpus stays under $TMPDIR/quickq-guard-html-report/ (outside the checkout, whose
.gitignore would leave benchmarks/out/ out of a walk).
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(tempfile.gettempdir()) / "quickq-guard-html-report"
MAX_BYTES = 3 * 1024 * 1024
MAX_MS = 2000


def report(count: int, seed: int) -> tuple[Path, int]:
    """The page of a corpus of `count` objects, and the seconds `check` took to write it."""
    folder = OUT / f"corpus-{count}-{seed}"
    stamp = folder / ".corpus"
    if not (stamp.exists() and stamp.read_text() == f"{count} {seed}"):
        corpus.write(folder, count, seed)
        stamp.write_text(f"{count} {seed}")
    page = OUT / f"report-{count}.html"
    started = time.perf_counter()
    with page.open("w") as out:
        done = subprocess.run([sys.executable, "-m", "webhook.cli", "check", "-o", "html",
                               folder.name], stdout=out, stderr=subprocess.PIPE, text=True,
                              cwd=OUT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                              check=False)
    if done.returncode not in (0, 1):
        sys.exit(f"check failed: {done.stderr[-2000:]}")
    return page, round(time.perf_counter() - started, 2)


def interactive_ms(page: Path, runs: int) -> list[float] | str:
    """Milliseconds to the page's `interactive` mark in each run, or why none was measured."""
    chromium, driver_path = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not driver_path:
        return "no chromium or chromedriver: run scripts/install-browser (as root)"
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
        from selenium.webdriver.support.ui import WebDriverWait
    except ImportError:
        return "no selenium: pip install -e '.[test]'"
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu",
                     "--disable-dev-shm-usage", "--window-size=1280,900", "--no-first-run",
                     "--disable-background-networking", "--disable-extensions"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(driver_path))
    times = []
    try:
        for _ in range(runs):
            driver.get("about:blank")
            driver.get(page.as_uri())
            WebDriverWait(driver, 60).until(lambda d: d.execute_script(
                "return performance.getEntriesByName('interactive').length"))
            times.append(round(driver.execute_script(
                "return performance.getEntriesByName('interactive')[0].startTime"), 1))
    finally:
        driver.quit()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=3, help="page loads (median reported)")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)
    page, seconds = report(args.count, args.seed)
    size = page.stat().st_size
    text = page.read_text()
    data = re.search(r'<script type="application/json" id="data">(.*?)</script>', text, re.S)
    rows = len(json.loads(data.group(1))["rows"]) if data else 0
    times = interactive_ms(page, args.runs)
    median = statistics.median(times) if isinstance(times, list) else None
    figures: dict[str, Any] = {
        "objects": args.count, "findings_rows": rows, "bytes": size,
        "bytes_ok": size < MAX_BYTES, "check_seconds": seconds,
        "interactive_ms": times if isinstance(times, list) else None,
        "interactive_ms_median": median,
        "interactive_ok": None if median is None else median < MAX_MS,
        "page": str(page)}
    if not isinstance(times, list):
        figures["why_no_time"] = times
    if args.json:
        print(json.dumps(figures, indent=2))
        return
    print(f"page of {args.count} objects: {size / 1e6:.2f} MB ({size:,} bytes; target < 3 MB: "
          f"{'met' if size < MAX_BYTES else 'MISSED'}), {rows:,} finding rows, "
          f"written by check in {seconds} s")
    if median is None:
        print(f"time to interactive: not measured ({times})")
    else:
        print(f"time to interactive: median {median:.0f} ms of {times} (target < 2 s: "
              f"{'met' if median < MAX_MS else 'MISSED'})")
    print(f"page: {page}")


if __name__ == "__main__":
    main()
