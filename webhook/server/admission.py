"""AdmissionReview in and out: what the API server sends, and the answer it accepts.

Pure functions, no I/O. Every rule of the API server that an answer must follow is written
next to the code that follows it, so a reader can check one against the other.
"""

from __future__ import annotations

import base64
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson  # the parser the CLI uses too; json handles what orjson refuses

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
# The operations an AdmissionReview can carry (admission.k8s.io/v1 Operation). Anything else
# is not from an API server, and would become an unbounded metric label and log field.
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
# The subresources whose requests carry the judged object itself: `kubectl debug` writes a
# Pod's ephemeral containers through pods/ephemeralcontainers, and the review holds the
# whole Pod, judged like any Pod UPDATE (what the old Pod broke already only warns). Other
# subresources (status, binding, eviction, scale) carry other things and are never judged.
JUDGED_SUBRESOURCES = ("", "ephemeralcontainers")
# `quickq-guard cluster arm` and `helm test` dry-run create a Pod with this annotation: the
# answer then carries a warning naming the install (`serve --instance`) and the endpoint that
# answered, which tells an answer from a call that failed open whatever the policies say, and
# one install's answer from another's. Dry runs only: nothing is ever stored.
PROBE_ANNOTATION = "quickq.io/probe"

# The API server drops a warning that is empty, a duplicate, not UTF-8 or holds control
# characters. It sends each as a `Warning: 299 - "<text>"` header; once those headers pass
# 4096 bytes in all it cuts each warning to 256 characters and drops the rest. kubectl prints
# each as `Warning: <text>`. So every finding is one whole warning (never split over several:
# a repeated continuation text would be dropped), at most WARNING_MAX bytes, and the headers
# stay within WARNINGS_TOTAL_MAX, with a last warning saying how many findings were left out.
# The Kubernetes docs ask for 120 characters where possible; the findings' own texts decide
# that, since a warning cut short loses the fix at its end.
WARNING_MAX = 256
WARNINGS_TOTAL_MAX = 4096
WARNING_HEADER_EXTRA = len('299 - ""')
# Audit annotation keys are sent on as `<webhook name>/<key>`: `<key>` must be a qualified
# name (at most 63 characters of [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?) or it is dropped.
AUDIT_KEY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
AUDIT_VALUE_MAX = 4096
# A denial lists every enforced violation; an object with thousands of them would put
# megabytes into the client's error and the API server's audit log, so it stops at 32 KiB.
DENIAL_MAX = 32 * 1024
# A denial's HTTP status by its reason, as ValidatingAdmissionPolicy answers (a CEL
# validation's `reason`; Forbidden when it names none).
DENIAL_CODES = {"Unauthorized": 401, "Forbidden": 403, "Invalid": 422,
                "RequestEntityTooLarge": 413}


class AdmissionError(Exception):
    """A request that is not an AdmissionReview we can answer; `status` is the HTTP code."""

    def __init__(self, status: int, problem: str) -> None:
        super().__init__(problem)
        self.status = status
        self.problem = problem


@dataclass(frozen=True, slots=True)
class AdmissionRequest:
    """The fields of an AdmissionReview request that quickq-guard uses."""

    api_version: str
    uid: str
    operation: str
    object: Any
    old_object: Any
    namespace: str | None
    name: str
    kind: str
    sub_resource: str
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


def parse_review(body: bytes) -> AdmissionRequest:
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
    if operation not in OPERATIONS:
        raise AdmissionError(400, f"request.operation must be one of {', '.join(OPERATIONS)}, "
                                  f"got {_shown(operation)}")
    namespace = _string(request, "namespace") or None
    name = _string(request, "name")
    sub_resource = _string(request, "subResource")
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
    return AdmissionRequest(api_version=api_version, uid=uid, operation=operation, object=obj,
                            old_object=request.get("oldObject"), namespace=namespace, name=name,
                            kind=kind_name, sub_resource=sub_resource, username=username,
                            groups=groups_tuple, dry_run=request.get("dryRun") is True)


def judged(review: AdmissionRequest) -> bool:
    """Whether the review's object is judged at all (else it is admitted untouched)."""
    return review.operation in JUDGED_OPERATIONS and review.sub_resource in JUDGED_SUBRESOURCES


