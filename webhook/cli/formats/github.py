"""GitHub Actions workflow commands: each finding becomes an annotation on the pull request
(`::error file=...,line=...::`), then the summary line."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from webhook.cli.formats import Format, annotated, fails, rendered_at
from webhook.cli.judge import Judged
from webhook.cli.summary import summary_line
from webhook.engine.results import Finding

_COMMANDS = {"deny": "error", "would-deny": "warning", "warn": "warning", "audit": "notice",
             "excepted": "notice"}


class GitHub(Format):
    def render(self, judged: Sequence[Judged]) -> str:
        lines: list[str] = []
        for found in annotated(judged, self.options):
            if found.verdict == "error":
                command, title = "error", "invalid manifest"
            else:
                failed = fails(found.verdict, self.options.fail_on)
                command, title = "error" if failed else _COMMANDS[found.verdict], \
                    str(found.result.policy)
            lines.append(_command(command, found.item, title, found.message, found.finding))
        return "".join(lines)

    def finish(self, counts: Counter[str]) -> None:
        self.out.write(summary_line(counts))


def _command(command: str, item: Judged, title: str, message: str,
             finding: Finding | None = None) -> str:
    """At the field a finding names (see Document.field), or at the object."""
    document = item.document
    if document.template:  # on the template file, the line in the render beside it
        return command_line(command, document.template, 0, 0, title,
                            f"{message} (rendered {rendered_at(item, finding)})")
    line, column = document.field(finding.at) if finding and document.line else (
        document.line, document.column)
    return command_line(command, document.file, line, column, title, message)


def command_line(command: str, file: str, line: int, column: int, title: str,
                 message: str) -> str:
    """One workflow command (`::error file=...,line=...::message`); line 0: no line."""
    where = f"file={_property(file)}"
    if line:
        where += f",line={line},col={column}"
    return f"::{command} {where},title={_property(title)}::{_data(message)}\n"


def _data(text: str) -> str:
    """Escape a workflow command's message (GitHub's own escaping rules)."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _property(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")
