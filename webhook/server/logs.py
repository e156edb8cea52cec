"""One JSON object per log line, for the server: what log collectors parse without rules."""

from __future__ import annotations

import logging
import time
from typing import Any

from webhook.engine.results import Decision
from webhook.server.admission import AdmissionRequest, dumps

REVIEW_LOGGER = "quickq_guard.review"
review_log = logging.getLogger(REVIEW_LOGGER)


class JsonFormatter(logging.Formatter):
    """time, level, logger, message, and the record's `fields` mapping if it has one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": self.formatTime(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            entry.update(fields)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return dumps(entry).decode()

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        """UTC, ISO 8601 with milliseconds: 2026-01-31T12:34:56.789Z."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        return f"{stamp}.{int(record.msecs):03d}Z"


def log_review(endpoint: str, review: AdmissionRequest, decision: Decision | None,
               mode: str, latency: float) -> None:
    """One JSON line per review. Each finding is named by policy, verdict (what the answer
    made of it: Decision.verdict), container and field path, so a warning that says "see the
    webhook log" leads somewhere; field values are never logged."""
    if not review_log.isEnabledFor(logging.INFO):
        return
    review_log.info("review", extra={"fields": {
        "endpoint": endpoint,
        "uid": review.uid,
        "kind": review.kind,
        "namespace": review.namespace or "",
        "name": review.name or (decision.resource.name if decision else ""),
        "operation": review.operation,
        **({"subResource": review.sub_resource} if review.sub_resource else {}),
        "user": review.username or "",
        "dryRun": review.dry_run,
        "mode": mode,
        "decision": decision.outcome if decision is not None else "allowed",
        "findings": _findings(decision) if decision is not None else [],
        "latency_ms": round(latency * 1000, 3),
    }})


def _findings(decision: Decision) -> list[dict[str, Any]]:
    """The findings of the results that say something, each with its verdict."""
    findings: list[dict[str, Any]] = []
    for result in decision.results:
        if result.status not in ("fail", "patch", "error"):
            continue
        if not result.findings:
            findings.append({"policy": result.policy, "verdict": decision.verdicts(result)[0],
                             "problem": result.reason})
        for found in result.findings:
            findings.append({"policy": result.policy,
                             "verdict": decision.verdict(result, found),
                             "container": found.container, "path": found.path,
                             "preexisting": found.preexisting})
    return findings


def log_config(level: str = "INFO") -> dict[str, Any]:
    """A logging.config dict for uvicorn and quickq-guard: JSON to stdout, no access log
    (the review line replaces it)."""
    handler = {"class": "logging.StreamHandler", "formatter": "json",
               "stream": "ext://sys.stdout"}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": JsonFormatter}},
        "handlers": {"stdout": handler},
        "loggers": {
            "uvicorn": {"handlers": ["stdout"], "level": level, "propagate": False},
            "uvicorn.access": {"handlers": [], "level": "WARNING", "propagate": False},
            "quickq_guard": {"handlers": ["stdout"], "level": level, "propagate": False},
        },
    }
