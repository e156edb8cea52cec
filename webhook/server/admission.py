"""AdmissionReview in and out: what the API server sends, and the answer it accepts.

Pure functions, no I/O. Every rule of the API server that an answer must follow is written
next to the code that follows it, so a reader can check one against the other.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson  # parses and writes reviews 2-10x faster than json

from webhook.engine.results import Decision


def loads(data: bytes) -> Any:
    return orjson.loads(data)


def dumps(value: Any) -> bytes:
    try:
        return orjson.dumps(value, default=str)
    except TypeError:  # an integer beyond 64 bits, which only json can write
        return json.dumps(value, separators=(",", ":"), default=str).encode()


API_VERSIONS = ("admission.k8s.io/v1", "admission.k8s.io/v1beta1")
JUDGED_OPERATIONS = ("CREATE", "UPDATE")

# The API server drops a warning that is empty, a duplicate, not UTF-8 or holds control
# characters; past 4096 characters in total it cuts each to 256 and drops the rest. kubectl
# prints each as `Warning: <text>`. So each warning is at most 119 bytes (a longer one is
# wrapped at word boundaries into lines that go on with "... ", so the fix at its end is not
# lost) and all of them under 4096, with a last one saying how many were left out.
WARNING_MAX = 119
WARNINGS_TOTAL_MAX = 4000
# Audit annotation keys are sent on as `<webhook name>/<key>`: `<key>` must be a qualified
# name (at most 63 characters of [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?) or it is dropped.
AUDIT_KEY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
AUDIT_VALUE_MAX = 4096
# A denial lists every enforced violation; an object with thousands of them would put
# megabytes into the client's error and the API server's audit log, so it stops at 32 KiB.
DENIAL_MAX = 32 * 1024


class AdmissionError(Exception):
    """A request that is not an AdmissionReview we can answer; `status` is the HTTP code."""

    def __init__(self, status: int, problem: str) -> None:
        super().__init__(problem)
        self.status = status
        self.problem = problem


# Read-only by convention rather than frozen: a frozen dataclass sets each field through
# object.__setattr__, twice the cost of a plain __init__, and one is built per request.
@dataclass(slots=True)
class Review:
    """The fields of an AdmissionReview request that quickq-guard uses."""

    api_version: str
    uid: str
    operation: str
    object: Any
    old_object: Any
    namespace: str | None
    name: str
    kind: str
    username: str | None
    groups: tuple[str, ...]
    dry_run: bool


def check_content_type(content_type: str | None) -> None:
    """The API server sends `application/json`; anything else is not one of its reviews."""
    if content_type == "application/json":  # what the API server sends
        return
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media != "application/json":
        shown = content_type or "none"
        raise AdmissionError(400, f"Content-Type must be application/json, got {shown}")


def parse_review(body: bytes) -> Review:
    """Decode and check an AdmissionReview; raise AdmissionError naming the first problem."""
    if not body:
        raise AdmissionError(400, "empty body: expected an AdmissionReview")
    try:
        document = loads(body)
    except UnicodeDecodeError:
        raise AdmissionError(400, "body is not UTF-8 JSON") from None
    except json.JSONDecodeError as error:
        raise AdmissionError(400, f"body is not JSON: {error.msg} at line {error.lineno} "
                                  f"column {error.colno}") from None
    except (RecursionError, ValueError) as error:
        raise AdmissionError(400, f"body is not JSON: {error}") from None
    if not isinstance(document, dict):
        raise AdmissionError(400, f"expected an AdmissionReview object, got a JSON "
                                  f"{_json_type(document)}")
    kind = document.get("kind")
    if kind != "AdmissionReview":
        raise AdmissionError(400, f"kind must be AdmissionReview, got {_shown(kind)}")
    api_version = document.get("apiVersion")
    if api_version not in API_VERSIONS:
        raise AdmissionError(400, f"apiVersion must be one of {', '.join(API_VERSIONS)}, "
                                  f"got {_shown(api_version)}")
    request = document.get("request")
    if not isinstance(request, dict):
        problem = "no request" if request is None else f"request is a {_json_type(request)}"
        raise AdmissionError(400, f"{problem}: expected request to be an object")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise AdmissionError(400, "request.uid must be a non-empty string")
    operation = _string(request, "operation", required=True)
    namespace = _string(request, "namespace") or None
    name = _string(request, "name")
    kind_info = request.get("kind")
    kind_name = ""
    if isinstance(kind_info, dict) and isinstance(kind_info.get("kind"), str):
        kind_name = kind_info["kind"]
    user = request.get("userInfo")
    user = user if isinstance(user, dict) else {}
    username = user.get("username") if isinstance(user.get("username"), str) else None
    groups = user.get("groups")
    groups_tuple = tuple([g for g in groups if isinstance(g, str)]) \
        if isinstance(groups, list) else ()
    obj = request.get("object")
    if operation in JUDGED_OPERATIONS and not isinstance(obj, dict):
        raise AdmissionError(400, f"request.object must be an object on {operation}, "
                                  f"got {_shown(obj)}")
    if not kind_name and isinstance(obj, dict) and isinstance(obj.get("kind"), str):
        kind_name = obj["kind"]
    return Review(api_version=api_version, uid=uid, operation=operation, object=obj,
                  old_object=request.get("oldObject"), namespace=namespace, name=name,
                  kind=kind_name, username=username, groups=groups_tuple,
                  dry_run=request.get("dryRun") is True)


def respond(review: Review, decision: Decision | None, *, mutating: bool) -> dict[str, Any]:
    """The AdmissionReview answer to `review`; `decision` None means allowed untouched.

    The API server checks, in order: a `response` object whose `uid` equals `request.uid`;
    the same `apiVersion` and `kind` as the request; for a mutating webhook, `patch` and
    `patchType` together or not at all (`patchType: JSONPatch`, `patch` the base64 of a JSON
    array of RFC 6902 operations), for a validating one neither; JSON types exactly as in the
    API (`allowed` a boolean).
    """
    response: dict[str, Any] = {"uid": review.uid, "allowed": True}
    if decision is not None:
        response["allowed"] = bool(decision.allowed)
        if not decision.allowed:
            # The client sees `admission webhook "<name>" denied the request: <message>`, and
            # `code` as the HTTP status of its request (a code below 400 becomes 400).
            response["status"] = {"status": "Failure", "code": 403, "reason": "Forbidden",
                                  "message": denial_message(decision.message)}
        warnings = _cleaned_warnings(decision.warnings)
        if warnings:
            response["warnings"] = warnings
        audit = clean_audit(decision.audit_annotations)
        if audit:
            response["auditAnnotations"] = audit
        # An empty patch is sent as no patch, and a patch on DELETE is an error: patch only
        # what is judged, and only when there are operations to apply.
        if (mutating and decision.allowed and decision.patch
                and review.operation in JUDGED_OPERATIONS):
            encoded = dumps(list(decision.patch))
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(encoded).decode()
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response}


def denial_message(message: str) -> str:
    """The denial, cut after DENIAL_MAX bytes at a line boundary with a count of what was
    left out: the API server copies it into the client's error and its audit log."""
    if not message:
        return "denied by quickq-guard"
    if len(message.encode()) <= DENIAL_MAX:
        return message
    lines = message.splitlines()
    kept: list[str] = []
    size = 0
    for line in lines:
        size += len(line.encode()) + 1
        if size > DENIAL_MAX:
            break
        kept.append(line)
    left = len(lines) - len(kept)
    return "\n".join([*kept, f"... and {left} more line(s); run quickq-guard check on the "
                                "manifest for the full list"])


