"""`quickq-guard report` without a cluster: reports as the audit writes them (its own code,
webhook.audit.reports, from the verdicts its scan keeps) read back into the verdicts `check`
gives for the same objects, so the page is check's page, row for row; a report cut short
shows how many results it left out; what it cannot do is refused with a clear error. Against
a real API server: tests/cluster/test_report_command.py."""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from webhook.audit import reports, scan
from webhook.audit.state import Results
from webhook.cli.formats import Options
from webhook.cli.formats.html import Html, Row
from webhook.cli.judge import Judged
from webhook.cli.main import main
from webhook.cli.report import verdicts
from webhook.engine.policy import Config
from webhook.engine.review import Review
from webhook.loader import load_policies
from webhook.server import exception_view

SECRET = "s3cr3t-planted-0815"
PROBE = {"httpGet": {"path": "/healthz", "port": 8080}, "periodSeconds": 10,
         "failureThreshold": 6}


def deployment(name: str, namespace: str = "team", labels: bool = True,
               **container: Any) -> dict[str, Any]:
    spec = {"name": "web", "image": "registry.example.com/web:1.0",
            "resources": {"requests": {"cpu": "100m", "memory": "64Mi"},
                          "limits": {"memory": "64Mi"}}, **container}
    pod_labels = {"app": name} if labels else {}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
            "spec": {"selector": {"matchLabels": {"x": name}}, "template": {
                "metadata": {"labels": {"x": name, **pod_labels}},
                "spec": {"securityContext": {"runAsNonRoot": True, "runAsUser": 10001},
                         "containers": [spec]}}}}


OBJECTS = [
    deployment("latest", image="nginx:latest"),  # deny
    deployment("unlabelled", labels=False),  # audit (require-labels)
    deployment("probed", livenessProbe={**PROBE, "failureThreshold": 1}),  # warn and patch
    deployment("secrets", env=[{"name": "DB_PASSWORD", "value": SECRET}]),  # deny
    deployment("clean"),
    deployment("legacy-api", namespace="other", image="nginx:latest"),  # excepted
]
GRANT = {"apiVersion": "quickq.io/v1", "kind": "PolicyException",
         "metadata": {"name": "legacy", "namespace": "grants"},
         "spec": {"policies": [{"id": "disallow-latest-tag"}],
                  "match": {"namespaces": ["other"], "names": ["legacy-*"]},
                  "expires": (datetime.now(UTC) + timedelta(days=30)).strftime(
                      "%Y-%m-%dT%H:%M:%SZ"), "reason": "pinned next sprint"}}


def judged_by_check(mode: str = "enforce") -> tuple[Any, list[Judged]]:
    """The verdicts of the audit's scan (check's judge, as for a dump of the objects)."""
    policies = load_policies(None, Config(mode=mode, exceptionNamespaces=("grants",)))
    exceptions = exception_view.read(_snapshot([GRANT]), policies)
    review = Review(exceptions=exceptions)
    return policies, [scan.judged(obj, "deployments", policies, review) for obj in OBJECTS]


def _snapshot(objects: list[dict[str, Any]]) -> Any:
    from types import MappingProxyType

    from webhook.server.cluster_view import Snapshot

    return Snapshot(MappingProxyType({(o["metadata"]["namespace"], o["metadata"]["name"]): o
                                      for o in objects}))


def written(judged: list[Judged], max_results: int = reports.MAX_RESULTS,
            api: reports.ReportApi = reports.OPENREPORTS) -> list[dict[str, Any]]:
    """The reports the audit writes for these verdicts, as the API server hands them back."""
    results = Results()
    for item in judged:
        results.put(scan.subject(item.document.obj), scan.entries(item.decision), 1)
    return [json.loads(json.dumps(reports.report(api, namespace, results.held(namespace),
                                                 max_results)))
            for namespace in ("team", "other")]


def rows(judged: list[Judged], policies: Any) -> list[tuple[Any, ...]]:
    """The page's rows, but where each finding is (a file, or namespace/kind/name)."""
    html = Html(open("/dev/null", "w"), Options())  # noqa: SIM115
    html.start(policies)
    found, _ = html.render(judged)
    return sorted((r.verdict, r.policy, r.kind, r.namespace, r.name, r.message, r.fix,
                   json.dumps(r.patch), r.exception) for r in found)


