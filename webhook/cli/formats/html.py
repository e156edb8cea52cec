"""One self-contained HTML page for people: a summary, charts, and every finding in a table
that filters and sorts. It opens from disk or as a CI artifact and loads nothing: the style
and script are inline, allowed by hash in the page's Content-Security-Policy, and the charts
are inline SVG.

The page comes from a Jinja2 template with autoescaping on, so a message, a name or a file
holding markup is shown as text. It shows what the JSON report shows and nothing more: the
engine's messages (values it hides already read (hidden)) and the patches as reports show
them (Result.shown_patch). The summary is the JSON contract's (webhook.cli.summary), from the
same counts, so the numbers agree.

The summary leads the page, so the rows are kept (as small tuples) until the run ends.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import resources
from typing import Any

import jinja2
import orjson
from jinja2.utils import htmlsafe_json_dumps
from markupsafe import Markup

from webhook import __version__
from webhook.cli.formats import Format, fails, location
from webhook.cli.judge import Judged
from webhook.cli.summary import STATUSES, exit_code, summary
from webhook.engine.policy import PolicySet
from webhook.engine.results import OUTCOMES, Finding, Result

# The finding verdicts (Decision.verdict) in the order a reader ranks them, each with the
# colour family the page draws it in.
VERDICTS = ("error", "deny", "would-deny", "warn", "audit", "patch", "would-patch", "excepted")
TONES = {"error": "bad", "deny": "bad", "would-deny": "warn", "warn": "warn", "audit": "info",
         "patch": "good", "would-patch": "good", "excepted": "muted"}
TOP = 12  # bars per chart; the rest are summed into one "others" bar


@dataclass(frozen=True, slots=True)
class Row:
    """One line of the findings table."""

    verdict: str
    policy: str
    kind: str
    namespace: str
    name: str
    location: str
    message: str
    fix: str
    patch: tuple[dict[str, Any], ...]  # as reports show it (Finding.shown_patch)
    exception: str
    note: str  # existing (an UPDATE keeps it), or what the policy says of all its findings


@dataclass(frozen=True, slots=True)
class Skipped:
    """An object not judged at all, and why."""

    kind: str
    namespace: str
    name: str
    location: str
    reason: str


class Html(Format):
    def start(self, policies: PolicySet) -> None:
        self.policies = policies
        self.rows: list[Row] = []
        self.skipped: list[Skipped] = []

    def render(self, judged: Sequence[Judged]) -> tuple[list[Row], list[Skipped]]:
        rows: list[Row] = []
        skipped: list[Skipped] = []
        quiet, fail_on = self.options.quiet, self.options.fail_on
        for item in judged:
            decision = item.decision
            resource = decision.resource
            if decision.skipped:
                if not quiet:
                    skipped.append(Skipped(resource.kind, resource.namespace, resource.name,
                                           location(item), decision.skipped))
                continue
            for result in decision.results:
                if result.status == "error":
                    finding = next(iter(result.findings), None)
                    problem = "; ".join(f.message for f in result.findings) or result.reason
                    rows.append(_row(item, result, "error", problem, finding))
                    continue
                if result.status not in ("fail", "patch"):
                    continue
                for finding in result.findings:
                    verdict = decision.verdict(result, finding)
                    if quiet and not fails(verdict, fail_on):
                        continue
                    rows.append(_row(item, result, verdict, finding.message, finding))
            if not quiet:  # what quickq-guard does not judge fails no run
                rows += (Row("warn", "", resource.kind, resource.namespace, resource.name,
                             location(item), note, "", (), "", "")
                         for note in decision.unjudged)
        return rows, skipped

    def write(self, rendered: tuple[list[Row], list[Skipped]]) -> None:
        rows, skipped = rendered
        self.rows += rows
        self.skipped += skipped

    def finish(self, counts: Counter[str]) -> None:
        self.out.write(page(self.policies, self.rows, self.skipped, counts,
                            self.options.fail_on, made_by=self.options.made_by))


def _row(item: Judged, result: Result, verdict: str, message: str,
         finding: Finding | None) -> Row:
    resource = item.decision.resource
    patch: tuple[dict[str, Any], ...] = ()
    if finding is not None and finding.patch:
        patch = finding.patch if finding.shown_patch is None else finding.shown_patch
    notes = []
    if finding is not None and finding.preexisting:
        notes.append("existing: the object had it before this change")
    if result.reason and result.findings and verdict != "error":
        notes.append(result.reason)
    return Row(verdict, result.policy or "", resource.kind, resource.namespace, resource.name,
               location(item, finding), message, suggested_fix(message),
               patch, finding.exception if finding else "", "; ".join(notes))


# What a message asks to do when it is all a request: "add the label ...".
_REQUEST = re.compile(r"^(?:container '[^']*': )?(?:add|set|remove|pin|move|use|raise|put|"
                      r"name|give|drop|replace|declare|render)\b")


def suggested_fix(message: str) -> str:
    """The part of a message that says what to do. The policies write "what is wrong; what
    to do" (or only what to do), so this is what follows the first "; ", or the whole
    message when it is a request; "" when the message suggests nothing."""
    _, semicolon, fix = message.partition("; ")
    if semicolon:
        return fix
    return message if _REQUEST.match(message) else ""


def page(policies: PolicySet, rows: Sequence[Row], skipped: Sequence[Skipped],
         counts: Counter[str], fail_on: str = "deny", now: datetime | None = None,
         made_by: str = "quickq-guard check -o html") -> str:
    """The whole page; `made_by` the command that wrote it."""
    totals = summary(counts)
    by_policy: dict[str, Counter[str]] = {}
    by_namespace: dict[str, Counter[str]] = {}
    by_file: dict[str, Counter[str]] = {}
    for row in rows:
        if row.verdict == "error" or not row.policy:
            continue  # the charts count findings, as the summary does
        by_policy.setdefault(row.policy, Counter())[row.verdict] += 1
        by_namespace.setdefault(row.namespace or "(no namespace)", Counter())[row.verdict] += 1
        by_file.setdefault(_file_of(row.location), Counter())[row.verdict] += 1
    code = exit_code(counts, fail_on)
    actions = Counter(policy.action for policy in policies.policies)
    options = {"verdict": [v for v in VERDICTS if any(r.verdict == v for r in rows)],
               "policy": sorted({r.policy for r in rows}),
               "kind": sorted({r.kind for r in rows}),
               "namespace": sorted({r.namespace for r in rows})}
    template = _environment().get_template("report.html.j2")
    style, script = _asset("report.css"), _asset("report.js")
    return template.render(
        version=__version__, made_by=made_by,
        generated=(now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M:%S UTC"),
        mode=policies.config.mode, fail_on=fail_on, code=code, summary=totals,
        legend=[(tone, ", ".join(v for v in VERDICTS if TONES[v] == tone))
                for tone in dict.fromkeys(TONES.values())],
        outcomes=OUTCOMES, statuses=(*STATUSES, "excepted"), verdicts=VERDICTS, tones=TONES,
        policies=[{"id": p.id, "action": p.action, "type": p.type,
                   "description": p.description, "found": by_policy.get(p.id, Counter())}
                  for p in policies.policies],
        actions=actions,
        charts=[_chart("Findings by policy", by_policy,
                       {p.id: f"{p.id} ({p.action})" for p in policies.policies}),
                _chart("Findings by namespace", by_namespace),
                _chart("Findings by file", by_file)],
        total=len(rows), skipped=skipped,
        exceptions=Counter(row.exception for row in rows if row.exception).most_common(),
        options=options, data=table_data(rows, options),
        style=Markup(style), script=Markup(script),
        csp=f"default-src 'none'; style-src {_hash(style)}; script-src {_hash(script)}; "
            "base-uri 'none'; form-action 'none'",
    )


def table_data(rows: Sequence[Row], options: dict[str, list[str]]) -> Markup:
    """The findings table as JSON for the page's script, which shows it a page at a time (a
    browser lays out thousands of rows slowly; it parses this at once): each row a list,
    its verdict, policy, kind and namespace as indices into `options`, its fix null when the
    message is the fix, its patch the operations as reports show them. Escaped by Jinja's
    htmlsafe_json_dumps for a script element."""
    index = {key: {value: n for n, value in enumerate(values)}
             for key, values in options.items()}
    encoded = [[index["verdict"][r.verdict], index["policy"][r.policy], index["kind"][r.kind],
                index["namespace"][r.namespace], r.name, r.message,
                None if r.fix == r.message else r.fix, r.patch, r.exception, r.note,
                r.location] for r in rows]
    return htmlsafe_json_dumps({"options": options, "rows": encoded}, dumps=_dumps)


def _dumps(value: Any, **_: Any) -> str:
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:  # a patch of user data orjson refuses: keys not strings, huge integers
        return json.dumps(value, default=str)


def _file_of(where: str) -> str:
    """The file of a `file:line:column` location."""
    parts = where.rsplit(":", 2)
    return parts[0] if len(parts) == 3 and parts[1].isdigit() else where


def _chart(title: str, groups: dict[str, Counter[str]],
           labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A horizontal bar chart's data: the TOP groups with the most findings, each bar split
    by verdict, and the others summed. `labels`: what to call a group, if not its name."""
    ranked = sorted(groups.items(), key=lambda kv: (-sum(kv[1].values()), kv[0]))
    bars = [((labels or {}).get(label, label), counter) for label, counter in ranked[:TOP]]
    rest: Counter[str] = Counter()
    for _, counter in ranked[TOP:]:
        rest.update(counter)
    if rest:
        bars.append((f"{len(ranked) - TOP} others", rest))
    most = max((sum(counter.values()) for _, counter in bars), default=0)
    drawn = []
    for label, counter in bars:
        x = 0.0
        pieces = []
        for verdict in VERDICTS:
            if counter[verdict]:
                width = 100 * counter[verdict] / most
                pieces.append({"verdict": verdict, "tone": TONES[verdict],
                               "n": counter[verdict], "x": round(x, 2),
                               "width": round(width, 2)})
                x += width
        short = label if len(label) <= 56 else "\u2026" + label[-55:]
        drawn.append({"label": label, "short": short, "total": sum(counter.values()),
                      "pieces": pieces})
    return {"title": title, "bars": drawn, "groups": len(ranked)}


def _hash(text: str) -> str:
    digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    return f"'sha256-{digest}'"


def _asset(name: str) -> str:
    return (resources.files("webhook.cli.formats") / "templates" / name).read_text("utf-8")


_ENVIRONMENT: jinja2.Environment | None = None


def _environment() -> jinja2.Environment:
    global _ENVIRONMENT
    if _ENVIRONMENT is None:
        _ENVIRONMENT = jinja2.Environment(
            loader=jinja2.PackageLoader("webhook.cli.formats", "templates"),
            autoescape=True, trim_blocks=True, lstrip_blocks=True,
            undefined=jinja2.StrictUndefined)
        _ENVIRONMENT.filters["text"] = text
    return _ENVIRONMENT


def text(value: object) -> Markup:
    """`value` escaped for text between tags, where only `&`, `<` and `>` mean anything: the
    table's thousands of messages and patches are full of quotes, which autoescaping writes
    as `&#39;` and `&#34;`. Never for an attribute's value (autoescaping does those)."""
    return Markup(str(value).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))

