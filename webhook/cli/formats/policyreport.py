"""PolicyReports in the wgpolicyk8s.io/v1alpha2 shape Kyverno and Policy Reporter use: one
`PolicyReport` per namespace and a `ClusterPolicyReport` for cluster-scoped objects, as a YAML
stream that `kubectl apply -f -` takes.

A result is one resource x policy: pass, fail (an enforced denial), warn (a warn or audit
finding, or a dry-run denial), error or skip (an object not judged at all is one skip of the
policy `judged`, saying why); a patch a mutate policy would make is a pass
whose message and properties say what it adds. Results are kept in a temporary file per
namespace as they come, so memory does not grow with the input.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from typing import IO, Any

import orjson

from webhook.cli.formats import Format, failing, reported_results
from webhook.cli.judge import Judged, standing
from webhook.engine.policy import PolicySet
from webhook.engine.results import Decision, Result

API_VERSION = "wgpolicyk8s.io/v1alpha2"
# Kinds without a namespace; any other object without one would land in `default`, as
# `kubectl apply` without -n puts it.
CLUSTER_SCOPED = frozenset({
    "Namespace", "Node", "PersistentVolume", "ClusterRole", "ClusterRoleBinding",
    "StorageClass", "PriorityClass", "RuntimeClass", "CustomResourceDefinition",
    "MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding", "APIService",
    "CSIDriver", "CSINode", "IngressClass", "VolumeAttachment", "ClusterPolicyReport"})
_RESULTS = ("pass", "fail", "warn", "error", "skip")


class PolicyReport(Format):
    def start(self, policies: PolicySet) -> None:
        self.files: dict[str, IO[str]] = {}
        self.summaries: dict[str, Counter[str]] = {}
        self.seconds = int(time.time())  # one timestamp for the run, whichever process judged

    def render(self, judged: Sequence[Judged]) -> dict[str, tuple[str, Counter[str]]]:
        """Per namespace ("" for cluster scope): its result lines and their counts."""
        by_namespace: dict[str, tuple[list[str], Counter[str]]] = {}
        seconds = self.seconds
        quiet = self.options.quiet
        for item in judged:
            decision = item.decision
            resource = decision.resource
            namespace = resource.namespace or (
                "" if resource.kind in CLUSTER_SCOPED else "default")
            lines, counts = by_namespace.setdefault(namespace, ([], Counter()))
            reference = {"apiVersion": resource.api_version, "kind": resource.kind,
                         "name": resource.name}
            if namespace:
                reference["namespace"] = namespace
            for result in reported_results(decision):
                if quiet and not failing(decision, result, self.options.fail_on):
                    continue
                outcome, message = report_result(decision, result)
                counts[outcome] += 1
                properties = {"file": item.document.file, "line": str(item.document.line),
                              "action": result.action}
                if item.document.template:  # the file is the render, this what wrote it
                    properties["template"] = item.document.template
                if result.status == "patch":
                    properties["patch"] = orjson.dumps(result.shown_patch).decode()
                # A result of no policy: an object that cannot be read, or one not judged
                # at all (one skip, as in the JSON report, not one per policy).
                policy = result.policy or ("judged" if result.status == "skip" else "readable")
                entry = {"source": "quickq-guard", "policy": policy,
                         "rule": policy, "result": outcome,
                         "message": message, "scored": True,
                         "category": result.type, "resources": [reference],
                         "properties": properties,
                         "timestamp": {"seconds": seconds, "nanos": 0}}
                lines.append(f"- {orjson.dumps(entry).decode()}\n")
        return {namespace: ("".join(lines), counts)
                for namespace, (lines, counts) in by_namespace.items()}

    def write(self, rendered: Any) -> None:
        for namespace, (text, counts) in rendered.items():
            if namespace not in self.files:
                # closed in finish(); unlinked at once, nothing is left behind on a crash
                self.files[namespace] = tempfile.TemporaryFile(  # noqa: SIM115
                    "w+", encoding="utf-8")
                self.summaries[namespace] = Counter()
            self.files[namespace].write(text)
            self.summaries[namespace].update(counts)

    def finish(self, counts: Counter[str]) -> None:
        for namespace in sorted(self.files):
            summary = {key: self.summaries[namespace][key] for key in _RESULTS}
            kind = "PolicyReport" if namespace else "ClusterPolicyReport"
            metadata = {"name": "quickq-guard",
                        "labels": {"app.kubernetes.io/managed-by": "quickq-guard"}}
            if namespace:
                metadata["namespace"] = namespace
            head = {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata,
                    "summary": summary}
            self.out.write("---\n" + "".join(f"{key}: {orjson.dumps(value).decode()}\n"
                                             for key, value in head.items()))
            body = self.files[namespace]
            body.seek(0, 2)
            if not body.tell():
                self.out.write("results: []\n")
            else:
                self.out.write("results:\n")
                body.seek(0)
                shutil.copyfileobj(body, self.out)
            body.close()


def report_result(decision: Decision, result: Result) -> tuple[str, str]:
    """The PolicyReport result and message of one policy's result (the audit's reports
    say the same: webhook.audit.scan)."""
    if result.status in ("pass", "skip"):
        return result.status, result.reason or f"{result.policy}: {result.status}"
    if result.status == "error":
        return "error", "; ".join(f.message for f in result.findings) or result.reason
    if result.status == "patch":
        return "pass", "would patch: " + "; ".join(f.message for f in result.findings)
    outcome = standing(decision, result)
    if outcome == "excepted":
        excepted = "; ".join(dict.fromkeys(f.exception for f in result.findings))
        return "skip", f"excepted by {excepted}: " + "; ".join(f.message for f in result.findings)
    return outcome, "; ".join(f.message for f in result.findings)
