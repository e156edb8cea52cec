"""`check --exceptions` and PolicyExceptions among the manifests, in every format."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from builders import container, pod, run_cli

ROOT = {"securityContext": {"runAsUser": 0}}


def exception(namespace: str = "quickq-guard", days: float = 30,
              policy: str = "disallow-root-user") -> dict[str, Any]:
    expires = datetime.now(UTC) + timedelta(days=days)
    return {"apiVersion": "quickq.io/v1", "kind": "PolicyException",
            "metadata": {"name": "gpu-root", "namespace": namespace},
            "spec": {"policies": [{"id": policy}],
                     "match": {"namespaces": ["gpu-operator"], "kinds": ["Pod"]},
                     "expires": expires.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "reason": "the device plugin needs root"}}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, str]:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(yaml.safe_dump(pod(container("plugin", **ROOT), name="plugin",
                                           namespace="gpu-operator")))
    config = tmp_path / "config.yaml"
    config.write_text("exceptionNamespaces: [quickq-guard]\n")
    granted = tmp_path / "exceptions"
    granted.mkdir()
    (granted / "gpu.yaml").write_text(yaml.safe_dump(exception()))
    return {"pod": str(manifest), "config": str(config), "exceptions": str(granted),
            "dir": str(tmp_path)}


def check(capsys: Any, files: dict[str, str], *args: str) -> tuple[int, str, str]:
    return run_cli(capsys, "check", files["pod"], "--config", files["config"], *args)


def test_without_the_exception_the_pod_is_denied(capsys: Any, files: dict[str, str]) -> None:
    code, out, _ = check(capsys, files)
    assert code == 1 and "DENY" in out


def test_with_the_exception_the_finding_is_excepted(capsys: Any, files: dict[str, str]) -> None:
    code, out, _ = check(capsys, files, "--exceptions", files["exceptions"])
    assert code == 0
    assert "EXCEPTED" in out and "PolicyException quickq-guard/gpu-root" in out
    assert "the device plugin needs root" in out


def test_the_old_api_version_still_applies_with_a_deprecation_note(
        capsys: Any, files: dict[str, str]) -> None:
    code, _, err = check(capsys, files, "--exceptions", files["exceptions"])
    assert code == 0 and "deprecated" not in err
    (Path(files["exceptions"]) / "gpu.yaml").write_text(yaml.safe_dump(
        {**exception(), "apiVersion": "quickq.io/v1alpha1"}))
    code, out, err = check(capsys, files, "--exceptions", files["exceptions"])
    assert code == 0 and "EXCEPTED" in out
    assert "apiVersion quickq.io/v1alpha1 is deprecated; write quickq.io/v1" in err


def test_an_exception_among_the_manifests_applies(capsys: Any, files: dict[str, str]) -> None:
    (Path(files["dir"]) / "pod.yaml").write_text(
        Path(files["pod"]).read_text() + "---\n" + yaml.safe_dump(exception()))
    code, out, _ = check(capsys, files)
    assert code == 0 and "EXCEPTED" in out


def test_exceptions_outside_the_exception_namespaces_are_noted(
        capsys: Any, files: dict[str, str]) -> None:
    (Path(files["exceptions"]) / "gpu.yaml").write_text(
        yaml.safe_dump(exception(namespace="gpu-operator")))
    code, out, err = check(capsys, files, "--exceptions", files["exceptions"])
    assert code == 1 and "DENY" in out
    assert "has no effect" in err


def test_an_exception_the_webhook_refuses_is_not_applied(
        capsys: Any, files: dict[str, str]) -> None:
    (Path(files["exceptions"]) / "gpu.yaml").write_text(yaml.safe_dump(exception(days=365)))
    code, _, err = check(capsys, files, "--exceptions", files["exceptions"])
    assert code == 1 and "not applying PolicyException quickq-guard/gpu-root" in err
    assert "more than 90 days away" in err


def test_bad_exception_files_are_errors(capsys: Any, files: dict[str, str]) -> None:
    other = Path(files["exceptions"]) / "pod.yaml"
    other.write_text(Path(files["pod"]).read_text())
    code, _, err = check(capsys, files, "--exceptions", str(other))
    assert code == 2 and "not a PolicyException" in err
    broken = exception()
    del broken["spec"]["reason"]
    other.write_text(yaml.safe_dump(broken))
    code, _, err = check(capsys, files, "--exceptions", str(other))
    assert code == 2 and "spec.reason: Field required" in err
    code, _, err = check(capsys, files, "--exceptions", str(other) + ".missing")
    assert code == 2 and "no such file" in err


def test_a_malformed_exception_among_the_manifests_is_denied(
        capsys: Any, files: dict[str, str]) -> None:
    Path(files["pod"]).write_text(yaml.safe_dump(exception(policy="no-such-policy")))
    code, out, _ = check(capsys, files)
    assert code == 1 and "no policy 'no-such-policy'" in out


def test_every_format_reports_the_exception(capsys: Any, files: dict[str, str]) -> None:
    given = ("--exceptions", files["exceptions"])
    _, out, _ = check(capsys, files, *given, "-o", "json")
    [row] = [r for r in json.loads(out)["results"] if r["policy"] == "disallow-root-user"]
    assert "quickq-guard/gpu-root" in row["findings"][0]["exception"]

    _, out, _ = check(capsys, files, *given, "-o", "sarif")
    [alert] = json.loads(out)["runs"][0]["results"]
    assert alert["level"] == "note" and alert["properties"]["verdict"] == "excepted"
    assert "quickq-guard/gpu-root" in alert["suppressions"][0]["justification"]

    _, out, _ = check(capsys, files, *given, "-o", "junit")
    [case] = [c for c in ET.fromstring(out).iter("testcase")
              if c.get("name") == "disallow-root-user"]
    skipped = case.find("skipped")
    assert skipped is not None and "quickq-guard/gpu-root" in skipped.get("message", "")
    assert case.find("failure") is None

    _, out, _ = check(capsys, files, *given, "-o", "policyreport")
    report = next(d for d in yaml.safe_load_all(out) if d)
    [entry] = [r for r in report["results"] if r["policy"] == "disallow-root-user"]
    assert entry["result"] == "skip" and "quickq-guard/gpu-root" in entry["message"]

    code, out, _ = check(capsys, files, *given, "-o", "github")
    assert code == 0 and "::notice " in out and "::error" not in out


def test_crd_prints_both_definitions(capsys: Any) -> None:
    import kubernetes_validate

    from webhook.export import crd

    code, out, _ = run_cli(capsys, "crd")
    assert code == 0
    definitions = list(yaml.safe_load_all(out))
    assert [d["metadata"]["name"] for d in definitions] == [
        "policyexceptions.quickq.io", "nodetemplates.quickq.io"]
    for definition in definitions:
        kubernetes_validate.validate(definition, "1.35.0", strict=True)
    schema = definitions[0]["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert schema == crd.exception_schema()
    assert schema["properties"]["spec"]["required"] == ["policies", "match", "expires",
                                                        "reason"]
    code, out, _ = run_cli(capsys, "crd", "--kind", "nodetemplate")
    assert [d["spec"]["names"]["kind"] for d in yaml.safe_load_all(out)] == ["NodeTemplate"]


def test_the_summary_counts_an_excepted_result_apart_from_failures(
        capsys: Any, files: dict[str, str]) -> None:
    code, out, _ = check(capsys, files, "--exceptions", files["exceptions"], "-o", "json")
    summary = json.loads(out)["summary"]
    assert code == 0 and summary["excepted"] == 1 and summary["fail"] == 0
    code, out, _ = check(capsys, files, "--exceptions", files["exceptions"])
    assert "0 fail" in out and "1 excepted" in out.splitlines()[-1]
    code, out, _ = check(capsys, files, "-o", "json")  # without it: a failure, none excepted
    summary = json.loads(out)["summary"]
    assert code == 1 and summary["excepted"] == 0 and summary["fail"] == 1


def test_at_judges_as_of_a_release_day(capsys: Any, files: dict[str, str]) -> None:
    """The exception runs 30 days: honoured on a day before that, not on a day after."""
    soon = (datetime.now(UTC) + timedelta(days=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    late = (datetime.now(UTC) + timedelta(days=60)).strftime("%Y-%m-%dT%H:%M:%S+02:00")
    code, out, _ = check(capsys, files, "--exceptions", files["exceptions"], "--at", soon)
    assert code == 0 and "EXCEPTED" in out
    code, out, _ = check(capsys, files, "--exceptions", files["exceptions"], "--at", late)
    assert code == 1 and "DENY" in out and "EXCEPTED" not in out


@pytest.mark.parametrize(("value", "problem"), [
    ("2027-01-15T00:00:00", "has no offset"), ("next tuesday", "expected an RFC 3339 time")])
def test_a_bad_at_is_a_usage_error(capsys: Any, files: dict[str, str], value: str,
                                   problem: str) -> None:
    with pytest.raises(SystemExit) as exited:  # argparse's usage error
        check(capsys, files, "--at", value)
    assert exited.value.code == 2 and problem in capsys.readouterr().err