def clean_warnings(warnings: Iterable[str]) -> list[str]:
    """Warnings the API server passes on whole: see WARNING_MAX and WARNINGS_TOTAL_MAX."""
    kept: list[str] = []
    seen: set[str] = set()
    total = 0
    pending = [line for w in warnings for line in _wrap(_one_line(w, 1024), WARNING_MAX)]
    for index, text in enumerate(pending):
        if not text or text in seen:
            continue
        if total + len(text.encode()) > WARNINGS_TOTAL_MAX:
            left = len(pending) - index
            kept.append(f"quickq-guard: {left} more warning(s) left out; see the webhook log")
            break
        seen.add(text)
        kept.append(text)
        total += len(text.encode())
    return kept


def _cleaned_warnings(warnings: Iterable[str]) -> list[str]:
    """clean_warnings(warnings), remembered for the last few hundred tuples: the same objects
    get the same warnings over and over, and wrapping them costs some 4 us a review."""
    if isinstance(warnings, tuple):
        try:
            return list(_clean_warnings_tuple(warnings))
        except TypeError:  # not hashable after all
            pass
    return clean_warnings(warnings)


@functools.lru_cache(maxsize=256)
def _clean_warnings_tuple(warnings: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(clean_warnings(warnings))


def clean_audit(annotations: Mapping[str, str]) -> dict[str, str]:
    """Audit annotations with qualified-name keys (see AUDIT_KEY) and bounded values."""
    cleaned: dict[str, str] = {}
    for key, value in annotations.items():
        safe = re.sub(r"[^-A-Za-z0-9_.]", "-", key)[:63].strip("-_.") or "quickq-guard"
        if not AUDIT_KEY.match(safe):
            continue
        text = _one_line(value, AUDIT_VALUE_MAX)
        cleaned[safe] = f"{cleaned[safe]}; {text}" if safe in cleaned else text
    return cleaned


def _one_line(text: str, limit: int) -> str:
    """Control characters become spaces; text over `limit` UTF-8 bytes is cut with '...'."""
    if text.isascii() and text.isprintable() and len(text) <= limit:
        return text.strip()
    text = "".join(" " if unicodedata.category(c)[0] == "C" else c for c in text).strip() \
        if not text.isprintable() else text.strip()
    data = text.encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode("utf-8")
    return data[:limit - 3].decode("utf-8", "ignore").rstrip() + "..."


def _wrap(text: str, limit: int) -> list[str]:
    """Lines of at most `limit` UTF-8 bytes, cut between words; the later ones start '... '."""
    if len(text.encode()) <= limit:
        return [text]
    lines: list[str] = []
    line = ""
    for word in text.split(" "):
        candidate = f"{line} {word}" if line else word
        if len(candidate.encode()) <= limit:
            line = candidate
            continue
        if line and line != "...":
            lines.append(line)
        line = f"... {word}" if lines else word
        while len(line.encode()) > limit:
            head = line.encode()[:limit].decode("utf-8", "ignore")
            lines.append(head)
            line = "... " + line[len(head):]
    if line and line != "...":
        lines.append(line)
    return lines


def _string(request: Mapping[str, Any], field: str, required: bool = False) -> str:
    value = request.get(field)
    if type(value) is str and (value or not required):  # the usual case first
        return value
    if value is None and not required:
        return ""
    if not isinstance(value, str) or (required and not value):
        raise AdmissionError(400, f"request.{field} must be a string, got {_shown(value)}")
    return value


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, int | float):
        return "number"
    return "null"


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return repr(value[:80])
    return _json_type(value) if not isinstance(value, int | float) else repr(value)
