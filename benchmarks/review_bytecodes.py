"""Bytecodes the webhook executes for one review, by function: a deterministic figure to
optimise against when the load test is too noisy to see a change of a few percent.

At saturation the server spends some 2.5 times longer per bytecode than a tight loop shows
(TLS, h11 and the kernel between two reviews leave the branch predictors and caches cold), so
the count of executed bytecodes tracks server CPU per review better than micro-benchmarks do.
C work (orjson, TLS) is not counted: check a change that trades bytecodes for C calls with
`engine_bench.py` or `webhook_load.py` as well.

One review of benchmarks/webhook_load.py's typical Pod goes through the ASGI app in process
(no TLS, no HTTP parsing: those are uvicorn's and h11's, the same for the floor).

    .venv/bin/python benchmarks/review_bytecodes.py            # totals for /validate, /mutate
    .venv/bin/python benchmarks/review_bytecodes.py --top 25   # and the 25 costliest functions
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import logging.config
import os
import sys
import tempfile
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import webhook_load  # benchmarks/ is not a package

from webhook.server.app import Guard, Settings, build_app
from webhook.server.certs import ensure_certs
from webhook.server.logs import log_config


def count(path: str, guard: Guard) -> collections.Counter[str]:
    """Bytecodes per function for the second of two identical reviews (the first warms the
    caches a long-running server has warm)."""
    head, body = webhook_load.request_template(path)[0].split(b"\r\n\r\n", 1)
    request_line, *lines = head.split(b"\r\n")
    query = request_line.split(b" ")[1].partition(b"?")[2]
    headers = [(name.lower(), value) for name, value in
               (line.split(b": ", 1) for line in lines)]  # as uvicorn hands them on
    app = build_app(guard)
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "POST", "scheme": "https", "path": path, "raw_path": path.encode(),
             "query_string": query, "headers": headers, "root_path": "",
             "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 8443), "state": {}}
    counts: collections.Counter[str] = collections.Counter()

    def tracer(frame: FrameType, event: str, arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            code = frame.f_code
            counts[f"{Path(code.co_filename).name}:{code.co_name}"] += 1
        return tracer

    async def review() -> None:
        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            pass

        await app(dict(scope), receive, send)

    async def main() -> None:
        guard.loop = asyncio.get_running_loop()  # log lines held per pass, as when serving
        await review()
        await asyncio.sleep(0)
        sys.settrace(tracer)
        await review()
        sys.settrace(None)
        await asyncio.sleep(0)

    asyncio.run(main())
    return counts


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=0, help="list the costliest functions")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as workdir, open(os.devnull, "w") as devnull:
        config = log_config()
        config["handlers"]["stdout"]["stream"] = devnull  # the review log lines
        logging.config.dictConfig(config)
        files = ensure_certs(Path(workdir), "quickq-guard", "quickq-guard")
        guard = Guard(Settings(cert=str(files.cert), key=str(files.key), policies=None,
                               config=None))
        results = {path: count(path, guard) for path in ("/validate", "/mutate")}
    for path, counts in results.items():
        print(f"{path}: {sum(counts.values()):,} bytecodes per review")
        for name, number in counts.most_common(args.top):
            print(f"  {number:6,} {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