def respond(review: AdmissionRequest, decision: Decision | None, *, mutating: bool,
            instance: str = "") -> dict[str, Any]:
    """The AdmissionReview answer to `review`; `decision` None means allowed untouched.

    The API server checks, in order: a `response` object whose `uid` equals `request.uid`;
    the same `apiVersion` and `kind` as the request; for a mutating webhook, `patch` and
    `patchType` together or not at all (`patchType: JSONPatch`, `patch` the base64 of a JSON
    array of RFC 6902 operations), for a validating one neither; JSON types exactly as in the
    API (`allowed` a boolean).
    """
    response: dict[str, Any] = {"uid": review.uid, "allowed": True}
    probe = [probe_warning("mutate" if mutating else "validate", instance)] \
        if _probed(review) else []
    if probe and decision is None:
        response["warnings"] = probe
    if decision is not None:
        response["allowed"] = bool(decision.allowed)
        if not decision.allowed:
            # The client sees `admission webhook "<name>" denied the request: <message>`, and
            # `code` as the HTTP status of its request (a code below 400 becomes 400).
            reason = decision.denial_reason
            response["status"] = {"status": "Failure", "code": DENIAL_CODES.get(reason, 403),
                                  "reason": reason, "message": denial_message(decision.message)}
        warnings = clean_warnings([*probe, *decision.warnings])
        if warnings:
            response["warnings"] = warnings
        audit = clean_audit(decision.audit_annotations)
        if audit:
            response["auditAnnotations"] = audit
        # An empty patch is sent as no patch, and a patch on DELETE is an error: patch only
        # what is judged, and only when there are operations to apply.
        if mutating and decision.allowed and decision.patch and judged(review):
            encoded = dumps(list(decision.patch))
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(encoded).decode()
    return {"apiVersion": review.api_version, "kind": "AdmissionReview", "response": response}


def probe_warning(endpoint: str, instance: str = "") -> str:
    named = f"quickq-guard {instance}" if instance else "quickq-guard"
    return f"{named}: {endpoint} answered the probe"


def _probed(review: AdmissionRequest) -> bool:
    if not review.dry_run or not isinstance(review.object, dict):
        return False
    metadata = review.object.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, dict) else None
    return isinstance(annotations, dict) and PROBE_ANNOTATION in annotations


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
    """Warnings the API server passes on whole, one per finding: see WARNING_MAX and
    WARNINGS_TOTAL_MAX. Findings past the budget are counted in a last warning; the webhook
    log names each of them."""
    texts: list[str] = []
    seen: set[str] = set()
    for warning in warnings:
        text = _short_warning(warning)
        if text and text not in seen:  # the API server would drop the duplicate anyway
            seen.add(text)
            texts.append(text)
    kept: list[str] = []
    total = 0
    for index, text in enumerate(texts):
        left = len(texts) - index
        reserve = 0 if left == 1 else _header_size(_left_out(left))
        if total + _header_size(text) + reserve > WARNINGS_TOTAL_MAX:
            kept.append(_left_out(left))
            break
        kept.append(text)
        total += _header_size(text)
    return kept


def _left_out(count: int) -> str:
    return f"quickq-guard: {count} more finding(s) not shown here; the webhook log lists each"


def _header_size(text: str) -> int:
    """Bytes of the `Warning` header the API server writes for `text` (quoted, escaped)."""
    return len(text.encode()) + WARNING_HEADER_EXTRA + text.count('"') + text.count("\\")


def _short_warning(warning: str) -> str:
    """`warning` on one line in at most WARNING_MAX bytes. A longer one keeps its fix: a
    finding reads `[policy] container 'x': what is wrong; what to change`, so the middle
    goes first, and only a fix too long by itself is cut."""
    text = _one_line(warning, 4 * WARNING_MAX)
    if len(text.encode()) <= WARNING_MAX:
        return text
    head, colon, rest = text.partition(": ")
    if colon and "; " in rest:
        shorter = f"{head}: {rest.rsplit('; ', 1)[1]}"
        if len(shorter.encode()) <= WARNING_MAX:
            return shorter
    return _one_line(text, WARNING_MAX)


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
