"""Policy test suites: the PolicyTest file format, and running its cases through evaluate().

Each case passes or fails; a test file that cannot be read is an error (exit 2).
"""

from __future__ import annotations

import argparse
import json as jsonlib
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from webhook.cli.check import load
from webhook.cli.exits import EXIT_ERROR, EXIT_FAILED, EXIT_OK, CliError, error, note
from webhook.cli.formats.github import command_line
from webhook.cli.formats.junit import attr, text
from webhook.cli.judge import is_object, manifest_patch
from webhook.engine.claims import claims_from
from webhook.engine.decode import decode
from webhook.engine.evaluate import evaluate
from webhook.engine.hidden import redacted_at
from webhook.engine.patch import apply_patch, difference, split_pointer
from webhook.engine.policy import Config, PolicyError, PolicySet
from webhook.engine.results import Decision
from webhook.engine.review import Review
from webhook.loader import load_config, load_policies
from webhook.manifests import Source, read_named, read_regular, read_source, read_text, walk

KIND = "PolicyTest"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourceSpec(_Model):
    """A resource to judge: a file (relative to the test file) or an inline object."""

    file: str | None = None
    object: dict[str, Any] | None = None
    operation: Literal["CREATE", "UPDATE"] = "CREATE"
    oldFile: str | None = None
    oldObject: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> ResourceSpec:
        if (self.file is None) == (self.object is None):
            raise ValueError("give either file or object")
        if self.operation == "UPDATE" and (self.oldFile is None) == (self.oldObject is None):
            raise ValueError("an UPDATE needs oldFile or oldObject")
        return self


class CaseSpec(_Model):
    """What one policy says about one resource (any field left out is not checked)."""

    resource: str  # Kind/namespace/name, Kind/name or name
    policy: str | None = None
    result: Literal["pass", "fail", "patch", "skip", "error"] | None = None
    outcome: Literal["allowed", "denied", "patched", "would-deny", "would-patch",
                     "error"] | None = None
    message: str | None = None  # a part of the message
    paths: list[str] | None = None  # the fields the findings name, in any order
    patched: dict[str, Any] | None = None  # the whole resource after the mutate policies
    patchedFile: str | None = None

    @model_validator(mode="after")
    def _something_checked(self) -> CaseSpec:
        if self.policy is None and (self.result or self.message or self.paths):
            raise ValueError("result, message and paths are about a policy: name it")
        return self


API_VERSION = "quickq.io/v1"  # the project's one API group
OLD_API_VERSION = "quickq-guard/v1"  # still read, with a note


class TestFile(_Model):
    apiVersion: Literal["quickq.io/v1", "quickq-guard/v1"]
    kind: Literal["PolicyTest"]
    name: str
    description: str = ""
    policyDir: str | None = None  # relative to the test file; default: --policies
    policies: list[str] = Field(default_factory=list)  # ids; default: every loaded policy
    config: dict[str, Any] | None = None  # a global config, inline (mode: dry-run, ...)
    resources: list[ResourceSpec]
    cases: list[CaseSpec]


@dataclass(frozen=True, slots=True)
class Case:
    """A case's verdict: where it is written, and what went wrong ('' when it passed)."""

    file: str
    line: int
    suite: str
    name: str
    problem: str


def run(args: argparse.Namespace) -> int:
    files = _test_files(args.paths)
    if not files:
        raise CliError(f"no PolicyTest file found in {', '.join(args.paths)} "
                       f"(a YAML file with apiVersion: {API_VERSION} and kind: PolicyTest)")
    cases: list[Case] = []
    code = EXIT_OK
    for path in files:
        try:
            cases += run_file(path, args)
        except (CliError, PolicyError) as problem:
            error(str(problem))
            code = EXIT_ERROR
    failed = sum(1 for case in cases if case.problem)
    render = {"table": _table, "json": _json, "junit": _junit, "github": _github}[args.output]
    sys.stdout.write(render(cases, args.quiet))
    if code == EXIT_OK and failed:
        code = EXIT_FAILED
    return code


def _test_files(paths: Sequence[str]) -> list[Path]:
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found += [p for p in walk(path) if _is_test_file(p)]
        elif path.exists():
            found.append(path)
        else:
            raise CliError(f"{given}: no such file or directory; check the path")
    return found


def _is_test_file(path: Path) -> bool:
    try:
        head = read_regular(str(path), 0, 4096).decode("utf-8", "replace")
    except OSError:
        return False
    return f"kind: {KIND}" in head


