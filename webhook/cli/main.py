"""The `quickq-guard` command: parsing, dispatch, and the exit codes of webhook.cli.exits."""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from webhook import __version__
from webhook.cli import (
    audit,
    certs,
    check,
    cluster,
    crd,
    export,
    nodetemplates,
    policies,
    report,
    serve,
    test,
)
from webhook.cli.exits import EXIT_ERROR, EXIT_OK, CliError, error
from webhook.engine.policy import PolicyError


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return int(args.command(args))
    except (PolicyError, CliError) as problem:
        error(str(problem))
        return EXIT_ERROR
    except ModuleNotFoundError as missing:
        if (missing.name or "").split(".")[0] not in SERVER_MODULES:
            raise
        error("this command needs the webhook's dependencies, which a plain install leaves "
              f"out (no module {missing.name!r}): pip install 'quickq-guard[server]'")
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `quickq-guard check ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


# What the `server` extra installs (pyproject.toml): serve, certs and cluster import them
# (httpx2 with lightkube: the HTTP client under it, whose transport `cluster` gives it).
SERVER_MODULES = frozenset({"uvicorn", "starlette", "cryptography", "lightkube", "httpx2",
                            "prometheus_client"})


def run() -> NoReturn:
    """The `quickq-guard` command: main(), its output flushed, then the process ends at once.
    Tearing the interpreter down after that (every module and object freed one by one)
    changes nothing anyone sees and makes `check` of one small file 1.3x the wall time, 1.2x
    the CPU (examples/good/deployment.yaml, 2026-12-07; no difference on 5,000 files). A
    command that raises still unwinds as usual, with its traceback."""
    code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # `quickq-guard check ... | head`: the reader has what it wanted
        pass
    except OSError as problem:  # a full disk, say: the output is not all there
        error(f"cannot write the output: {problem.strerror or problem}")
        code = EXIT_ERROR
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    os._exit(code)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(
        prog="quickq-guard",
        description="Kubernetes admission guardrails for GPU inference and training workloads.",
        epilog="Exit codes: 0 nothing fails, 1 something fails (see check --fail-on), "
               "2 input, policy or usage error, 3 serve cannot start.")
    top.add_argument("--version", action="version", version=f"quickq-guard {__version__}")
    commands = top.add_subparsers(title="commands", required=True, metavar="COMMAND")
    check.add_parser(commands)
    policies.add_parser(commands)
    nodetemplates.add_parser(commands)
    test.add_parser(commands)
    serve.add_parser(commands)
    certs.add_parser(commands)
    export.add_parser(commands)
    cluster.add_parser(commands)
    report.add_parser(commands)
    crd.add_parser(commands)
    audit.add_parser(commands)
    return top
