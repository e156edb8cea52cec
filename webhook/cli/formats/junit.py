"""JUnit XML for CI test reports (GitLab, Jenkins, Azure): one test case per object and
policy. A denial (or what --fail-on counts) is a failure, an object that cannot be read or
judged an error, a policy that does not apply a skipped case; warnings and audit findings
that do not fail the run are passing cases that say so in their output."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections import Counter
from collections.abc import Sequence
from typing import Any
from xml.sax.saxutils import escape, quoteattr

from webhook.cli.formats import Format, failing, fails, reported_results
from webhook.cli.judge import Judged
from webhook.engine.policy import PolicySet

# Characters XML 1.0 does not allow even escaped.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


class JUnit(Format):
    """The test cases are written to a temporary file as they come, since the totals lead."""

    def start(self, policies: PolicySet) -> None:
        # closed in finish(); unlinked at once, so nothing is left behind even on a crash
        self.body = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        self.totals: Counter[str] = Counter()

    def render(self, judged: Sequence[Judged]) -> tuple[str, Counter[str]]:
        cases: list[str] = []
        totals: Counter[str] = Counter()
        quiet, fail_on = self.options.quiet, self.options.fail_on
        for item in judged:
            decision = item.decision
            classname = attr(str(decision.resource))
            where = f' file={attr(item.document.template or item.document.file)}'
            if item.document.line and not item.document.template:
                where += f' line="{item.document.line}"'
            for result in reported_results(decision):
                name = attr(result.policy
                            or ("readable" if result.status == "error" else "not judged"))
                status = result.status
                if quiet and not failing(decision, result, fail_on):
                    continue
                totals["tests"] += 1
                head = f'    <testcase classname={classname} name={name}{where}'
                if status == "error":
                    totals["errors"] += 1
                    problem = "; ".join(f.message for f in result.findings) or result.reason
                    cases.append(f'{head}>\n      <error type="error" message={attr(problem)}>'
                                 f'{text(problem)}</error>\n    </testcase>\n')
                elif status == "skip":
                    totals["skipped"] += 1
                    cases.append(f'{head}>\n      <skipped message={attr(result.reason)}/>'
                                 '\n    </testcase>\n')
                elif status == "pass" or not result.findings:
                    cases.append(f"{head}/>\n")
                else:
                    labels = [decision.verdict(result, f) for f in result.findings]
                    lines = "\n".join(f"{verdict}: {f.message} (field: {f.path})"
                                      for verdict, f in zip(labels, result.findings, strict=True))
                    failed = [v for v in labels if fails(v, fail_on)]
                    if all(v == "excepted" for v in labels):  # every finding is excepted
                        totals["skipped"] += 1
                        excepted = "excepted by " + "; ".join(
                            dict.fromkeys(f.exception for f in result.findings))
                        cases.append(f'{head}>\n      <skipped message={attr(excepted)}/>\n'
                                     f'      <system-out>{text(lines)}</system-out>\n'
                                     '    </testcase>\n')
                    elif failed:
                        totals["failures"] += 1
                        message = "; ".join(f.message for v, f in
                                            zip(labels, result.findings, strict=True)
                                            if fails(v, fail_on))
                        cases.append(f'{head}>\n      <failure type="{failed[0]}" '
                                     f'message={attr(message)}>{text(lines)}</failure>\n'
                                     '    </testcase>\n')
                    else:
                        cases.append(f"{head}>\n      <system-out>{text(lines)}</system-out>\n"
                                     "    </testcase>\n")
        return "".join(cases), totals

    def write(self, rendered: Any) -> None:
        text, totals = rendered
        self.body.write(text)
        self.totals.update(totals)

    def finish(self, counts: Counter[str]) -> None:
        totals = self.totals
        numbers = (f'tests="{totals["tests"]}" failures="{totals["failures"]}" '
                   f'errors="{totals["errors"]}" skipped="{totals["skipped"]}"')
        self.out.write('<?xml version="1.0" encoding="UTF-8"?>\n'
                       f'<testsuites name="quickq-guard" {numbers}>\n'
                       f'  <testsuite name="quickq-guard check" {numbers}>\n')
        self.body.seek(0)
        shutil.copyfileobj(self.body, self.out)
        self.body.close()
        self.out.write("  </testsuite>\n</testsuites>\n")


def attr(value: str) -> str:
    """An XML attribute value, quoted, without what XML 1.0 cannot hold."""
    return quoteattr(_INVALID_XML.sub("", value))


def text(value: str) -> str:
    """XML character data, escaped, without what XML 1.0 cannot hold."""
    return escape(_INVALID_XML.sub("", value))
