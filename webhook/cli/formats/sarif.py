"""SARIF 2.1.0 for code scanning (GitHub, GitLab, Azure DevOps): one result per finding.

The rules are the loaded policies (id, description, action as the default level and as the
`security-severity` code scanning ranks alerts by, a link to the docs with --docs-url), plus
`invalid-manifest` for input that cannot be read or judged. Each result points at a line and
column of its file: the field its finding names, or the nearest parent of it the source has (a
field to add), or the object. Patches are not results: a mutate policy changes the object at
admission, it does not report a problem.
"""

from __future__ import annotations

import urllib.parse
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from webhook import __version__
from webhook.cli.formats import Format, annotated, rendered_at
from webhook.cli.judge import Judged
from webhook.cli.summary import exit_code
from webhook.engine.policy import PolicySet
from webhook.engine.results import Finding

SCHEMA = ("https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/"
          "sarif-schema-2.1.0.json")
INVALID = "invalid-manifest"
_LEVELS = {"deny": "error", "would-deny": "warning", "warn": "warning", "audit": "note",
           "excepted": "note"}
_ACTION_LEVELS = {"enforce": "error", "warn": "warning", "audit": "note", "off": "none"}


class Sarif(Format):
    def start(self, policies: PolicySet) -> None:
        self.first = True
        rules = [_rule(p.id, p.description, p.type, p.action, self.options.docs_url)
                 for p in policies.policies]
        rules.append({"id": INVALID, "name": "InvalidManifest",
                      "shortDescription": {"text": "The manifest cannot be read or judged."},
                      "help": {"text": "Fix the YAML or the field named; the API server would "
                                       "refuse the object as it is."},
                      "defaultConfiguration": {"level": "error"},
                      "properties": {"tags": ["kubernetes"], "security-severity": "8.0"}})
        self.rule_index = {rule["id"]: index for index, rule in enumerate(rules)}
        driver = {"name": "quickq-guard", "version": __version__, "rules": rules}
        head = orjson.dumps({"$schema": SCHEMA, "version": "2.1.0"}).decode()[:-1]
        tool = orjson.dumps({"driver": driver}, option=orjson.OPT_INDENT_2).decode()
        self.out.write(f'{head},\n"runs": [{{\n"tool": {tool},\n"columnKind": "unicodeCodePoints",'
                       '\n"results": [')

    def render(self, judged: Sequence[Judged]) -> list[dict[str, Any]]:
        results: list[dict[str, Any]] = []
        for found in annotated(judged, self.options):
            if found.verdict == "error":
                results.append(self._result(found.item, INVALID, "error", found.message, {},
                                            found.finding))
                continue
            result, finding = found.result, found.finding
            assert finding is not None  # a failed result's annotations are its findings
            properties = {"resource": str(found.item.decision.resource), "field": finding.path,
                          "action": result.action, "verdict": found.verdict}
            if finding.container:
                properties["container"] = finding.container
            results.append(self._result(found.item, str(result.policy), _LEVELS[found.verdict],
                                        found.message, properties, finding))
            if finding.exception:  # suppressed, and by what: code scanning shows it so
                results[-1]["suppressions"] = [{"kind": "external", "status": "accepted",
                                                "justification": finding.exception}]
        return results

    def _result(self, item: Judged, rule: str, level: str, message: str,
                properties: dict[str, str], finding: Finding | None = None) -> dict[str, Any]:
        """A result at the field a finding names (see Document.field), or at the object."""
        document = item.document
        location: dict[str, Any] = {"artifactLocation": {"uri": _uri(document.file)}}
        if document.template:  # on the template; its line in the template is not known
            location = {"artifactLocation": {"uri": _uri(document.template)}}
            properties = {**properties, "rendered": rendered_at(item, finding)}
        elif document.line:
            line, column = document.field(finding.at) if finding else (
                document.line, document.column)
            location["region"] = {"startLine": line, "startColumn": max(column, 1)}
        result: dict[str, Any] = {"ruleId": rule, "ruleIndex": self.rule_index.get(rule, -1),
                                  "level": level, "message": {"text": message},
                                  "locations": [{"physicalLocation": location}]}
        if result["ruleIndex"] < 0:
            del result["ruleIndex"]  # a rule of a policy set loaded after start (none today)
        if properties:
            result["properties"] = properties
        return result

    def write(self, rendered: list[dict[str, Any]]) -> None:
        for result in rendered:
            self.out.write(("\n" if self.first else ",\n") + orjson.dumps(result).decode())
            self.first = False

    def finish(self, counts: Counter[str]) -> None:
        code = exit_code(counts, self.options.fail_on)
        invocation = {"executionSuccessful": not counts["outcome:error"], "exitCode": code}
        self.out.write(f'\n],\n"invocations": [{orjson.dumps(invocation).decode()}]\n}}]\n}}\n')


def _rule(policy: str, description: str, type_: str, action: str,
          docs_url: str = "") -> dict[str, Any]:
    """A policy as a SARIF rule. GitHub code scanning ranks an alert by the rule's
    `security-severity` (from the action: what the webhook does about a violation) and links
    `helpUri` from it; `docs_url` is where the docs site is served, if anywhere."""
    name = "".join(part.capitalize() for part in policy.split("-"))
    text = description or policy
    meaning = _ACTION_MEANINGS.get(action, f"action {action}")
    full = f"{text} A {type_} policy; {meaning}."
    rule: dict[str, Any] = {
        "id": policy, "name": name, "shortDescription": {"text": _first_sentence(text)},
        "fullDescription": {"text": full},
        "help": {"text": f"{full} See `quickq-guard policies` for its parameters.",
                 "markdown": f"{text}\n\nA {type_} policy; {meaning}. "
                             "`quickq-guard policies` lists its parameters."},
        "defaultConfiguration": {"level": _ACTION_LEVELS.get(action, "warning")},
        "properties": {"tags": ["kubernetes", "security", type_],
                       "security-severity": _SECURITY_SEVERITY.get(action, "0.0")}}
    if docs_url:
        rule["helpUri"] = f"{docs_url.rstrip('/')}/policies/#{urllib.parse.quote(policy)}"
    return rule


# GitHub's bands: 9.0+ critical, 7.0+ high, 4.0+ medium, above 0 low.
_SECURITY_SEVERITY = {"enforce": "8.0", "warn": "5.0", "audit": "2.0", "off": "0.0"}
_ACTION_MEANINGS = {"enforce": "action enforce: the webhook denies what violates it",
                    "warn": "action warn: the webhook admits what violates it, with a warning",
                    "audit": "action audit: the webhook admits what violates it and records "
                             "an audit annotation",
                    "off": "action off: not run"}


def _first_sentence(text: str) -> str:
    """A description's first sentence (or clause before `;`): a rule's one-line title."""
    for end in (". ", "; "):
        if end in text:
            return text.split(end, 1)[0] + "."
    return text


def _uri(file: str) -> str:
    """A relative URI for a file named relatively (code scanning resolves those against the
    repository), a file: URI for an absolute one."""
    if not file or file == "<stdin>":
        return "stdin"
    path = Path(file)
    if path.is_absolute():
        return path.as_uri()
    return urllib.parse.quote(path.as_posix())