@pytest.mark.parametrize("mode", ["enforce", "dry-run"])
def test_the_page_from_the_reports_has_checks_rows(mode: str) -> None:
    """Every finding the audit keeps, with its verdict, message, fix, patch and exception."""
    policies, judged = judged_by_check(mode)
    back = list(verdicts(written(judged)))
    from_check = rows(judged, policies)
    # A result of several findings is one report result: check's rows joined by "; ".
    merged: dict[tuple[Any, ...], list[tuple[Any, ...]]] = {}
    for row in from_check:
        merged.setdefault((row[0], *row[1:5]), []).append(row)
    assert {key for key in merged} == {(r[0], *r[1:5]) for r in rows(back, policies)}
    assert {r[0] for r in from_check} >= ({"excepted", "audit", "warn"}
                                          | ({"deny", "patch"} if mode == "enforce"
                                             else {"would-deny", "would-patch"}))
    singles = {row for group in merged.values() if len(group) == 1 for row in group}
    assert singles <= set(rows(back, policies))
    assert SECRET not in json.dumps(rows(back, policies))


def test_locations_are_namespace_kind_name_and_counts_are_checks() -> None:
    policies, judged = judged_by_check()
    back = list(verdicts(written(judged)))
    html = Html(open("/dev/null", "w"), Options())  # noqa: SIM115
    html.start(policies)
    found: list[Row] = html.render(back)[0]
    assert {r.location for r in found} >= {"team/Deployment/latest",
                                           "other/Deployment/legacy-api"}
    assert {item.decision.outcome for item in back} == {"denied", "allowed", "patched"}
    denied = {item.decision.resource.name for item in back if item.decision.outcome == "denied"}
    assert denied == {item.decision.resource.name for item in judged
                      if item.decision.outcome == "denied"}


def test_a_report_cut_short_says_so_in_a_row_and_is_not_counted() -> None:
    policies, judged = judged_by_check()
    back = list(verdicts(written(judged, max_results=2)))
    left = [item for item in back if item.decision.resource.kind == "Report"]
    assert [item.decision.resource.namespace for item in left] == ["team"]
    html = Html(open("/dev/null", "w"), Options())  # noqa: SIM115
    html.start(policies)
    (row,) = [r for r in html.render(back)[0] if r.kind == "Report"]
    assert row.verdict == "warn" and row.policy == ""
    assert "left out of this report" in row.message
    assert "quickq-guard audit --once --namespace team" in row.message


def test_both_report_apis_read_the_same() -> None:
    policies, judged = judged_by_check()
    one = rows(list(verdicts(written(judged))), policies)
    other = rows(list(verdicts(written(judged, api=reports.WGPOLICYK8S))), policies)
    assert one == other


def test_results_of_another_source_are_left_out() -> None:
    _policies, judged = judged_by_check()
    found = written(judged)
    for result in found[0]["results"]:
        result["source"] = "kyverno"
    assert {item.decision.resource.namespace for item in verdicts(found)} == {"other"}


def test_the_page_says_what_made_it(tmp_path: Path) -> None:
    from webhook.cli.formats.html import page

    policies, _judged = judged_by_check()
    text = page(policies, [], [], Counter(), made_by="quickq-guard report")
    assert "Made by <code>quickq-guard report</code>" in text


@pytest.mark.parametrize(("args", "expected"), [
    (["-o", "sarif"], "report writes html, json, table, not sarif"),
    (["--report-api", "kyverno"], "invalid choice"),
])
def test_what_it_cannot_do_is_refused(args: list[str], expected: str,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    try:
        code = main(["report", *args])
    except SystemExit as usage:
        code = int(str(usage.code))
    assert code == 2
    assert expected in capsys.readouterr().err


def test_an_api_server_that_does_not_answer_is_a_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "kubeconfig"
    config.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:1"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    assert main(["report", "--kubeconfig", str(config), "-o", "json"]) == 2
    err = capsys.readouterr().err
    assert "cannot reach the API server" in err and "Traceback" not in err
    (tmp_path / "broken").write_text("clusters: [")
    assert main(["report", "--kubeconfig", str(tmp_path / "broken")]) == 2
    assert "kubeconfig" in capsys.readouterr().err
