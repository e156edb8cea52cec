"""`quickq-guard audit`: judge what already runs in a cluster, as the webhook would at CREATE.

Without --once it is the background controller (webhook.audit.controller) that keeps policy
reports in the cluster; with --once it lists everything once and prints the verdicts in any
`check` format, writing nothing to the cluster.
"""

from __future__ import annotations

import argparse
import contextlib
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from webhook.cli import check
from webhook.cli.check import OutputAction, count_of, port_number
from webhook.cli.exits import CliError, error, note
from webhook.cli.formats import Format
from webhook.cli.summary import FAIL_ON, exit_code
from webhook.engine.policy import PolicySet
from webhook.loader import load_config, load_policies

BATCH = 200  # verdicts rendered at a time: output streams, memory stays flat


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "audit", help="judge what already runs in a cluster and write policy reports",
        description="Judge every object of the kinds the webhook judges, in the namespaces "
                    "it judges, with the same policies, config and PolicyExceptions, as the "
                    "webhook would on CREATE. Without --once: a controller that lists and "
                    "watches them and keeps one report per namespace (OpenReports, or "
                    "wgpolicyk8s.io PolicyReports). With --once: list once, print the "
                    "verdicts as `check` prints them, write nothing; the exit code is "
                    "check's.")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="the API server and credentials (default: the pod's service "
                             "account, then $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--config", metavar="FILE",
                        help="global config, as serve --config takes it (the chart's "
                             "ConfigMap); a change re-scans")
    parser.add_argument("--policies", metavar="PATH",
                        help="directory of policy files, or one policy file (default: the "
                             "shipped policies); a change re-scans")
    parser.add_argument("--once", action="store_true",
                        help="list and judge everything once, print the verdicts, write no "
                             "report: what switching a policy to enforce would deny")
    parser.add_argument("--output", "-o", action=OutputAction, default="table",
                        metavar="FORMAT[=FILE]",
                        help="with --once: any format of check -o (table, json, sarif, "
                             "junit, github, gitlab, policyreport, html); repeatable")
    parser.add_argument("--output-file", metavar="FILE",
                        help="with --once: write the report to FILE, not stdout")
    parser.add_argument("--namespace", "-n", action="append", default=[], metavar="NS",
                        help="with --once: only this namespace (repeatable; default: every "
                             "namespace the webhook judges, and cluster-scoped objects)")
    parser.add_argument("--fail-on", choices=FAIL_ON, default="deny",
                        help="with --once: what makes the exit code 1, as for check")
    parser.add_argument("--report-api", choices=("openreports", "wgpolicyk8s"),
                        default="openreports",
                        help="openreports.io/v1alpha1 Report and ClusterReport (default), or "
                             "wgpolicyk8s.io/v1alpha2 PolicyReport and ClusterPolicyReport")
    parser.add_argument("--max-results", type=count_of("must be 1 or more"), default=1000,
                        metavar="N",
                        help="results per report at most (default: %(default)s); one more "
                             "says how many were left out")
    parser.add_argument("--metrics-port", type=port_number(0), default=9090, metavar="PORT",
                        help="serve Prometheus metrics on this port (default: %(default)s; "
                             "0: none)")
    parser.add_argument("--serve-report", action="store_true",
                        help="also serve the HTML page of the current results (check -o "
                             "html's) at /report on the metrics port: anyone who reaches "
                             "the port reads every namespace's results")
    parser.add_argument("--leader-elect", action="store_true",
                        help="write reports only while holding a coordination.k8s.io Lease, "
                             "so several replicas are safe")
    parser.add_argument("--lease-namespace", metavar="NS",
                        help="the Lease's namespace (default: the pod's, else default)")
    parser.add_argument("--lease-name", default="quickq-guard-audit", metavar="NAME",
                        help="the Lease's name (default: %(default)s)")
    parser.add_argument("--lease-duration", type=_seconds, default=15.0, metavar="SECONDS",
                        help="how long a leader that stopped renewing keeps the Lease "
                             "(default: %(default)s)")
    parser.add_argument("--resync", type=_seconds, default=3600.0, metavar="SECONDS",
                        help="list and judge everything again this often (default: "
                             "%(default)s)")
    parser.add_argument("--write-interval", type=_seconds, default=5.0, metavar="SECONDS",
                        help="write the reports that changed this often, at most "
                             "(default: %(default)s)")
    parser.set_defaults(command=run, quiet=False, show_skipped=False, docs_url="")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be more than 0, not {text}")
    return value


