"""`quickq-guard serve`: the admission webhook over TLS."""

from __future__ import annotations

import argparse
import errno
import socket
from typing import Any

from webhook.cli.check import count_of, policy_options, port_number
from webhook.cli.exits import EXIT_CANNOT_START, error


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "serve", help="run the admission webhook over TLS",
        description="Serve POST /validate and /mutate (AdmissionReview), /healthz, /readyz "
                    "and /metrics over TLS. Policies, config and certificates reload on "
                    "change. Exit 2 when they do not load, 3 when the server cannot start.")
    policy_options(parser)
    parser.add_argument("--cert", default="certs/tls.crt",
                        help="serving certificate, PEM (default: %(default)s)")
    parser.add_argument("--key", default="certs/tls.key",
                        help="serving key, PEM (default: %(default)s)")
    parser.add_argument("--host", default="0.0.0.0",
                        help="address to listen on (default: %(default)s)")
    parser.add_argument("--port", type=port_number(1), default=8443,
                        help="port to listen on (default: %(default)s)")
    parser.add_argument("--probe-port", type=port_number(1), metavar="PORT",
                        help="also serve /healthz, /readyz and /metrics (never /validate or "
                             "/mutate) on this port, over TLS with no client certificate "
                             "asked: for the kubelet and Prometheus with --client-ca "
                             "(default: only on --port)")
    parser.add_argument("--workers", type=int, default=1,
                        help="server processes (default: %(default)s)")
    parser.add_argument("--max-connections", type=count_of("must be at least 1"), metavar="N",
                        help="connections each worker serves at once; more get 503 and are "
                             "closed (default: 256)")
    parser.add_argument("--request-timeout", type=_seconds, metavar="SECONDS",
                        help="each request's headers and body must arrive within this (from "
                             "the connection, or the request's first byte), else its "
                             "connection is closed; keep it below the webhook's "
                             "timeoutSeconds (default: 4)")
    parser.add_argument("--drain", type=_drain_seconds, metavar="SECONDS",
                        help="on SIGTERM, keep answering this long, /readyz not ready and "
                             "each answer closing its connection (`Connection: close`), so "
                             "the API server's pooled connections are each used once more "
                             "and dropped, before the listener closes; 0 for none "
                             "(default: 3)")
    parser.add_argument("--mode", choices=("enforce", "dry-run"),
                        help="override the config's mode (default: the config's, enforce)")
    parser.add_argument("--self-signed", action="store_true",
                        help="create a CA and a serving certificate in the --cert "
                             "file's directory first (never done unasked: a missing "
                             "--cert or --key is an error)")
    parser.add_argument("--client-ca", metavar="FILE",
                        help="require client certificates signed by this CA (default: none)")
    parser.add_argument("--watch-exceptions", action="store_true",
                        help="honour the PolicyExceptions of the config's exceptionNamespaces, "
                             "read from a watch of the API server (read-only; default: "
                             "none is honoured)")
    parser.add_argument("--watch-claims", action="store_true",
                        help="resolve the DRA claims pods consume against a watch of every "
                             "namespace's ResourceClaims and ResourceClaimTemplates "
                             "(read-only; default: none resolves, gpu-claim-usage says so)")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="with --watch-exceptions or --watch-claims: the API server and "
                             "credentials "
                             "(default: the pod's service account, then $KUBECONFIG)")
    parser.add_argument("--instance", default="", metavar="NAME",
                        help="the name a probe's answer carries, so `quickq-guard cluster "
                             "arm` knows which install answered (the chart: ns/fullname)")
    parser.set_defaults(command=run)


def run(args: argparse.Namespace) -> int:
    for option, port in (("--port", args.port), ("--probe-port", args.probe_port)):
        problem = "" if port is None else port_problem(args.host, port, option)
        if problem:
            error(f"cannot listen on {args.host}:{port}: {problem}")
            return EXIT_CANNOT_START
    if args.probe_port is not None and args.probe_port == args.port:
        error("--probe-port must differ from --port")
        return 2
    from webhook.server import serve as server

    return int(server.run(args))


def port_problem(host: str, port: int, option: str) -> str:
    """Why the server could not listen on host:port, and what to do, found before anything
    starts; `option` is the flag that set the port."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as problem:
            if problem.errno == errno.EADDRINUSE:
                return f"the port is already in use; stop what uses it or pass {option}"
            if problem.errno == errno.EACCES:
                return (f"{problem.strerror}; pass a {option} of 1024 or more, or give the "
                        "process the capability to bind low ports (CAP_NET_BIND_SERVICE)")
            return (f"{problem.strerror or problem}; pass the --host of one of this "
                    "machine's addresses")
    return ""


def _seconds(text: str) -> float:
    """A positive number of seconds, at most 30 (the API server waits at most that long)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 < value <= 30:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 30, not {text}")
    return value


def _drain_seconds(text: str) -> float:
    """A number of seconds from 0 to 60: a drain longer than that outlasts any grace period
    worth having."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 60:
        raise argparse.ArgumentTypeError(f"must be from 0 to 60, not {text}")
    return value