def run_file(path: Path, args: argparse.Namespace) -> list[Case]:
    """The cases of one test file, judged."""
    try:
        text = read_named(str(path)).decode("utf-8")
    except OSError as unread:
        raise CliError(f"{path}: cannot read: {unread.strerror}") from None
    documents = list(read_text(text, str(path)))
    if len(documents) != 1 or documents[0].error or not isinstance(documents[0].obj, dict):
        problem = documents[0].error if documents and documents[0].error else \
            "expected one PolicyTest document"
        raise CliError(f"{path}: {problem}")
    try:
        spec = TestFile.model_validate(documents[0].obj)
    except ValidationError as problem:
        raise CliError(f"{path}: not a valid PolicyTest: {_explain(problem)}") from None
    if spec.apiVersion == OLD_API_VERSION:
        note(f"{path}: apiVersion {OLD_API_VERSION} is deprecated; write {API_VERSION}, the "
             "API group of all of quickq-guard's own kinds")
    policies = _policies(spec, path, args)
    judged = _judge(spec, path, policies)
    lines = _case_lines(text)
    cases: list[Case] = []
    for index, case in enumerate(spec.cases):
        name = f"{case.resource} {case.policy or '(decision)'}"
        line = lines[index] if index < len(lines) else 1
        cases.append(Case(str(path), line, spec.name, name, _check(case, judged, path)))
    return cases


def _policies(spec: TestFile, path: Path, args: argparse.Namespace) -> PolicySet:
    if spec.config is not None:
        try:
            config = Config.model_validate(spec.config)
        except ValidationError as problem:
            raise CliError(f"{path}: config: {_explain(problem)}") from None
    else:
        config = load_config(args.config)
    directory = path.parent / spec.policyDir if spec.policyDir else args.policies
    loaded = load_policies(directory, config) if directory or spec.config is not None \
        else load(args)
    if not spec.policies:
        return loaded
    known = {policy.id: policy for policy in loaded.policies}
    unknown = [policy for policy in spec.policies if policy not in known]
    if unknown:
        raise CliError(f"{path}: policies: no loaded policy {', '.join(unknown)} "
                       f"(loaded: {', '.join(sorted(known))}); pass --policies DIR or set "
                       "policyDir")
    return PolicySet(tuple(known[policy] for policy in spec.policies), loaded.config)


@dataclass(frozen=True, slots=True)
class _Judged:
    obj: Any
    decision: Decision
    patched: Any  # the object written with what the policies add, as --fix writes it


def _explain(problem: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in problem.errors())


def _judge(spec: TestFile, path: Path, policies: PolicySet) -> dict[str, _Judged]:
    """Each resource's decision, by every name a case may use for it."""
    judged: dict[str, _Judged] = {}
    read = [(resource, _objects(resource.file, resource.object, path, number), number)
            for number, resource in enumerate(spec.resources, 1)]
    # The DRA claims a pod consumes resolve from the suite's own resources, as check's do.
    claims = claims_from(obj for _, objects, _ in read for obj, _ in objects)
    for resource, objects, number in read:
        for obj, source in objects:
            old = None
            if resource.operation == "UPDATE":
                [(old, _)] = _objects(resource.oldFile, resource.oldObject, path, number)
            # Judged as check judges it, the old object too; the patch for the resource as
            # written is worked out for it as written (manifest_patch).
            written = Review(operation=resource.operation, old_object=old, claims=claims,
                             source=source)
            decision = evaluate(decode(obj), policies, replace(written, old_object=decode(old)))
            kind, namespace, name = (decision.resource.kind, decision.resource.namespace,
                                     decision.resource.name)
            # The decision is on the object as applied; a case's expected resource is the
            # one written with what the policies add.
            patched = apply_patch(obj, manifest_patch(obj, decision, policies, written)) \
                if decision.patch else obj
            for key in (f"{kind}/{namespace}/{name}", f"{kind}/{name}", name):
                judged.setdefault(key, _Judged(obj, decision, patched))
    return judged


def _objects(file: str | None, inline: dict[str, Any] | None, path: Path,
             number: int) -> list[tuple[Any, str]]:
    if inline is not None:
        if not is_object(inline):
            raise CliError(f"{path}: resources[{number - 1}]: an object needs apiVersion "
                           "and kind")
        return [(inline, f"{path}:resources[{number - 1}]")]
    assert file is not None
    target = path.parent / file
    found = []
    for document in read_source(Source(str(target), exists=target.exists(), referenced=True)):
        if document.error:
            raise CliError(f"{path}: resources[{number - 1}]: {document.source}: "
                           f"{document.error}")
        found.append((document.obj, document.source))
    if not found:
        raise CliError(f"{path}: resources[{number - 1}]: {target} holds no object")
    return found


