"""nativePolicies: the chart installs the export of the policies as the API server's own
admission policies, next to the webhook. Rendered with the real helm; the objects checked
against the Kubernetes 1.36 schemas (MutatingAdmissionPolicy v1 is GA there) and against
what `quickq-guard export` writes. tests/cluster/test_native_policies_installed.py installs the
chart on a real API server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from chart_helpers import (
    NAMESPACE,
    REPO,
    SYSTEM_NAMESPACES,
    helm_lint,
    helm_template,
    helm_template_raw,
)

from webhook.export import chart

MAP_API = ["--api-versions", "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"]
NATIVE_KINDS = ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
                "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding")
ON = {"nativePolicies": {"enabled": True}}


def native(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] in NATIVE_KINDS]


def test_off_by_default() -> None:
    assert native(helm_template(extra=MAP_API)) == []


def test_the_chart_file_is_the_export_of_the_shipped_policies() -> None:
    assert chart.main(["--check"]) == 0, "stale: run `python -m webhook.export.chart`"
    exported = subprocess.run([sys.executable, "-m", "webhook.cli", "export", "--format",
                               "native", "--config", "/dev/null"], capture_output=True,
                              text=True, cwd=REPO, check=False)
    shipped = [doc for doc in yaml.safe_load_all(chart.NATIVE_FILE.read_text()) if doc]
    assert [doc["metadata"]["name"] for doc in shipped] == [
        doc["metadata"]["name"] for doc in yaml.safe_load_all(exported.stdout) if doc]


def test_enabled_installs_the_shipped_policies_with_the_charts_exclusions() -> None:
    docs = native(helm_template(ON, extra=MAP_API))
    assert sorted(doc["kind"] for doc in docs) == ["MutatingAdmissionPolicy"] * 2 + [
        "MutatingAdmissionPolicyBinding"] * 2 + ["ValidatingAdmissionPolicy"] * 8 + [
        "ValidatingAdmissionPolicyBinding"] * 8
    shipped = {(doc["kind"], doc["metadata"]["name"]): doc
               for doc in yaml.safe_load_all(chart.NATIVE_FILE.read_text()) if doc}
    for doc in docs:
        kubernetes_validate.validate(doc, "1.36.0", strict=True)
        assert doc["metadata"]["labels"]["app.kubernetes.io/instance"] == "quickq-guard"
        if not doc["kind"].endswith("Binding"):
            assert doc["spec"] == shipped[doc["kind"], doc["metadata"]["name"]]["spec"]
            continue
        [expression] = doc["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
        assert expression["operator"] == "NotIn"
        assert set(expression["values"]) == {*SYSTEM_NAMESPACES, NAMESPACE}
    assert helm_lint(ON).returncode == 0


def test_a_cluster_without_mutating_admission_policy_v1_is_told_so() -> None:
    done = helm_template_raw(ON)
    assert done.returncode != 0
    assert "does not serve admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" \
        in done.stderr and "1.36" in done.stderr


@pytest.mark.parametrize(("values", "named"), [
    ({"mode": "dry-run"}, "mode"),
    ({"policies": {"inject-startup-probe": {"action": "off"}}}, "policies"),
    ({"config": {"excludeUsers": ["ci-bot"]}}, "config.excludeUsers"),
    ({"config": {"podSecurity": {"enforce": "baseline"}}}, "config.podSecurity"),
    ({"exceptions": {"enabled": True}}, "exceptions.enabled"),
])
def test_values_that_change_the_policies_need_their_own_export(values: dict[str, Any],
                                                              named: str) -> None:
    done = helm_template_raw({**ON, **values}, extra=MAP_API)
    assert done.returncode != 0
    assert f"{named} change what they would be" in done.stderr
    assert "--set-file nativePolicies.manifest=FILE" in done.stderr


def _export(tmp_path: Path, *args: str) -> Path:
    out = tmp_path / "native.yaml"
    done = subprocess.run([sys.executable, "-m", "webhook.cli", "export", "--format", "native",
                           *args, "-O", str(out)], capture_output=True, text=True, cwd=REPO,
                          check=False)
    assert done.returncode == 0, done.stderr
    return out


def test_a_manifest_of_ones_own_export_is_installed_as_written(tmp_path: Path) -> None:
    manifest = _export(tmp_path, "--policies", str(REPO / "tests" / "vap_policies"))
    written = {(doc["kind"], doc["metadata"]["name"]): doc
               for doc in yaml.safe_load_all(manifest.read_text()) if doc}
    docs = native(helm_template(ON, extra=[*MAP_API, "--set-file",
                                           f"nativePolicies.manifest={manifest}"]))
    assert sorted((doc["kind"], doc["metadata"]["name"]) for doc in docs) == sorted(written)
    for doc in docs:
        assert doc["spec"] == written[doc["kind"], doc["metadata"]["name"]]["spec"]
        kubernetes_validate.validate(doc, "1.36.0", strict=True)
        kubernetes_validate.validate(doc, "1.35.0", strict=True)  # VAPs only: 1.35 too


def test_a_manifest_holds_admission_policies_only(tmp_path: Path) -> None:
    manifest = tmp_path / "native.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    done = helm_template_raw(ON, extra=[*MAP_API, "--set-file",
                                        f"nativePolicies.manifest={manifest}"])
    assert done.returncode != 0 and "document 0 is a ConfigMap" in done.stderr
