"""The table for people: one line per finding, then the summary. Errors go to stderr."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from webhook.cli.formats import Format, fails, location, resource_label
from webhook.cli.judge import Judged
from webhook.cli.summary import summary_line
from webhook.engine.results import Finding
from webhook.engine.workload import UNKNOWN_KIND

_COLORS = {"skip": "33", "deny": "31", "would-deny": "33", "warn": "33", "audit": "36",
           "patch": "32", "would-patch": "32", "excepted": "36"}


class Table(Format):
    def render(self, judged: Sequence[Judged]) -> str:
        lines: list[str] = []
        quiet = self.options.quiet
        for item in judged:
            decision = item.decision
            if decision.skipped:
                # not judged (a kind, a namespace, a user): counted in the summary, and with
                # --show-skipped a line says why; a kind that looks like a typo of a judged
                # one (Deploymnet) is always shown, being most likely a mistake
                if not quiet and (self.options.show_skipped
                                  or UNKNOWN_KIND in decision.skipped):
                    lines.append(self.line("skip", "-", item, decision.skipped))
                continue
            if decision.outcome == "allowed" and not decision.warnings \
                    and not decision.audit_annotations:
                continue  # most objects: nothing to show
            for result in decision.results:
                if result.status not in ("fail", "patch"):
                    continue  # errors are reported on stderr, pass and skip are quiet
                for finding in result.findings:
                    verdict = decision.verdict(result, finding)
                    if quiet and not fails(verdict, self.options.fail_on):
                        continue
                    message = finding.message + (" (existing)" if finding.preexisting else "")
                    if finding.exception:
                        message += f" (excepted by {finding.exception})"
                    if result.reason:  # next to findings, a note on all of them
                        message += f" ({result.reason})"
                    lines.append(self.line(verdict, result.policy or "-", item, message,
                                           finding))
            if not quiet:  # what quickq-guard does not judge fails no run
                lines += (self.line("warn", "-", item, note) for note in decision.unjudged)
        return "".join(lines)

    def line(self, verdict: str, policy: str, item: Judged, message: str,
             finding: Finding | None = None) -> str:
        text = f"{verdict.upper():<11}"
        if self.options.color:
            text = f"\033[{_COLORS[verdict]}m{text}\033[0m"
        message = " ".join(message.splitlines())
        where = location(item, finding)
        return (f"{text} {policy:<26} {resource_label(item.decision.resource)}  {message}  "
                f"[{where}]\n")

    def finish(self, counts: Counter[str]) -> None:
        self.out.write(summary_line(counts))
