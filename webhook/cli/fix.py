"""`quickq-guard check --fix [--in-place]`: apply the mutate policies' patches to manifests.

Files are edited as round-trip YAML (ruamel.yaml), so comments, key order, quoting and
indentation survive; only the patched fields are new. What a patch cannot fix (an enforced
validate failure) is reported on stderr with where it is and what to change, and input that is
not a Kubernetes object is refused rather than printed back.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError
from ruamel.yaml.util import load_yaml_guess_indent

from webhook.cli.exits import EXIT_ERROR, EXIT_FAILED, EXIT_OK, CliError, error, hint, note
from webhook.cli.judge import (
    input_claims,
    input_train_jobs,
    is_object,
    judge,
    kustomize_skip,
    manifest_patch,
)
from webhook.engine.patch import PatchError, apply_in_place
from webhook.engine.policy import PolicySet
from webhook.engine.review import Review
from webhook.manifests import Source, manifest_sources, read_source, read_source_bytes


@dataclass(slots=True)
class Fixed:
    """One file after --fix: its new text (None when it must not be written)."""

    name: str
    text: str | None
    changed: bool = False
    objects: int = 0
    errors: list[str] = field(default_factory=list)
    unfixed: list[str] = field(default_factory=list)


def fix(args: argparse.Namespace, policies: PolicySet) -> int:
    if args.in_place and "-" in args.paths:
        raise CliError("--in-place cannot write back to stdin: drop --in-place to print the "
                       "fixed manifests")
    sources = manifest_sources(args.paths, args.exclude, args.skip_non_manifests)
    several = len(sources) > 1
    # The DRA claims of the files (stdin is read once, when it is fixed): a pod consuming a
    # GPU claim gets its toleration as check says.
    files = [[source for source in sources if source.name != "-"]]
    review = Review(claims=input_claims(files, None), train_jobs=input_train_jobs(files, None))
    code, objects = EXIT_OK, 0
    for source in sources:
        if source.walked and (why := kustomize_skip(source.name)):
            # A patch is no object to fix (check skips it too): printed among the fixed
            # manifests, it would be applied as a whole object.
            if source.start == 0 and args.verbose and not args.quiet:
                note(f"skipped {source.name}: {why}")
            continue
        done = fix_source(source, policies, review)
        objects += done.objects
        for line in done.errors:
            error(line)
        for line in done.unfixed:
            print(f"quickq-guard: cannot fix: {line}", file=sys.stderr)
        if done.errors:
            code = EXIT_ERROR
            if source.walked and not done.objects and not args.quiet:
                note(f"{done.name}: nothing written")
            continue
        if done.unfixed and code == EXIT_OK:
            code = EXIT_FAILED
        if done.text is None:
            continue
        if args.in_place:
            if done.changed:
                write_atomically(Path(done.name), done.text)
                print(f"quickq-guard: fixed {done.name}", file=sys.stderr)
            continue
        if several:
            sys.stdout.write(f"---\n# Source: {done.name}\n")
        sys.stdout.write(done.text)
    if not objects and code == EXIT_OK and not args.allow_empty:
        error("no Kubernetes object found; pass --allow-empty if no object is expected")
        return EXIT_ERROR
    return code


def fix_source(source: Source, policies: PolicySet, review: Review | None = None) -> Fixed:
    """The fixed text of one file (or stdin), and what could not be fixed, for the run's
    `review` (the DRA claims of its files)."""
    name = "<stdin>" if source.name == "-" else source.name
    done = Fixed(name, None)
    if not source.exists:
        done.errors.append(f"{name}: no such file or directory; check the path")
        return done
    try:
        data = sys.stdin.buffer.read() if source.name == "-" else read_source_bytes(source)
    except OSError as problem:
        done.errors.append(f"{name}: cannot read: {problem.strerror}; check the file's "
                           "permissions")
        return done
    documents = list(read_source(source, data))
    template = b"{{" in data
    for document in documents:
        where = f"{name}:{document.line}:{document.column}"
        if document.error:
            done.errors.append(f"{where}: {document.error}; {hint(document.error, template)}")
        elif not is_object(document.obj):
            done.errors.append(f"{where}: not a Kubernetes object (no apiVersion and kind); "
                               "--fix only rewrites manifests")
    if done.errors:
        if source.walked and not any(is_object(d.obj) for d in documents):
            done.errors = []  # a directory's values.yaml or schema: skipped, not refused
        return done
    text = data.decode("utf-8")
    chunks = _chunks(text)
    by_line: dict[int, tuple[_Chunk, Any]] = {}
    for chunk in chunks:
        try:
            chunk.yaml, chunk.nodes = _round_trip(chunk.text)
        except YAMLError as problem:
            done.errors.append(f"{name}: cannot be edited as YAML: {problem}")
            return done
        for line, node in _nodes_by_line(chunk.nodes).items():
            by_line[chunk.line + line - 1] = (chunk, node)
    for document in documents:
        done.objects += 1
        # Judged as applied, as check judges it; the file gets what the policies add and
        # none of what the API server defaults (manifest_patch).
        decision = judge(document, policies, review)
        where = f"{name}:{document.line}:{document.column} {decision.resource}"
        if decision.outcome == "error":
            reason = next(r.reason for r in decision.results if r.status == "error")
            done.errors.append(f"{where}: {reason}; {hint(reason)}")
            continue
        for result in decision.results:
            for finding in result.findings:
                if decision.verdict(result, finding) == "deny":
                    done.unfixed.append(f"{where}: [{result.policy}] {finding.message} "
                                        f"(field: {finding.path})")
        if not decision.patch:
            continue
        found = by_line.get(document.line)
        if found is None:
            done.errors.append(f"{where}: cannot find this object again to edit it")
            continue
        try:
            apply_in_place(found[1], manifest_patch(document.obj, decision, policies, review))
        except PatchError as error:
            done.errors.append(f"{where}: cannot apply the patch: {error}")
            continue
        found[0].changed = done.changed = True
    if done.errors:
        return done
    done.text = "".join(chunk.written() for chunk in chunks) if done.changed else text
    return done


@dataclass(slots=True)
class _Chunk:
    """The text between two `---` lines of a file (the lines themselves are kept apart), from
    line `line`: only a chunk whose object is patched is written anew, so a licence header,
    other documents and their own indentation stay byte for byte."""

    marker: str
    text: str
    line: int
    yaml: YAML | None = None
    nodes: list[Any] = field(default_factory=list)
    changed: bool = False

    def written(self) -> str:
        if not self.changed or self.yaml is None:
            return self.marker + self.text
        out = io.StringIO()
        self.yaml.dump_all(self.nodes, out)
        return self.marker + out.getvalue()


def _chunks(text: str) -> list[_Chunk]:
    """The file cut at each line that is only a document start (`---`, maybe a comment)."""
    chunks: list[_Chunk] = []
    marker, start = "", 1
    lines: list[str] = []
    for number, line in enumerate(text.splitlines(keepends=True), 1):
        if DOCUMENT_START.match(line):
            chunks.append(_Chunk(marker, "".join(lines), start))
            marker, lines, start = line, [], number + 1
        else:
            lines.append(line)
    chunks.append(_Chunk(marker, "".join(lines), start))
    return chunks


DOCUMENT_START = re.compile(r"---[ \t]*(#.*)?\r?\n?$")


def _round_trip(text: str) -> tuple[YAML, list[Any]]:
    """The documents as ruamel.yaml's round-trip nodes, and a YAML that writes them back with
    the file's own indentation."""
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096  # never re-wrap a long line
    first = text.split("\n---", 1)[0]
    try:
        _, sequence, offset = load_yaml_guess_indent(first)
    except YAMLError:
        sequence, offset = None, None
    mapping = _mapping_indent(first)
    yaml.indent(mapping=mapping, sequence=sequence or mapping, offset=offset or 0)
    return yaml, list(yaml.load_all(text))


def _mapping_indent(text: str) -> int:
    """How far a nested mapping is indented in this file (ruamel.yaml guesses sequences
    only): the first `key:` line followed by a deeper key."""
    lines = [line for line in text.splitlines() if line.strip() and not line.lstrip()
             .startswith("#")]
    for above, below in pairwise(lines):
        if above.rstrip().endswith(":") and not below.lstrip().startswith("-"):
            step = (len(below) - len(below.lstrip())) - (len(above) - len(above.lstrip()))
            if step > 0:
                return step
    return 2


def _nodes_by_line(nodes: Sequence[Any]) -> dict[int, Any]:
    """Each object's round-trip node by the line it starts on (List items too)."""
    found: dict[int, Any] = {}
    for node in nodes:
        if not isinstance(node, CommentedMap):
            continue
        found[node.lc.line + 1] = node
        items = node.get("items")
        if isinstance(items, CommentedSeq) and str(node.get("kind", "")).endswith("List"):
            for item in items:
                if isinstance(item, CommentedMap):
                    found[item.lc.line + 1] = item
    return found


def write_atomically(path: Path, text: str) -> None:
    """Write beside the file, then rename over it: the original survives any failure."""
    mode = path.stat().st_mode & 0o7777
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                         suffix=".tmp")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
