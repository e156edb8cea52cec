"""The table for people: one line per finding, then the summary. Errors go to stderr."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from webhook.cli.formats import Format, label, location
from webhook.cli.judge import Judged
from webhook.cli.summary import summary_line

_COLORS = {"deny": "31", "would-deny": "33", "warn": "33", "audit": "36", "patch": "32",
           "would-patch": "32"}


class Table(Format):
    def render(self, judged: Sequence[Judged]) -> str:
        lines: list[str] = []
        color, quiet = self.options.color, self.options.quiet
        for item in judged:
            decision = item.decision
            if decision.outcome == "allowed" and not decision.warnings \
                    and not decision.audit_annotations:
                continue  # most objects: nothing to show
            where = location(item)
            for result in decision.results:
                if result.status not in ("fail", "patch"):
                    continue  # errors are reported on stderr, pass and skip are quiet
                for finding in result.findings:
                    verdict = label(decision, result, finding)
                    if quiet and verdict not in ("deny", "would-deny"):
                        continue
                    text = verdict.upper()
                    if color:
                        text = f"\033[{_COLORS[verdict]}m{text:<11}\033[0m"
                    line = finding.message + (" (existing)" if finding.preexisting else "")
                    lines.append(f"{text:<11} {result.policy or '-':<26} "
                                 f"{decision.resource}  {line}  [{where}]\n")
        return "".join(lines)

    def finish(self, counts: Counter[str]) -> None:
        self.out.write(summary_line(counts))
