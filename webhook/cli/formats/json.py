"""The JSON report (see "JSON output contract" in README.md), written as results come.

`{"results": [...], "summary": {...}}`: the results are written as objects are judged, so the
summary comes last. A result is one resource x policy, as it always was.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

import orjson  # writes the report ~20x faster than json (see dumps_json)

from webhook.cli.formats import Format, failing
from webhook.cli.judge import Judged
from webhook.cli.summary import summary


class Json(Format):
    def start(self, policies: Any) -> None:
        self.out.write('{\n  "results": [')
        self.first = True

    def render(self, judged: Sequence[Judged]) -> str:
        options = self.options
        return rows_text(rows(judged, options.fail_on if options.quiet else None))

    def write(self, rendered: str) -> None:
        if not rendered:
            return
        self.out.write(("\n" if self.first else ",\n") + rendered)
        self.first = False

    def finish(self, counts: Counter[str]) -> None:
        text = dumps_json({"summary": summary(counts)})
        self.out.write(("]" if self.first else "\n  ]") + ",\n" + text[2:] + "\n")


def rows(judged: Sequence[Judged], failing_only: str | None = None) -> list[dict[str, Any]]:
    """One result object per resource and policy; with `failing_only` (--quiet's --fail-on),
    only the results that fail the run and errors."""
    results: list[dict[str, Any]] = []
    for item in judged:
        decision, document = item.decision, item.document
        resource = decision.resource
        described = {"apiVersion": resource.api_version, "kind": resource.kind,
                     "namespace": resource.namespace, "name": resource.name,
                     "source": resource.source, "file": document.file,
                     "line": document.line, "column": document.column}
        for result in decision.results:
            if failing_only and not failing(decision, result, failing_only):
                continue
            findings = result.findings
            if not findings:  # most results: pass and skip (as Result.message/patch say)
                results.append({
                    "resource": dict(described), "policy": result.policy,
                    "action": result.action, "result": result.status,
                    "message": result.reason, "path": "", "patch": [], "findings": []})
                continue
            results.append({
                "resource": dict(described),
                "policy": result.policy,
                "action": result.action,
                "result": result.status,
                "message": result.message,
                "path": findings[0].path,
                "patch": result.patch,
                "findings": [{"container": f.container, "path": f.path, "message": f.message,
                              "preexisting": f.preexisting} for f in findings],
            })
    return results


def rows_text(rows: list[dict[str, Any]]) -> str:
    """The result objects as they sit inside the report's "results" list (indented by 4)."""
    if not rows:
        return ""
    # Only a row's patch holds values from the manifests; the rest is strings and booleans.
    if _orjson_safe([row["patch"] for row in rows if row["patch"]]):
        text = _orjson_dumps(rows)
    else:
        text = dumps_json(rows)
    # text is "[\n  {...},\n  {...}\n]", and JSON strings hold no raw newline.
    return "  " + text[2:-2].replace("\n", "\n  ")


def dumps_json(value: Any) -> str:
    """`json.dumps(value, indent=2, default=str)`, byte for byte, about 20x faster.

    orjson writes UTF-8 where json escapes (\\u00e9), so non-ASCII is escaped back; the few
    values orjson writes differently (NaN and infinities, integers beyond 64 bits, non-string
    keys) can only come from user data in patches, and any of them sends the whole document
    through json.
    """
    if not _orjson_safe(value):
        return json.dumps(value, indent=2, default=str)
    return _orjson_dumps(value)


def _orjson_dumps(value: Any) -> str:
    """dumps_json for a value already known to be _orjson_safe."""
    try:
        text: str = orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, indent=2, default=str)
    if not text.isascii():
        text = _NON_ASCII.sub(lambda m: json.dumps(m.group())[1:-1], text)
    return text


_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_INT64 = (-(2**63), 2**64 - 1)


def _orjson_safe(value: Any) -> bool:
    """False when orjson would write the value differently from json (see dumps_json)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _orjson_safe(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_orjson_safe(item) for item in value)
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return _INT64[0] <= value <= _INT64[1]
    return True
