"""The JSON report (see "JSON output contract" in docs/cli.md), written as results come.

`{"results": [...], "summary": {...}}`: the results are written as objects are judged, so the
summary comes last. A result is one resource x policy, as it always was, but for an object
not judged at all: one `skip` result of no policy (`"policy": null`) says why.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson  # a report can run to hundreds of MB: json's encoder would be most of the run

from webhook.cli.formats import Format, failing, reported_results
from webhook.cli.judge import Judged
from webhook.cli.summary import summary
from webhook.engine.results import Result
from webhook.manifests import Document

_ALL = object()  # see dumps_json_bytes


class Json(Format):
    """Renders bytes in the process that judged a task, written as they are to the binary
    stdout: the report is ASCII (json escapes the rest), so there is nothing to transcode."""

    def start(self, policies: Any) -> None:
        self.write_bytes(b'{\n  "results": [')
        self.first = True
        self.constant_rows: dict[tuple[Any, ...], bytes] = {}

    def render(self, judged: Sequence[Judged]) -> bytes:
        options = self.options
        return rows_bytes(judged, options.fail_on if options.quiet else None,
                          self.constant_rows)

    def write(self, rendered: bytes) -> None:
        if not rendered:
            return
        self.write_bytes(b"\n" if self.first else b",\n")
        self.write_bytes(rendered)
        self.first = False

    def finish(self, counts: Counter[str]) -> None:
        text = dumps_json({"summary": summary(counts)})
        self.write_bytes((("]" if self.first else "\n  ]") + ",\n" + text[2:] + "\n").encode())


def rows(judged: Sequence[Judged], failing_only: str | None = None) -> list[dict[str, Any]]:
    """One result object per resource and policy; with `failing_only` (--quiet's --fail-on),
    only the results that fail the run and errors. (What rows_bytes writes.)"""
    results: list[dict[str, Any]] = []
    for item in judged:
        decision = item.decision
        described = _described(item)
        for result in reported_results(decision):
            if failing_only and not failing(decision, result, failing_only):
                continue
            results.append({"resource": dict(described), **_result(result, item.document)})
    return results


def _described(item: Judged) -> dict[str, Any]:
    resource, document = item.decision.resource, item.document
    described = {"apiVersion": resource.api_version, "kind": resource.kind,
                 "namespace": resource.namespace, "name": resource.name,
                 "source": resource.source, "file": document.file, "line": document.line,
                 "column": document.column}
    if document.template:  # what wrote it (Helm's `# Source:`): file/line are the render's
        described["template"] = document.template
    return described


def _result(result: Result, document: Document) -> dict[str, Any]:
    """A result object's fields after `resource`. A finding's `line` and `column` are where
    the field it names is in the file (see Document.field)."""
    findings = result.findings
    if not findings:  # most results: pass and skip (as Result.message/patch say)
        return {"policy": result.policy, "action": result.action, "result": result.status,
                "message": result.reason, "path": "", "patch": [], "findings": []}
    described = []
    for f in findings:
        line, column = document.field(f.at)
        described.append({"container": f.container, "path": f.path, "message": f.message,
                          "preexisting": f.preexisting, "line": line, "column": column,
                          **({"exception": f.exception} if f.exception else {})})
    return {
        "policy": result.policy,
        "action": result.action,
        "result": result.status,
        "message": result.message,
        "path": findings[0].path,
        "patch": result.shown_patch,
        "findings": described,
    }


def rows_bytes(judged: Sequence[Judged], failing_only: str | None = None,
               constant_rows: dict[tuple[Any, ...], bytes] | None = None) -> bytes:
    """`rows()` as the report holds them (indented by 4, joined by commas), byte for byte
    what dumps_json writes of them, without building a dict per row: the resource is written
    once per object and a result without findings (most are: pass and skip), which is the
    same for every object, once per run (`constant_rows` keeps those, by the fields such a row
    shows: cheaper to hash than the Result)."""
    if constant_rows is None:
        constant_rows = {}
    pieces: list[bytes] = []
    for item in judged:
        decision = item.decision
        head = b',\n    {\n      "resource": ' + _indented(_described(item), 6) + b",\n"
        for result in reported_results(decision):
            if failing_only and not failing(decision, result, failing_only):
                continue
            if result.findings:
                row = _result(result, item.document)
                tail = _indented(row, 4, row["patch"])[2:]
            else:
                shown = (result.policy, result.action, result.status, result.reason)
                tail = constant_rows.get(shown, b"")
                if not tail:
                    if len(constant_rows) >= 4096:  # reasons that name objects: stay bounded
                        constant_rows.clear()
                    tail = _indented(_result(result, item.document), 4)[2:]
                    constant_rows[shown] = tail
            pieces += (head, tail)
    return b"".join(pieces)[2:]  # the first row's head without its comma


def _indented(value: dict[str, Any], indent: int, user_data: Any = _ALL) -> bytes:
    """dumps_json(value), its lines after the first indented by `indent` more spaces;
    `user_data`: the part of `value` that holds values from the manifests, if not all."""
    data = dumps_json_bytes(value, user_data)
    return data.replace(b"\n", b"\n" + b" " * indent)


def dumps_json(value: Any) -> str:
    """`json.dumps(value, indent=2, default=str)`, byte for byte, written by orjson."""
    return dumps_json_bytes(value).decode()


def dumps_json_bytes(value: Any, user_data: Any = _ALL) -> bytes:
    """dumps_json, encoded (it is ASCII).

    orjson writes UTF-8 where json escapes (\\u00e9), so non-ASCII is escaped back. The few
    values orjson writes differently can only come from user data in patches: integers beyond
    64 bits and non-string keys, which it refuses, and NaN and infinities, which it writes as
    null (so only a report with a null can hide one, and only in `user_data`, the part of the
    value that comes from manifests: all of it unless said); any of them sends the whole value
    through json.
    """
    try:
        data: bytes = orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2)
    except TypeError:  # orjson.JSONEncodeError
        return json.dumps(value, indent=2, default=str).encode()
    if b"null" in data and not _finite(value if user_data is _ALL else user_data):
        return json.dumps(value, indent=2, default=str).encode()
    if not data.isascii():
        text = _NON_ASCII.sub(lambda m: json.dumps(m.group())[1:-1], data.decode())
        data = text.encode()
    return data


_NON_ASCII = re.compile(r"[^\x00-\x7f]")


def _finite(value: Any) -> bool:
    """False when the value holds a float that is NaN or infinite."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, list | tuple):
        return True
    return all(_finite(item) for item in value if not isinstance(item, str))
