"""One JSON object per log line, for the server: what log collectors parse without rules."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from webhook.server.admission import dumps

REVIEW_LOGGER = "quickq_guard.review"


def timestamp(created: float, _cache: list[Any] = [-1, ""]) -> str:  # noqa: B006
    """`created` (Unix time) as 2026-01-31T12:34:56.789Z; the part before the dot is kept
    for the second it stands for (strftime is most of the cost)."""
    second = int(created)
    if second != _cache[0]:
        _cache[0], _cache[1] = second, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
    return f"{_cache[1]}.{int((created - second) * 1000):03d}Z"


class JsonFormatter(logging.Formatter):
    """time, level, logger, message, and the record's `fields` mapping if it has one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": timestamp(record.created),
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


def line_writer(logger: logging.Logger,
                message: str) -> Callable[[dict[str, Any], asyncio.AbstractEventLoop | None], None]:
    """`write(fields, loop)`: what `logger.info(message, extra={"fields": fields})` writes,
    the same JSON line, for a line written on every request (the review's). Where the
    logger's records go only to plain StreamHandlers with a JsonFormatter (as log_config sets
    up), the line is formatted here and written to their streams at once: a LogRecord, the
    handler chain and the formatter cost three times the line itself. Any other set-up (a
    handler added later, a filter, a level) gets its record through `logging` as usual.

    With `loop` (the running event loop) the lines are held until the end of the loop's pass
    and written together: at saturation one pass answers a review on each connection that
    has one in, and a write() system call per line (stdout is unbuffered in containers, as
    PYTHONUNBUFFERED=1 is usual) costs about as much as formatting the line. Nothing waits
    longer than that pass; without `loop`, each line is written and flushed at once."""
    head = {"level": "info", "logger": logger.name, "message": message}

    def streams() -> list[logging.StreamHandler[Any]] | None:
        found: list[logging.StreamHandler[Any]] = []
        current: logging.Logger | None = logger
        while current is not None:
            if current.filters:
                return None
            for handler in current.handlers:
                if (type(handler) is not logging.StreamHandler or handler.filters
                        or type(handler.formatter) is not JsonFormatter
                        or handler.level > logging.INFO):
                    return None
                found.append(handler)
            current = current.parent if current.propagate else None
        return found

    held: dict[logging.StreamHandler[Any], list[str]] = {}

    def write(fields: dict[str, Any], loop: asyncio.AbstractEventLoop | None = None) -> None:
        if loop is not None and held:  # this pass already found where the lines go
            line = _line(fields)
            for lines in held.values():
                lines.append(line)
            return
        if not logger.isEnabledFor(logging.INFO):
            return
        handlers = streams()
        if handlers is None:
            logger.info(message, extra={"fields": fields})
            return
        line = _line(fields)
        if loop is not None and handlers:
            loop.call_soon(flush)
            for handler in handlers:
                held[handler] = [line]
            return
        for handler in handlers:
            emit(handler, line)

    def _line(fields: dict[str, Any]) -> str:
        return dumps({"time": timestamp(time.time()), **head, **fields}).decode() + "\n"

    def flush() -> None:
        lines = list(held.items())
        held.clear()
        for handler, text in lines:
            emit(handler, "".join(text))

    def emit(handler: logging.StreamHandler[Any], text: str) -> None:
        with handler.lock:  # type: ignore[union-attr] # created with the handler
            try:
                handler.stream.write(text)
                handler.stream.flush()
            except Exception:  # as StreamHandler.emit: report, never fail the request
                failed(handler)

    def failed(handler: logging.StreamHandler[Any]) -> None:
        handler.handleError(logger.makeRecord(logger.name, logging.INFO, "", 0, message, (),
                                              None))

    return write


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
