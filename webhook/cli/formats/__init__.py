"""Output formats of `quickq-guard check` (and `test`): one module per format.

A format writes a head, then each task's verdicts as they are judged, then a tail with the
summary. `render` runs in whichever process judged the task and returns something picklable;
`write` and `finish` run in the parent, in input order.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from webhook.cli.judge import Judged
from webhook.engine.policy import PolicySet
from webhook.engine.results import Decision, Finding, Resource, Result
from webhook.engine.workload import api_group


@dataclass(frozen=True, slots=True)
class Options:
    color: bool = False  # the table only, on a terminal, never with NO_COLOR
    quiet: bool = False  # only what fails the run (see `failing`) and errors; no notes
    fail_on: str = "deny"
    show_skipped: bool = False  # the table: a line for each object not judged
    docs_url: str = ""  # where the docs site is served: SARIF rules link their policy's section
    made_by: str = "quickq-guard check -o html"  # the HTML page's footer: what wrote it


class Format:
    """The interface every format implements."""

    def __init__(self, out: TextIO, options: Options) -> None:
        self.out = out
        self.options = options

    def start(self, policies: PolicySet) -> None:
        """Write what comes before the results."""

    def render(self, judged: Sequence[Judged]) -> Any:
        raise NotImplementedError

    def write(self, rendered: Any) -> None:
        self.out.write(rendered)

    def write_bytes(self, data: bytes) -> None:
        """Write UTF-8 to the output: straight to the binary stream under it when there is
        one (stdout), which saves decoding and encoding again what may be gigabytes."""
        buffer = getattr(self.out, "buffer", None)
        if buffer is None:
            self.out.write(data.decode())
            return
        self.out.flush()
        buffer.write(data)

    def finish(self, counts: Counter[str]) -> None:
        """Write what comes after the results."""


def fails(verdict: str, fail_on: str) -> bool:
    """Whether a finding with this verdict (see Decision.verdict) is a failure under
    --fail-on."""
    if verdict == "deny":
        return True
    if fail_on == "warn":
        return verdict in ("warn", "would-deny")
    if fail_on == "audit":
        return verdict in ("warn", "would-deny", "audit")
    return False


def reported_results(decision: Decision) -> tuple[Result, ...]:
    """A decision's results as the JSON, JUnit and PolicyReport reports list them: an object
    not judged at all (a kind quickq-guard does not judge, an excluded namespace) is one
    `skip` result of no policy, saying why, rather than the same skip once per policy; a part
    of a judged object that is not judged (a KubeAI Model's resource profile, a
    podSpecPatch: a warning of no policy) is one more, after the policies' results."""
    if decision.skipped:
        return (Result(None, "validate", "", "skip", (), decision.skipped),)
    notes = decision.unjudged
    if not notes:
        return decision.results
    return (*decision.results, *(Result(None, "validate", "", "skip", (), note)
                                 for note in notes))


def failing(decision: Decision, result: Result, fail_on: str) -> bool:
    """Whether a policy's result fails the run under --fail-on (or is an error): what
    --quiet keeps."""
    if result.status == "error":
        return True
    return result.status == "fail" and any(
        fails(decision.verdict(result, finding), fail_on) for finding in result.findings)


@dataclass(frozen=True, slots=True)
class Annotation:
    """One thing a format that annotates lines (SARIF, GitHub) reports: an object that
    cannot be judged (verdict `error`, at its first refused field when there is one), or one
    finding of a failed validate policy."""

    item: Judged
    result: Result
    verdict: str  # the finding's (see Decision.verdict), or error
    message: str
    finding: Finding | None


def annotated(judged: Sequence[Judged], options: Options) -> Iterator[Annotation]:
    """What SARIF and GitHub output report, in order; --quiet keeps what fails the run and
    errors."""
    for item in judged:
        decision = item.decision
        for result in decision.results:
            if result.status == "error":
                problem = "; ".join(f.message for f in result.findings) or result.reason
                yield Annotation(item, result, "error", f"{decision.resource}: {problem}",
                                 next(iter(result.findings), None))
            elif result.status == "fail":
                for finding in result.findings:
                    verdict = decision.verdict(result, finding)
                    if options.quiet and not fails(verdict, options.fail_on):
                        continue
                    yield Annotation(item, result, verdict,
                                     f"{decision.resource}: {finding.message}", finding)


def resource_label(resource: Resource) -> str:
    """The object as a report line names it: `Kind name`, with the kind's API group when it
    is not one of Kubernetes' own (`Job.batch.volcano.sh train`, as kubectl writes it), so a
    Volcano Job is not taken for a batch/v1 Job."""
    group = api_group(resource.api_version)
    if not group or "." not in group or group.endswith(".k8s.io"):
        return str(resource)
    where = f"{resource.namespace}/{resource.name}" if resource.namespace else resource.name
    kind = f"{resource.kind}.{group}"
    return f"{kind} {where}" if where else kind


def location(judged: Judged, finding: Finding | None = None) -> str:
    """`file:line:column` of the field a finding names (see Document.field), or of the object,
    as editors and CI annotators read it."""
    document = judged.document
    if not document.line:
        return document.file or document.source
    line, column = document.field(finding.at) if finding else (document.line, document.column)
    if document.template:  # rendered by Helm or kustomize: the template, and where in the render
        return f"{document.template} (rendered {document.file}:{line}:{column})"
    return f"{document.file}:{line}:{column}"


def rendered_at(judged: Judged, finding: Finding | None = None) -> str:
    """`file:line:column` in the rendered stream of an object a template wrote."""
    document = judged.document
    line, column = document.field(finding.at) if finding and document.line else (
        document.line, document.column)
    return f"{document.file}:{line}:{column}"


def format_named(name: str) -> type[Format]:
    """The format called `name` (one of NAMES). Only its module is imported: a run writes one
    format, and the others' imports (XML for JUnit) would delay every run's start."""
    if name == "table":
        from webhook.cli.formats.table import Table
        return Table
    if name == "json":
        from webhook.cli.formats.json import Json
        return Json
    if name == "sarif":
        from webhook.cli.formats.sarif import Sarif
        return Sarif
    if name == "junit":
        from webhook.cli.formats.junit import JUnit
        return JUnit
    if name == "github":
        from webhook.cli.formats.github import GitHub
        return GitHub
    if name == "policyreport":
        from webhook.cli.formats.policyreport import PolicyReport
        return PolicyReport
    if name == "gitlab":
        from webhook.cli.formats.gitlab import GitLab
        return GitLab
    if name == "html":
        from webhook.cli.formats.html import Html
        return Html
    raise ValueError(f"no output format {name!r}: one of {', '.join(NAMES)}")


NAMES = ("table", "json", "sarif", "junit", "github", "gitlab", "policyreport", "html")


def render_all(name: str, judged: Sequence[Judged], policies: PolicySet,
               options: Options | None = None) -> str:
    """A whole report of some verdicts in one format, as a string (for scripts and tests)."""
    import io

    from webhook.cli.judge import count

    out = io.StringIO()
    writer = format_named(name)(out, options or Options())
    counts: Counter[str] = Counter()
    for item in judged:
        count(item.decision, counts)
    writer.start(policies)
    writer.write(writer.render(judged))
    writer.finish(counts)
    return out.getvalue()
