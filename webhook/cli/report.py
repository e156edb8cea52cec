"""`quickq-guard report`: the reports the background audit keeps in the cluster, read through
the API and written as `check` writes its own reports (the HTML page, JSON, the table).

Each report result becomes the verdict `check` would have printed for that object and policy
(webhook.engine.results: a Decision of Results, one Finding each, with the exception that
excepted it and the patch a mutate policy would make), so the page is the very page
`check -o html` writes, with namespace/kind/name where a file would be. A report the audit
had to cut short says so in a row of its own. What a report holds is what the audit kept:
objects that passed every policy are not in it, so they are not counted here.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from webhook.cli import check
from webhook.cli.exits import CliError, note
from webhook.cli.judge import Judged, count
from webhook.cli.summary import FAIL_ON, exit_code
from webhook.engine.policy import PolicySet
from webhook.engine.results import Decision, Finding, Resource, Result, Status, outcome_of
from webhook.loader import load_config, load_policies
from webhook.manifests import Document

FORMATS = ("html", "json", "table")
PAGE = 10  # reports per list request: one can run to 768 KiB
RETRIES = (1.0, 2.0, 4.0)  # seconds before each new try of a list the API server put off
MADE_BY = "quickq-guard report"
# What the audit writes (webhook.audit.reports): its label, its source, the result that
# stands for those a report left out.
LABELS = {"app.kubernetes.io/managed-by": "quickq-guard"}
SOURCE = "quickq-guard"
LEFT_OUT = "quickq-guard-report-limit"
# A report result back to the status of the policy's result (webhook.engine.results.Status):
# `skip` is an excepted violation, `pass` a patch a mutate policy would make.
_STATUS: dict[str, Status] = {"fail": "fail", "warn": "fail", "error": "error", "skip": "fail",
                              "pass": "patch"}


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "report", help="read the audit's reports from a cluster: an HTML page, JSON, a table",
        description="Read the reports `quickq-guard audit` keeps in the cluster (OpenReports "
                    "Reports, or wgpolicyk8s.io PolicyReports) through the API, in pages, "
                    "and write them as check writes its reports: -o html is the same page "
                    "as check -o html, with namespace/kind/name as each finding's location. "
                    "The exit code is check's, under --fail-on.")
    parser.add_argument("--kubeconfig", metavar="FILE",
                        help="the API server and credentials (default: the pod's service "
                             "account, then $KUBECONFIG, then ~/.kube/config)")
    parser.add_argument("--namespace", "-n", action="append", default=[], metavar="NS",
                        help="only this namespace's report (repeatable; default: every "
                             "namespace's, and the cluster report)")
    parser.add_argument("--report-api", choices=("openreports", "wgpolicyk8s"),
                        default="openreports",
                        help="where the audit writes (its --report-api): openreports.io "
                             "Reports (default) or wgpolicyk8s.io PolicyReports")
    parser.add_argument("--output", "-o", action=check.OutputAction, default="table",
                        metavar="FORMAT[=FILE]",
                        help=f"{', '.join(FORMATS)} (default: table); repeatable, "
                             "FORMAT=FILE writes that one to FILE")
    parser.add_argument("--output-file", metavar="FILE",
                        help="write the report to FILE, not stdout")
    parser.add_argument("--fail-on", choices=FAIL_ON, default="deny",
                        help="what makes the exit code 1, as for check")
    parser.add_argument("--policies", metavar="PATH",
                        help="the policies the audit runs, for the page's policy table "
                             "(default: the shipped policies)")
    parser.add_argument("--config", metavar="FILE",
                        help="the config the audit runs (its mode and actions)")
    parser.set_defaults(command=run, quiet=False, show_skipped=False, docs_url="")


def run(args: argparse.Namespace) -> int:
    outputs = check.report_outputs(args)
    for name, _ in outputs:
        if name not in FORMATS:
            raise CliError(f"report writes {', '.join(FORMATS)}, not {name}: a report "
                           "result has no file or line for the others to point at")
    policies = load_policies(args.policies, load_config(args.config))
    import asyncio  # the report's own: `check` does not pay for importing it

    found = asyncio.run(_read(args.kubeconfig, args.report_api, args.namespace))
    judged = list(verdicts(found))
    counts = counted(judged)
    with contextlib.ExitStack() as files:
        for name, file in outputs:
            writer = check.output_writer(name, file, args, files)
            writer.options = replace(writer.options, made_by=MADE_BY)
            writer.start(policies)
            writer.write(writer.render(judged))
            writer.finish(counts)
    if not found:
        note(f"no report of quickq-guard's ({args.report_api}) in "
             f"{', '.join(args.namespace) if args.namespace else 'the cluster'}: is "
             "`quickq-guard audit` running, with this --report-api?")
    return exit_code(counts, args.fail_on)


async def _read(kubeconfig: str | None, api_name: str,
                namespaces: Sequence[str]) -> list[dict[str, Any]]:
    import asyncio

    import yaml
    from lightkube.core.exceptions import ConfigError

    from webhook.audit import cluster, reports

    api = reports.APIS[api_name]
    try:
        client = cluster.client(kubeconfig)
    except (ConfigError, OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as problem:
        raise CliError(f"cannot load the kubeconfig: {problem}") from None
    try:
        for wait in RETRIES:  # 429: the API server asks to come back (busy, a CRD just made)
            try:
                return [item async for item in _listed(client, api, namespaces)]
            except _Busy:
                await asyncio.sleep(wait)
        raise CliError(f"the API server kept answering 429 (too many requests) to the list "
                       f"of {api.plural}.{api.group}: try again later")
    except OSError as problem:
        raise CliError(f"cannot reach the API server: {problem}") from None
    finally:
        with contextlib.suppress(Exception):
            await client.close()


async def _listed(client: Any, api: Any, namespaces: Sequence[str]
                  ) -> AsyncIterator[dict[str, Any]]:
    """Every report of ours, in pages: the namespaces' (all, or those named), then the
    cluster report when no namespace is named."""
    import httpx2
    from lightkube import ALL_NS

    from webhook.audit import cluster

    namespaced = cluster.kind(api.group, api.version, api.kind, api.plural, True)
    scopes: list[tuple[Any, Any]] = [(namespaced, ns) for ns in namespaces] or [
        (namespaced, ALL_NS),
        (cluster.kind(api.group, api.version, api.cluster_kind, api.cluster_plural, False),
         None)]
    try:
        for of, namespace in scopes:
            async for item in client.list(of.resource, namespace=namespace,
                                          labels=dict(LABELS), chunk_size=PAGE):
                yield cluster.plain(item, of)
    except httpx2.HTTPStatusError as problem:  # lightkube's ApiError too, with its Status
        code = problem.response.status_code
        if code == 429:
            raise _Busy from None
        if code == 404:
            raise CliError(f"the cluster serves no {api.api_version} {api.kind}: the report "
                           "CRDs are not installed (or the audit writes the other "
                           "--report-api)") from None
        status = getattr(problem, "status", None)
        said = f": {status.message}" if status is not None and status.message else ""
        raise CliError(f"the API server answered {code} to the list of "
                       f"{api.plural}.{api.group}{said}") from None
    except httpx2.HTTPError as problem:
        raise CliError(f"cannot reach the API server: {problem}") from None


class _Busy(Exception):
    """The API server answered 429: the list is tried again after a pause."""


def verdicts(found: Iterable[Mapping[str, Any]]) -> Iterator[Judged]:
    """Each object a report names, with the verdict its results come to; and a warning of no
    policy for each report cut short (a Report object of its own, as the page lists it)."""
    for report in found:
        metadata = report.get("metadata") or {}
        namespace = str(metadata.get("namespace") or "")
        objects: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for entry in report.get("results") or ():
            if entry.get("source", SOURCE) != SOURCE:
                continue
            if entry.get("policy") == LEFT_OUT:
                yield _left_out(report, namespace, str(entry.get("message") or ""))
                continue
            for reference in entry.get("resources") or ():
                key = tuple(str(reference.get(k) or "") for k in (
                    "apiVersion", "kind", "namespace", "name", "uid"))
                objects.setdefault(key, []).append(entry)
        for key, entries in objects.items():
            yield _judged(Resource(*key[:4]), entries)


def counted(judged: Iterable[Judged]) -> Counter[str]:
    """The summary counts of the verdicts read from reports: every object they name, not the
    rows saying a report was cut short."""
    counts: Counter[str] = Counter()
    for item in judged:
        if item.decision.resource.kind != "Report" or item.decision.results:
            count(item.decision, counts)
    return counts


def html_page(found: Iterable[Mapping[str, Any]], policies: PolicySet,
              made_by: str = MADE_BY) -> str:
    """The HTML page of some reports, as `report -o html` writes it (the audit serves it at
    /report from the reports it would write)."""
    from webhook.cli.formats import Options
    from webhook.cli.formats.html import Html

    judged = list(verdicts(found))
    out = io.StringIO()
    writer = Html(out, Options(made_by=made_by))
    writer.start(policies)
    writer.write(writer.render(judged))
    writer.finish(counted(judged))
    return out.getvalue()


def _judged(resource: Resource, entries: Sequence[Mapping[str, Any]]) -> Judged:
    results = tuple(_result(entry) for entry in entries)
    properties = [entry.get("properties") or {} for entry in entries]
    dry_run = any(p.get("verdict") in ("would-deny", "would-patch") for p in properties)
    decision = Decision(resource, results, True, dry_run=dry_run)
    said: set[str] = {v for result in results for v in decision.verdicts(result)}
    outcome = outcome_of(said, "patch" in said)
    warnings = tuple(f"[{r.policy}] {r.message}" for r in results
                     if r.status == "fail" and "warn" in decision.verdicts(r))
    audits = {str(r.policy): r.message for r in results
              if r.status == "fail" and "audit" in decision.verdicts(r)}
    decision = replace(decision, allowed=outcome not in ("denied", "error"), outcome=outcome,
                       warnings=warnings, audit_annotations=audits)
    return Judged(Document(_where(resource), {}), decision)


def _result(entry: Mapping[str, Any]) -> Result:
    """A report result as the policy's Result it was written from."""
    properties = entry.get("properties") or {}
    said = str(entry.get("result") or "")
    status = _STATUS.get(said, "error")
    message = str(entry.get("message") or "")
    exception = str(properties.get("exception") or "")
    if said == "skip" and message.startswith(f"excepted by {exception}: "):
        message = message[len(f"excepted by {exception}: "):]
    if said == "pass":
        message = message.removeprefix("would patch: ")
    patch: tuple[dict[str, Any], ...] = ()
    with contextlib.suppress(ValueError, TypeError):
        patch = tuple(json.loads(properties.get("patch") or "[]"))
    finding = Finding(message, (), patch=patch, shown_patch=patch or None,
                      exception=exception if said == "skip" else "")
    action = str(properties.get("action") or ("enforce" if said == "fail" else "warn"))
    policy = str(entry.get("policy") or "") or None
    return Result(policy, str(entry.get("category") or "validate"), action, status,
                  (finding,))


def _left_out(report: Mapping[str, Any], namespace: str, message: str) -> Judged:
    """The row saying how many results a report had to leave out, and how to see them."""
    name = str((report.get("metadata") or {}).get("name") or "")
    resource = Resource(str(report.get("apiVersion") or ""), "Report", namespace, name)
    decision = Decision(resource, (), True, warnings=(message,))
    return Judged(Document(_where(resource), {}), decision)


def _where(resource: Resource) -> str:
    """namespace/kind/name: the location every output shows for the object."""
    return "/".join(part for part in (resource.namespace, resource.kind, resource.name) if part)
