"""The `quickq-guard` command: check, policies, lint, serve, certs.

Exit codes: 0 when nothing enforced fails, 1 when something would be denied, 2 on usage,
policy or parse errors.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import json
import math
import multiprocessing as mp
import os
import re
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import orjson  # writes the JSON report ~20x faster than json (see dumps_json)
import yaml

from webhook.engine.evaluate import error_decision, evaluate
from webhook.engine.policy import PolicyError, PolicySet, load_config, load_policies
from webhook.engine.results import Decision, Resource, Result
from webhook.engine.workload import UNKNOWN_KIND
from webhook.manifests import Document, manifest_sources, read_paths, read_source

EXIT_OK, EXIT_DENIED, EXIT_ERROR = 0, 1, 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        return int(args.command(args))
    except PolicyError as error:
        print(f"quickq-guard: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `quickq-guard check ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="quickq-guard",
        description="Kubernetes admission guardrails for GPU inference and training workloads.")
    parser.add_argument("--version", action="version", version="quickq-guard 0.1.0")
    commands = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    _check_parser(commands)
    _policies_parser(commands)
    _lint_parser(commands)
    _serve_parser(commands)
    _certs_parser(commands)
    return parser


def _policy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--policies", metavar="DIR",
                        help="directory of policy files (default: the shipped policies/)")
    parser.add_argument("--config", metavar="FILE",
                        help="global config: mode, exclusions, per-policy overrides")


def _check_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "check", help="judge manifests offline, as the webhook would at kubectl apply",
        description="Judge YAML/JSON manifests (files, directories, or - for stdin) with the "
                    "same engine the webhook runs.")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="file, directory or -")
    _policy_options(parser)
    parser.add_argument("--output", "-o", choices=("table", "json"), default="table")
    parser.add_argument("--fix", action="store_true",
                        help="print the manifests with the mutate policies' patches applied")
    parser.add_argument("--jobs", "-j", type=int, default=0, metavar="N",
                        help="processes to read and judge files with (default: one per CPU "
                             f"when there are {PARALLEL_MIN_FILES} files or more)")
    parser.set_defaults(command=check)


def _policies_parser(commands: Any) -> None:
    parser = commands.add_parser("policies", help="list the loaded policies")
    _policy_options(parser)
    parser.set_defaults(command=list_policies)


def _lint_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "lint", help="validate NodeTemplates against the NodeTemplate schema",
        description="Validate QuickQ NodeTemplates (fields, types, resource units).")
    parser.add_argument("paths", nargs="+", metavar="FILE", help="file, directory or -")
    parser.add_argument("--schema", action="store_true",
                        help="print the NodeTemplate JSON Schema instead")
    parser.set_defaults(command=lint)


def _serve_parser(commands: Any) -> None:
    parser = commands.add_parser("serve", help="run the admission webhook over TLS")
    _policy_options(parser)
    parser.add_argument("--cert", default="certs/tls.crt", help="serving certificate (PEM)")
    parser.add_argument("--key", default="certs/tls.key", help="serving key (PEM)")
    parser.add_argument("--host", default="0.0.0.0")
    parser.add_argument("--port", type=int, default=8443)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--mode", choices=("enforce", "dry-run"),
                        help="override the config's mode")
    parser.add_argument("--self-signed", action="store_true",
                        help="create a CA and serving certificate under certs/ first "
                             "(the default when the certificate does not exist)")
    parser.add_argument("--client-ca", metavar="FILE",
                        help="require client certificates signed by this CA")
    parser.set_defaults(command=_serve)


def _certs_parser(commands: Any) -> None:
    parser = commands.add_parser("certs", help="create a CA and a serving certificate")
    parser.add_argument("--service", default="quickq-guard")
    parser.add_argument("--namespace", default="quickq-guard")
    parser.add_argument("--out", default="certs", metavar="DIR")
    parser.add_argument("--days", type=int, default=365)
    parser.set_defaults(command=_certs)


def _serve(args: argparse.Namespace) -> int:
    from webhook.server import serve as server

    return int(server.run(args))


def _certs(args: argparse.Namespace) -> int:
    from webhook.server import certs

    return int(certs.run(args))


def _load(args: argparse.Namespace) -> PolicySet:
    return load_policies(args.policies, load_config(args.config))


def check(args: argparse.Namespace) -> int:
    policies = _load(args)
    if args.fix:
        documents = list(read_paths(args.paths))
        decisions = [_judge(document, policies) for document in documents]
        _print_fixed(documents, decisions, sys.stdout)
        return exit_code(decisions)
    color = args.output == "table" and sys.stdout.isatty() and "NO_COLOR" not in os.environ
    parts = judge_paths(args.paths, policies, args.jobs, _Render(args.output, color))
    summary = _empty_summary()
    for part in parts:
        for key, count in part.summary.items():
            summary[key] += count
    if args.output == "json":
        sys.stdout.write(_join_json(summary, [part.text for part in parts]))
        sys.stdout.write("\n")
    else:
        for part in parts:
            sys.stdout.write(part.text)
        sys.stdout.write(_summary_line(summary, sum(part.denied for part in parts)))
    codes = {part.code for part in parts}
    return EXIT_ERROR if EXIT_ERROR in codes else EXIT_DENIED if EXIT_DENIED in codes else EXIT_OK


@dataclass(frozen=True, slots=True)
class _Render:
    """How a slice of the decisions is turned into output, in whichever process judged it."""

    output: str  # table | json
    color: bool


@dataclass(frozen=True, slots=True)
class _Part:
    """The output of a slice of the decisions: the text, and what the summary needs."""

    text: str  # table lines, or the JSON report's result objects (see _join_json)
    summary: dict[str, int]
    denied: int
    code: int


def judge_paths(paths: Sequence[str], policies: PolicySet, jobs: int,
                render: _Render) -> list[_Part]:
    """Read, judge and render every document under the paths, in `read_paths` order.

    With many files and more than one CPU, worker processes (forked, so they share the loaded
    policies) each take consecutive slices of the files and send back rendered text; the
    slices come back in order, so the output is byte for byte the one of a single process.
    jobs: 0 = one process per CPU, 1 = no workers.
    """
    sources = manifest_sources(paths)
    workers = min(jobs if jobs > 0 else _cpus(), -(-len(sources) // PARALLEL_CHUNK))
    if (workers <= 1 or "-" in sources or "fork" not in mp.get_all_start_methods()
            or (jobs <= 0 and len(sources) < PARALLEL_MIN_FILES)):
        return [_judge_sources(sources, policies, render)]
    chunks = [sources[i:i + PARALLEL_CHUNK] for i in range(0, len(sources), PARALLEL_CHUNK)]
    global _worker_job
    _worker_job = (policies, render)
    try:
        with mp.get_context("fork").Pool(workers) as pool:
            return list(pool.imap(_judge_in_worker, chunks))
    finally:
        _worker_job = None


# Below this many files one process is faster than starting workers.
PARALLEL_MIN_FILES = 400
PARALLEL_CHUNK = 100
_worker_job: tuple[PolicySet, _Render] | None = None  # set in the parent before the fork


def _judge_in_worker(sources: list[str | Path]) -> _Part:
    assert _worker_job is not None
    return _judge_sources(sources, *_worker_job)


def _judge_sources(sources: list[str | Path], policies: PolicySet, render: _Render) -> _Part:
    with _without_cyclic_gc():
        decisions = [_judge(document, policies) for source in sources
                     for document in read_source(source)]
        summary, rows = _report(decisions, rows=render.output == "json")
        if render.output == "json":
            text = _json_rows(rows)
        else:
            out = io.StringIO()
            _print_lines(decisions, out, render.color)
            text = out.getvalue()
        return _Part(text, summary, sum(1 for d in decisions if not d.allowed),
                     exit_code(decisions))


@contextlib.contextmanager
def _without_cyclic_gc() -> Iterator[None]:
    """Reading and judging allocate millions of dicts and lists that reference counting
    frees, and none that form cycles; the cyclic collector would still rescan the growing
    heap over and over: a third of the CLI's time on a large corpus. Off while judging."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        return os.cpu_count() or 1