def run(args: argparse.Namespace) -> int:
    if not args.once:
        for option, given in (("--namespace", args.namespace), ("--output-file",
                                                                args.output_file)):
            if given:
                raise CliError(f"{option} is for --once: the controller audits every "
                               "namespace the webhook judges and writes reports")
        from webhook.audit import controller

        return controller.run(args, connect(args.kubeconfig))
    if args.serve_report:
        raise CliError("--serve-report is for the controller: with --once, -o html writes "
                       "the page")
    policies = load_policies(args.policies, load_config(args.config))
    with contextlib.ExitStack() as files:
        writers = [check.output_writer(name, file, args, files)
                   for name, file in check.report_outputs(args)]
        import asyncio  # the audit's own: `check` does not pay for importing it

        counts = asyncio.run(_once(args, policies, writers))
    if not counts["resources"]:
        note("no object to judge: no kind the webhook judges has objects in the namespaces "
             "it judges")
    return exit_code(counts, args.fail_on)


async def _once(args: argparse.Namespace, policies: PolicySet,
                writers: Sequence[Format]) -> Counter[str]:
    from webhook.audit import cluster, sweep
    from webhook.cli.judge import Judged, count
    from webhook.engine.review import Review

    counts: Counter[str] = Counter()
    api = connect(args.kubeconfig)
    try:
        kinds, _ = await cluster.served_kinds(api, policies)
        skipped, _ = await cluster.namespaces(api)
        review = Review(exceptions=(await sweep.exceptions(api, policies)).exceptions,
                        now=datetime.now(UTC))
        for writer in writers:
            writer.start(policies)
        batch: list[Judged] = []
        found = sweep.Pass({})
        async for _, item in sweep.judge_all(api, policies, kinds, review, skipped.skipped, found,
                                             args.namespace):
            count(item.decision, counts)
            if item.decision.outcome == "error":
                problem = next((r.reason for r in item.decision.results
                                if r.status == "error"), "")
                error(f"{item.document.source}: {problem}")
            batch.append(item)
            if len(batch) >= BATCH:
                _write(writers, batch)
                batch = []
        _write(writers, batch)
    except CliError:
        raise
    except Exception as problem:  # the API server refused, or cannot be reached
        raise CliError(f"cannot read the cluster: {describe(problem)}") from None
    finally:
        with contextlib.suppress(Exception):
            await api.close()
    for writer in writers:
        writer.finish(counts)
        writer.out.flush()
    return counts


def _write(writers: Sequence[Format], batch: Sequence[Any]) -> None:
    for writer in writers:
        writer.write(writer.render(batch))


def connect(kubeconfig: str | None) -> Any:
    """A lightkube client, or a clear error when there is no configuration to use."""
    from lightkube.core.exceptions import ConfigError

    from webhook.audit import cluster

    try:
        return cluster.client(kubeconfig)
    except (ConfigError, OSError) as problem:
        raise CliError(f"no cluster to audit: {problem}; pass --kubeconfig, or run in a "
                       "pod with a service account") from None


def describe(problem: BaseException) -> str:
    """An API error as the API server said it (its Status message), else the error."""
    status = getattr(problem, "status", None)
    message = getattr(status, "message", None)
    if message:
        return f"{getattr(status, 'code', '')} {message}".strip()
    return f"{type(problem).__name__}: {problem}"
