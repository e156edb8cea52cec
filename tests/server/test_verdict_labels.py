"""The webhook's metrics and log lines render each finding's verdict (Decision.verdict), as
its answer does: in dry-run mode an enforce policy's finding would deny, and a violation an
UPDATE keeps is a warning, whatever the policy's action."""

from __future__ import annotations

import copy
import logging
from pathlib import Path
from typing import Any

import pytest
from server_helpers import app_of, bad_pod, posted, review
from starlette.applications import Starlette

from webhook.server import metrics
from webhook.server.logs import REVIEW_LOGGER


def _post(app: Starlette, body: Any) -> dict[str, Any]:
    [answer] = posted(app, "/validate", body)
    assert answer.status_code == 200, answer.text
    response: dict[str, Any] = answer.json()["response"]
    return response


def _findings(policy: str, verdict: str, mode: str) -> float:
    value = metrics.REGISTRY.get_sample_value(
        "quickq_guard_findings_total", {"policy": policy, "verdict": verdict, "mode": mode})
    return value or 0.0


def _logged(caplog: pytest.LogCaptureFixture, body: dict[str, Any]) -> dict[str, Any]:
    [line] = [record.fields for record in caplog.records  # type: ignore[attr-defined]
              if record.name == REVIEW_LOGGER
              and record.fields["uid"] == body["request"]["uid"]]  # type: ignore[attr-defined]
    fields: dict[str, Any] = line
    return fields


def _update_keeping_violations() -> dict[str, Any]:
    old = bad_pod()
    new = copy.deepcopy(old)
    new["metadata"]["labels"]["release"] = "2"
    return review(new, operation="UPDATE", old=old)


@pytest.mark.parametrize("mode", ["enforce", "dry-run"])
def test_a_violation_an_update_keeps_is_counted_and_logged_as_a_warning(
        certs_dir: Path, caplog: pytest.LogCaptureFixture, mode: str) -> None:
    app = app_of(certs_dir, mode=mode)
    caplog.set_level(logging.INFO, logger=REVIEW_LOGGER)
    before = {verdict: _findings("disallow-root-user", verdict, mode)
              for verdict in ("warn", "deny", "would-deny")}
    body = _update_keeping_violations()
    assert _post(app, body)["allowed"] is True
    assert _findings("disallow-root-user", "warn", mode) == before["warn"] + 1
    assert _findings("disallow-root-user", "deny", mode) == before["deny"]
    assert _findings("disallow-root-user", "would-deny", mode) == before["would-deny"]
    line = _logged(caplog, body)
    [root] = [f for f in line["findings"] if f["policy"] == "disallow-root-user"]
    assert root["verdict"] == "warn" and root["preexisting"] is True
    assert "action" not in root


def test_in_dry_run_an_enforce_policys_finding_is_counted_and_logged_would_deny(
        certs_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    app = app_of(certs_dir, mode="dry-run")
    caplog.set_level(logging.INFO, logger=REVIEW_LOGGER)
    before = _findings("no-plaintext-secrets", "would-deny", "dry-run")
    body = review(bad_pod())
    assert _post(app, body)["allowed"] is True
    assert _findings("no-plaintext-secrets", "would-deny", "dry-run") == before + 1
    line = _logged(caplog, body)
    assert line["decision"] == "would-deny"
    verdicts = {f["policy"]: f["verdict"] for f in line["findings"]}
    assert verdicts["no-plaintext-secrets"] == "would-deny"
    assert "hunter2" not in str(line)


def test_the_verdict_label_comes_from_a_fixed_set(certs_dir: Path) -> None:
    """One series per policy, verdict and mode: the verdicts are the engine's few."""
    from typing import get_args

    from webhook.engine.results import Verdict

    app = app_of(certs_dir, mode="enforce")
    _post(app, review(bad_pod()))
    _post(app, _update_keeping_violations())
    labelled = {sample.labels["verdict"] for family in metrics.REGISTRY.collect()
                if family.name == "quickq_guard_findings" for sample in family.samples}
    assert labelled and labelled <= set(get_args(Verdict))
