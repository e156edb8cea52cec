"""`quickq-guard audit` at scale on a real kube-apiserver: 10,000 objects in 100 namespaces,
created in bulk as a cluster holds them from before quickq-guard was installed (the world of
benchmarks/audit_scale.py: a fifth with a `:latest` image, a tenth unlabelled, a twentieth
excepted by a PolicyException), and the reports the controller writes say what `check` says
of a kubectl dump of the same objects, result for result.

An API server of its own with no webhook registered, as test_audit_controller's world."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import ControlPlane, started, wait_until
from support.audit import Auditor, Row, check, check_rows, report_rows, reports
from support.bulk import Api, bulk_config, namespaces, populate, reports_present

from webhook.engine.workload import BUILT_IN

OBJECTS, NAMESPACES = 10_000, 100
# Every kind the audit judges here (no ConfigMap-reading policy is on, no other project's
# kind is installed), and the exceptions, from every namespace: what a team would dump.
DUMPED = ",".join([*(built.resource for built in BUILT_IN.values()), "nodetemplates",
                   "policyexceptions"])


def dump(plane: ControlPlane, workdir: Path) -> Path:
    """`kubectl get` of the judged kinds in every namespace, paged, as check takes it."""
    done = plane.kubectl("get", DUMPED, "-A", "--chunk-size", "500", "-o", "json")
    out = workdir / "dump.json"
    out.write_text(done.stdout)
    return out


def differences(got: set[Row], expected: set[Row]) -> str:
    """The first rows each side holds alone: a readable failure out of 3,500 rows."""
    def first(rows: set[Row]) -> str:
        return "".join(f"\n  {row}" for row in sorted(rows)[:10])
    return (f"in the reports only ({len(got - expected)}):{first(got - expected)}\n"
            f"in check's only ({len(expected - got)}):{first(expected - got)}")


def test_the_reports_of_10000_objects_say_what_check_says_of_a_dump(
        plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> None:
    workdir = tmp_path_factory.mktemp("audit-scale")
    spaces = namespaces(NAMESPACES)
    began = time.monotonic()
    with started(plane.assets, tmp_path_factory.mktemp("audit-scale-plane")) as own:
        api = Api(own)
        created = populate(own, api, OBJECTS, spaces, threads=24)
        (workdir / "config.yaml").write_text(bulk_config())
        audit_began = time.monotonic()
        audit = Auditor(own, workdir, "--config", str(workdir / "config.yaml"),
                        "--write-interval", "0.5", "--metrics-port", "0")

        def written() -> bool:
            assert audit.running(), f"the audit exited:\n{audit.output()[-3000:]}"
            return set(spaces) <= reports_present(api)

        try:
            wait_until(written, timeout=120, interval=0.5, what="every namespace's report")
            to_reports = time.monotonic() - audit_began
            found = reports(own)
        finally:
            audit.stop()
        dumped = dump(own, workdir)
    checking = time.monotonic()
    checked = check(workdir, "-o", "policyreport", str(dumped))
    print(f"{OBJECTS} objects created in {created:.1f} s, every report {to_reports:.1f} s "
          f"after the audit started, check of the dump {time.monotonic() - checking:.1f} s, "
          f"{time.monotonic() - began:.1f} s in all")
    assert checked.returncode == 1, checked.stderr
    expected = check_rows(checked.stdout)
    got = report_rows(found)
    assert set(found) == set(spaces), "a report for each namespace, no other"
    held: list[dict[str, Any]] = [result for report in found.values()
                                  for result in report["results"]]
    assert len(held) == len(got), "a result held twice, or for more than one object"
    assert got == expected, differences(got, expected)
    # the mix of each namespace's 100 objects: 20 :latest, 5 excepted, 10 unlabelled
    assert Counter(row[3:5] for row in expected) == {
        ("disallow-latest-tag", "fail"): 2000, ("disallow-latest-tag", "skip"): 500,
        ("require-labels", "warn"): 1000}
