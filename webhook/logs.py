"""One JSON object per log line, for the server: what log collectors parse without rules."""

from __future__ import annotations

import logging
import time
from typing import Any

from webhook.admission import dumps

REVIEW_LOGGER = "quickq_guard.review"


class JsonFormatter(logging.Formatter):
    """time, level, logger, message, and the record's `fields` mapping if it has one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
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
