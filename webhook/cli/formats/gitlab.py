"""GitLab code quality: the Code Climate JSON subset GitLab reads (`artifacts: reports:
codequality:`), one issue per finding, shown on the merge request's diff.

An issue has a description, the policy as check_name, a severity GitLab ranks by, the file and
line of the finding's field, and a fingerprint GitLab tells a new issue from an old one by: a
hash of the policy, file, object, field and message, not the line, so an issue that only moves
is not new. Findings a PolicyException excepts are not issues; patches are not either.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

import orjson

from webhook.cli.formats import Format, annotated, rendered_at
from webhook.cli.judge import Judged

INVALID = "invalid-manifest"
_SEVERITIES = {"error": "blocker", "deny": "critical", "would-deny": "major", "warn": "minor",
               "audit": "info"}


class GitLab(Format):
    def start(self, policies: Any) -> None:
        self.first = True
        self.out.write("[")

    def render(self, judged: Sequence[Judged]) -> list[dict[str, Any]]:
        issues: list[dict[str, Any]] = []
        for found in annotated(judged, self.options):
            if found.verdict not in _SEVERITIES:  # excepted: not a problem to show
                continue
            document = found.item.document
            line = document.field(found.finding.at)[0] if found.finding and document.line \
                else document.line
            check = INVALID if found.verdict == "error" else str(found.result.policy)
            path = document.file or "<stdin>"
            description = found.message
            if document.template:  # on the template, the line in the render beside it
                path, line = document.template, 1
                description += f" (rendered {rendered_at(found.item, found.finding)})"
            field = found.finding.path if found.finding else ""
            key = "\0".join((check, path, str(found.item.decision.resource), field,
                             found.message))
            issues.append({"description": description, "check_name": check,
                           "fingerprint": hashlib.sha256(key.encode()).hexdigest(),
                           "severity": _SEVERITIES[found.verdict],
                           "location": {"path": path, "lines": {"begin": max(line, 1)}}})
        return issues

    def write(self, rendered: list[dict[str, Any]]) -> None:
        for issue in rendered:
            self.out.write(("\n" if self.first else ",\n") + orjson.dumps(issue).decode())
            self.first = False

    def finish(self, counts: Any) -> None:
        self.out.write("\n]\n")