def dumps_json(value: Any) -> str:
    """`json.dumps(value, indent=2, default=str)`, byte for byte, about 20x faster.

    orjson writes UTF-8 where json escapes (\\u00e9), so non-ASCII is escaped back; the few
    values orjson writes differently (NaN and infinities, integers beyond 64 bits, non-string
    keys) can only come from user data in patches, and any of them sends the whole document
    through json.
    """
    if not _orjson_safe(value):
        return json.dumps(value, indent=2, default=str)
    return _orjson_dumps(value)


def _orjson_dumps(value: Any) -> str:
    """dumps_json for a value already known to be _orjson_safe."""
    try:
        text: str = orjson.dumps(value, default=str, option=orjson.OPT_INDENT_2).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value, indent=2, default=str)
    if not text.isascii():
        text = _NON_ASCII.sub(lambda m: json.dumps(m.group())[1:-1], text)
    return text


_NON_ASCII = re.compile(r"[^\x00-\x7f]")
_INT64 = (-(2**63), 2**64 - 1)


def _orjson_safe(value: Any) -> bool:
    """False when orjson would write the value differently from json (see dumps_json)."""
    if isinstance(value, dict):
        return all(isinstance(k, str) and _orjson_safe(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return all(_orjson_safe(item) for item in value)
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int):
        return _INT64[0] <= value <= _INT64[1]
    return True


def _judge(document: Document, policies: PolicySet) -> Decision:
    if document.error:
        return _read_error(document)
    return evaluate(document.obj, policies, source=document.source)


def _read_error(document: Document) -> Decision:
    resource = Resource("", "", "", "", document.source)
    return error_decision(resource, document.error, f"{document.source}: {document.error}",
                          dry_run=False)


def exit_code(decisions: Iterable[Decision]) -> int:
    code = EXIT_OK
    for decision in decisions:
        if decision.outcome == "error":
            return EXIT_ERROR
        if decision.outcome == "denied":
            code = EXIT_DENIED
    return code


def report(decisions: Sequence[Decision]) -> dict[str, Any]:
    """The JSON output contract: a summary and one result per resource x policy."""
    summary, results = _report(decisions)
    return {"summary": summary, "results": results}


def _empty_summary() -> dict[str, int]:
    return {"resources": 0, "pass": 0, "fail": 0, "warn": 0, "patch": 0, "skip": 0, "error": 0}


def _report(decisions: Sequence[Decision],
            rows: bool = True) -> tuple[dict[str, int], list[dict[str, Any]]]:
    summary = _empty_summary()
    summary["resources"] = len(decisions)
    results: list[dict[str, Any]] = []
    for decision in decisions:
        resource = decision.resource
        described = {"apiVersion": resource.api_version, "kind": resource.kind,
                     "namespace": resource.namespace, "name": resource.name,
                     "source": resource.source}
        for result in decision.results:
            summary[_summary_key(result)] += 1
            if not rows:
                continue
            findings = result.findings
            if not findings:  # most results: pass and skip (as Result.message/patch say)
                results.append({
                    "resource": dict(described), "policy": result.policy,
                    "action": result.action, "result": result.status,
                    "message": result.reason, "path": "", "patch": [], "findings": []})
                continue
            results.append({
                "resource": dict(described),
                "policy": result.policy,
                "action": result.action,
                "result": result.status,
                "message": result.message,
                "path": findings[0].path,
                "patch": result.patch,
                "findings": [{"container": f.container, "path": f.path, "message": f.message,
                              "preexisting": f.preexisting} for f in findings],
            })
    return summary, results


def _json_rows(rows: list[dict[str, Any]]) -> str:
    """The result objects as they sit inside the report's "results" list (indented by 4)."""
    if not rows:
        return ""
    # Only a row's patch holds values from the manifests; the rest is strings and booleans.
    if _orjson_safe([row["patch"] for row in rows if row["patch"]]):
        text = _orjson_dumps(rows)
    else:
        text = dumps_json(rows)
    # text is "[\n  {...},\n  {...}\n]", and JSON strings hold no raw newline.
    return "  " + text[2:-2].replace("\n", "\n  ")


def _join_json(summary: dict[str, int], parts: Sequence[str]) -> str:
    """`dumps_json(report(...))` assembled from _json_rows parts."""
    head = dumps_json({"summary": summary, "results": []})
    body = ",\n".join(part for part in parts if part)
    if not body:
        return head
    assert head.endswith("[]\n}")
    return f"{head[:-4]}[\n{body}\n  ]\n}}"


def _summary_key(result: Result) -> str:
    if result.status == "fail" and result.action != "enforce":
        return "warn"
    return result.status


_LABELS = {"deny": ("DENY", "31"), "warn": ("WARN", "33"), "audit": ("AUDIT", "36"),
           "patch": ("PATCH", "32"), "error": ("ERROR", "31;1")}


def _verdict(decision: Decision, result: Result) -> str:
    if result.status == "error":
        return "error"
    if result.status == "patch":
        return "audit" if result.action == "audit" else "patch" if result.action == "enforce" \
            else "warn"
    if result.action in ("warn", "audit"):
        return result.action
    return "deny" if decision.allowed is False else "warn"


def _print_table(decisions: Sequence[Decision], out: TextIO, color: bool) -> None:
    """One line per finding, then a summary line."""
    _print_lines(decisions, out, color)
    out.write(_summary_line(report(decisions)["summary"],
                            sum(1 for d in decisions if not d.allowed)))


def _summary_line(summary: dict[str, int], denied: int) -> str:
    return (f"{summary['resources']} resources, {denied} denied: "
            + ", ".join(f"{summary[k]} {k}" for k in
                        ("pass", "fail", "warn", "patch", "skip", "error")) + "\n")


def _print_lines(decisions: Sequence[Decision], out: TextIO, color: bool) -> None:
    def paint(text: str, code: str) -> str:
        return f"\033[{code}m{text}\033[0m" if color else text

    for decision in decisions:
        results = decision.results
        if results and UNKNOWN_KIND in results[0].reason:  # a typo in `kind`: say so
            out.write(f"{paint('SKIP ', '33')}  {'-':<26} {decision.resource}  "
                      f"{results[0].reason}  [{decision.resource.source}]\n")
            continue
        for result in results:
            if result.status not in ("fail", "patch", "error"):
                continue
            verdict = _verdict(decision, result)
            label, code = _LABELS[verdict]
            # A reason next to findings is a note on all of them (the API server refuses).
            note = f" ({result.reason})" if result.findings and result.reason else ""
            lines = [f.message + (" (existing)" if f.preexisting else "") + note
                     for f in result.findings] or [result.reason]
            for line in lines:
                out.write(f"{paint(f'{label:<5}', code)}  {result.policy or '-':<26} "
                          f"{decision.resource}  {line}  [{decision.resource.source}]\n")


def _print_fixed(documents: Sequence[Document], decisions: Sequence[Decision],
                 out: TextIO) -> None:
    """Every readable manifest, with its patch applied where a mutate policy has one."""
    objects = [decision.patched if decision.patched is not None else document.obj
               for document, decision in zip(documents, decisions, strict=True)
               if not document.error]
    if objects:
        out.write(yaml.dump_all(objects, Dumper=_PlainDumper, sort_keys=False))


class _PlainDumper(yaml.SafeDumper):
    """A startup probe shares its handler with the liveness probe it was copied from; write
    it out twice rather than as a YAML anchor and alias, as a person would."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def list_policies(args: argparse.Namespace) -> int:
    policies = _load(args)
    print(f"{'ID':<28}{'TYPE':<10}{'ACTION':<9}DESCRIPTION   (mode: {policies.config.mode})")
    for policy in policies.policies:
        print(f"{policy.id:<28}{policy.type:<10}{policy.action:<9}{policy.description}")
    return EXIT_OK


def lint(args: argparse.Namespace) -> int:
    from webhook.engine import nodetemplate

    if args.schema:
        sys.stdout.write(nodetemplate.schema_text())
        return EXIT_OK
    code, checked = EXIT_OK, 0
    for document in read_paths(args.paths):
        if document.error:
            print(f"{document.source}: {document.error}")
            code = EXIT_ERROR
            continue
        obj = document.obj
        if not (isinstance(obj, dict) and obj.get("kind") == "NodeTemplate"):
            continue
        checked += 1
        name = (obj.get("metadata") or {}).get("name", "") if isinstance(
            obj.get("metadata"), dict) else ""
        problems = nodetemplate.lint(obj)
        for problem in problems:
            print(f"{document.source}: NodeTemplate {name}: {problem}")
        if problems and code == EXIT_OK:
            code = EXIT_DENIED
    print(f"{checked} NodeTemplate(s) checked" + ("" if code == EXIT_OK else ", problems found"),
          file=sys.stderr)
    return code


