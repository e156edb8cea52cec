"""The audit's page at /report: made from the results the controller holds, it shows each
object's failures as `check -o html` shows them for the same objects (one row per policy,
its findings' messages joined as a report joins them), hides what every report hides, and
is served read-only beside the metrics."""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable
from typing import Any
from wsgiref.util import setup_testing_defaults

import pytest
from test_cli_html import Page

from webhook.audit import metrics, reports, scan
from webhook.audit import page as audit_page
from webhook.audit.health import Health
from webhook.audit.state import Results
from webhook.cli.formats import render_all
from webhook.engine.review import Review
from webhook.loader import load_config, load_policies
from webhook.testing import container, gpu_container, workload

SECRET = "planted-4417-value"


def objects() -> list[dict[str, Any]]:
    two = workload("Deployment", container("web", image="nginx:latest"),
                   container("side", image="busybox:latest"), name="two", namespace="a")
    secret = workload("Deployment", container("api", env=[{"name": "DB_PASSWORD",
                                                          "value": SECRET}]),
                      name="api", namespace="b")
    model = workload("Deployment", gpu_container(), name="model", namespace="a")
    clean = workload("Deployment", container(), name="clean", namespace="a")
    unlabelled = workload("Deployment", container(), name="bare", namespace="b", labels={})
    found = [two, secret, model, clean, unlabelled]
    for number, obj in enumerate(found):
        obj["metadata"]["uid"] = f"uid-{number}"
    return found


def by_object(rows: list[list[str]]) -> dict[tuple[str, ...], tuple[str, str]]:
    """(policy, kind, namespace, name) -> (verdict, the messages joined with '; ')."""
    found: dict[tuple[str, ...], tuple[str, list[str]]] = {}
    for verdict, policy, kind, namespace, name, message, _, _ in rows:
        said = found.setdefault((policy, kind, namespace, name), (verdict, []))
        assert said[0] == verdict
        said[1].append(message)
    return {key: (verdict, "; ".join(messages)) for key, (verdict, messages) in found.items()}


def test_the_page_shows_what_check_shows_for_the_same_objects() -> None:
    policies = load_policies(None, load_config(None))
    review = Review()
    judged = [scan.judged(obj, "deployments", policies, review) for obj in objects()]
    results = Results()
    for item in judged:
        results.put(scan.subject(item.document.obj), scan.entries(item.decision), 1)
    held = {namespace: list(results.held(namespace)) for namespace in results.namespaces}
    served = audit_page.page(reports.OPENREPORTS, held, policies)
    checked = render_all("html", judged, policies)
    assert by_object(Page(served).rows) == by_object(Page(checked).rows)
    shown = by_object(Page(served).rows)
    assert shown[("disallow-latest-tag", "Deployment", "a", "two")][0] == "deny"
    assert "; " in shown[("disallow-latest-tag", "Deployment", "a", "two")][1]  # 2 findings
    assert not any(name == "clean" for _, _, _, name in shown)
    assert {row[7] for row in Page(served).rows} >= {"a/Deployment/two", "b/Deployment/api"}
    assert SECRET not in served and "quickq-guard audit (/report)" in served


def test_the_page_is_cut_as_the_reports_are() -> None:
    policies = load_policies(None, load_config(None))
    results = Results()
    for number in range(5):
        obj = workload("Deployment", container("web", image="nginx:latest"),
                       name=f"web-{number}", namespace="a")
        obj["metadata"]["uid"] = f"uid-{number}"
        item = scan.judged(obj, "deployments", policies, Review())
        results.put(scan.subject(obj), scan.entries(item.decision), 1)
    served = Page(audit_page.page(reports.OPENREPORTS, {"a": list(results.held("a"))},
                                  policies, max_results=2))
    assert len([row for row in served.rows if row[1]]) == 2
    assert any("left out of this report" in row[5] for row in served.rows)


def call(app: Callable[..., Any], path: str, method: str = "GET") -> tuple[str, dict[str, str],
                                                                            bytes]:
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": method,
                               "wsgi.input": io.BytesIO()}
    setup_testing_defaults(environ)
    said: list[Any] = []
    body = b"".join(app(environ, lambda status, headers, *_: said.extend([status, headers])))
    return said[0], dict(said[1]), body


@pytest.mark.parametrize("path", ["/metrics", "/", "/anything"])
def test_the_metrics_port_still_answers_metrics(path: str) -> None:
    status, _, body = call(metrics.app(Health(), lambda: "<!doctype html>"), path)
    assert status == "200 OK" and b"quickq_guard_audit_leader" in body


def test_the_results_gauge_says_the_counts_held_when_scraped() -> None:
    """Read at each scrape from the counts the controller keeps: a change costs no metrics
    work, and a series that fell to 0 says 0."""
    counts: Counter[tuple[str, str]] = Counter({("disallow-latest-tag", "fail"): 3})
    metrics.count_results(counts)
    counts[("require-labels", "warn")] += 2
    counts.subtract([("disallow-latest-tag", "fail")] * 3)
    _, _, body = call(metrics.app(Health(), None), "/metrics")
    lines = set(body.decode().splitlines())
    assert 'quickq_guard_audit_results{policy="disallow-latest-tag",result="fail"} 0.0' in lines
    assert 'quickq_guard_audit_results{policy="require-labels",result="warn"} 2.0' in lines


def test_report_is_served_only_when_asked_and_read_only() -> None:
    status, _, body = call(metrics.app(Health(), None), "/report")
    assert status == "200 OK" and b"quickq_guard_audit" in body  # not served: the metrics
    status, headers, body = call(metrics.app(Health(), lambda: "<!doctype html><p>é</p>"),
                                 "/report")
    assert status == "200 OK" and body == "<!doctype html><p>é</p>".encode()
    assert headers["Content-Type"] == "text/html; charset=utf-8"
    assert headers["Cache-Control"] == "no-store"
    status, headers, _ = call(metrics.app(Health(), lambda: "x"), "/report", "POST")
    assert status.startswith("405") and headers["Allow"] == "GET"
    status, _, body = call(metrics.app(Health(), lambda: None), "/report")
    assert status.startswith("503") and b"no full scan" in body
