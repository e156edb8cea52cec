"""A report as a write sends it, and what the write reads back: the new resourceVersion.

The API server answers a create or replace with the whole object, up to REPORT_BYTES of
results; decoded as a dict, that answer cost a write more than making the report did. As a
msgspec Struct with the results kept as raw JSON, the answer is scanned, not built, and the
rest of it (status, managedFields) skipped. What is sent is the report, field for field.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import msgspec
import orjson
from lightkube.core.resource import GlobalResource, NamespacedResource, api_info


class Meta(msgspec.Struct, omit_defaults=True):
    name: str
    namespace: str | None = None
    labels: dict[str, str] | None = None
    resourceVersion: str | None = None


class Sent(msgspec.Struct, omit_defaults=True):
    apiVersion: str
    kind: str
    metadata: Meta
    results: msgspec.Raw  # sent as encoded here; an answer's is scanned, never decoded
    summary: dict[str, int] | None = None
    source: str | None = None


def sent(report: dict[str, Any], resource: Any) -> Any:
    """`report` (webhook.audit.reports) to send as `resource`, the lightkube class of its
    kind (a Sent of the Resource class lightkube overloads on); its results encoded once."""
    metadata = report["metadata"]
    return _kind(resource)(
        report["apiVersion"], report["kind"],
        Meta(metadata["name"], metadata.get("namespace"), metadata.get("labels"),
             metadata.get("resourceVersion")),
        msgspec.Raw(orjson.dumps(report.get("results") or [])), report.get("summary"),
        report.get("source"))


def version(written: Any) -> str:
    """The resourceVersion of what a create or replace of a `sent` report answered."""
    return str(written.metadata.resourceVersion)


@cache
def _kind(resource: Any) -> type[Sent]:
    """A Struct class lightkube sends to `resource`'s path and decodes the answer into."""
    scope = NamespacedResource if issubclass(resource, NamespacedResource) else GlobalResource

    class Report(Sent, scope):  # type: ignore[misc,valid-type]
        _api_info = api_info(resource)

    return Report