def _check(case: CaseSpec, judged: dict[str, _Judged], path: Path) -> str:
    found = judged.get(case.resource)
    if found is None:
        return (f"no resource {case.resource} among the test's resources (name them "
                f"Kind/namespace/name, Kind/name or name; have: "
                f"{', '.join(sorted(k for k in judged if k.count('/') == 2))})")
    decision = found.decision
    problems: list[str] = []
    if case.outcome and decision.outcome != case.outcome:
        problems.append(f"outcome: expected {case.outcome}, got {decision.outcome}")
    if case.policy is not None:
        result = next((r for r in decision.results if r.policy == case.policy), None)
        if result is None:
            return f"policy {case.policy} did not judge {case.resource}"
        if case.result and result.status != case.result:
            said = f" ({result.message})" if result.message else ""
            problems.append(f"result: expected {case.result}, got {result.status}{said}")
        if case.message and case.message not in result.message:
            problems.append(f"message: expected it to contain {case.message!r}, got "
                            f"{result.message!r}")
        found_paths = sorted(f.path for f in result.findings)
        if case.paths is not None and found_paths != sorted(case.paths):
            problems.append(f"paths: expected {sorted(case.paths)}, got {found_paths}")
    expected = case.patched
    if case.patchedFile:
        [(expected, _)] = _objects(case.patchedFile, None, path, 0)
    if expected is not None:
        actual = found.patched
        if actual != expected:
            # Shown as the webhook shows things: env values and secret-keyed values hidden.
            needed = [{**operation, "value": redacted_at(split_pointer(operation["path"]),
                                                         operation["value"])}
                      if "value" in operation else operation
                      for operation in difference(actual, expected)]
            problems.append("patched: differs from the expected resource; to get the expected "
                            f"one, the result would need {jsonlib.dumps(needed)}")
    return "; ".join(problems)


def _case_lines(text_: str) -> list[int]:
    """The line of each item of `cases:` in the test file."""
    try:
        node = yaml.compose(text_, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return []
    if not isinstance(node, yaml.MappingNode):
        return []
    for key, value in node.value:
        if key.value == "cases" and isinstance(value, yaml.SequenceNode):
            return [item.start_mark.line + 1 for item in value.value]
    return []


def _table(cases: list[Case], quiet: bool) -> str:
    lines = [f"{'FAIL' if case.problem else 'PASS':<5} {case.suite}: {case.name}"
             + (f"  [{case.file}:{case.line}]\n      {case.problem}" if case.problem else "")
             + "\n" for case in cases if case.problem or not quiet]
    return "".join(lines) + _summary(cases)


def _summary(cases: list[Case]) -> str:
    failed = sum(1 for case in cases if case.problem)
    return f"{len(cases) - failed} passed, {failed} failed\n"


def _json(cases: list[Case], quiet: bool) -> str:
    counts = Counter("fail" if case.problem else "pass" for case in cases)
    report = {"cases": [{"file": case.file, "line": case.line, "suite": case.suite,
                         "case": case.name, "result": "fail" if case.problem else "pass",
                         "problem": case.problem}
                        for case in cases if case.problem or not quiet],
              "summary": {"cases": len(cases), "pass": counts["pass"], "fail": counts["fail"]}}
    return jsonlib.dumps(report, indent=2) + "\n"


def _junit(cases: list[Case], quiet: bool) -> str:
    failed = sum(1 for case in cases if case.problem)
    numbers = f'tests="{len(cases)}" failures="{failed}" errors="0" skipped="0"'
    body = []
    for case in cases:
        if quiet and not case.problem:
            continue
        head = (f"    <testcase classname={attr(case.suite)} name={attr(case.name)} "
                f'file={attr(case.file)} line="{case.line}"')
        if case.problem:
            body.append(f'{head}>\n      <failure message={attr(case.problem)}>'
                        f"{text(case.problem)}</failure>\n    </testcase>\n")
        else:
            body.append(f"{head}/>\n")
    return ('<?xml version="1.0" encoding="UTF-8"?>\n'
            f'<testsuites name="quickq-guard test" {numbers}>\n'
            f'  <testsuite name="quickq-guard test" {numbers}>\n' + "".join(body)
            + "  </testsuite>\n</testsuites>\n")


def _github(cases: list[Case], quiet: bool) -> str:
    lines = [command_line("error", case.file, case.line, 1, f"{case.suite}: {case.name}",
                          case.problem) for case in cases if case.problem]
    return "".join(lines) + _summary(cases)
