"""Reading manifests: YAML or JSON files, directories and streams, the way Kubernetes reads them.

kubectl turns YAML into JSON with YAML 1.1 rules (go-yaml v2): `yes`/`on`/`y` are booleans,
`0755` is octal, `1e3` is a number, duplicate keys are an error, anchors and merge keys work,
and timestamps stay strings. A document that cannot be read becomes an error for that
document alone; the others are still judged.
"""

from __future__ import annotations

import bisect
import errno
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from webhook.engine.patch import Path as FieldPath
from webhook.engine.yaml_limits import LimitError, check_node
from webhook.yaml11 import KubernetesLoader, problem
from webhook.yaml_events import EventReader, Fallback, Positions, Read

if TYPE_CHECKING:
    import pathspec

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Document:
    """One object read from a source, and where: `source` is `file:line` (its first line).

    `file`, `line` and `column` say the same for editors and CI annotations (1-based; 0 when
    unknown); `field()` says where a field of it is. An object that cannot be read has `error`
    instead of `obj`.
    """

    source: str
    obj: Any = None
    error: str = ""
    file: str = ""
    line: int = 0
    column: int = 0
    positions: Positions | None = field(default=None, repr=False, compare=False)
    # The file that wrote this object when it was rendered (Helm's `# Source:` comment above
    # it, kustomize's config.kubernetes.io/origin annotation), or "": findings are reported
    # there, with `file:line:column` of the rendered object beside them.
    template: str = ""

    def field(self, path: FieldPath) -> tuple[int, int]:
        """(line, column) of the field a finding names (Finding.at), or of its
        nearest parent in the source when the field is not there (a rule asks to add it); the
        object's own when the reader kept no positions (an object built in code)."""
        if self.positions is not None:
            found = self.positions.find(self.obj, path)
            if found is not None:
                return found
        return self.line, self.column


@dataclass(frozen=True, slots=True)
class Source:
    """One thing to read: a file, a byte range of a large one, stdin (`-`), or a missing path.

    `walked`: found by walking a directory, where a file that holds no Kubernetes object is
    skipped with a note instead of being an error. `referenced`: named by a file (a test
    suite's resource), not by the user. Either is read only if it is a regular file (see
    read_regular). `start`/`end`/`line`: the byte range and the line it starts on, when a
    large file is split between processes.
    """

    name: str
    exists: bool = True
    walked: bool = False
    referenced: bool = False
    start: int = 0
    end: int = -1
    line: int = 1

    @property
    def whole(self) -> bool:
        return self.start == 0 and self.end == -1


def read_paths(paths: Iterable[str], exclude: Sequence[str] = ()) -> Iterator[Document]:
    """The documents of files, directories (see `manifest_sources`) and `-` (stdin)."""
    for source in manifest_sources(paths, exclude):
        yield from read_source(source)


def manifest_sources(paths: Iterable[str], exclude: Sequence[str] = (),
                     named_as_walked: bool = False) -> list[Source]:
    """What `read_paths` reads, in order: `-`, each file named, each directory's manifest files
    (sorted; hidden folders and files, `vendor/`, `node_modules/`, what `.gitignore` ignores
    and the `exclude` globs are left out), or the path as given when it does not exist. A
    file named is left out too when an `exclude` glob matches its path relative to the
    working directory: pre-commit names every file it sees, so a glob that only worked in
    walks would not work there.
    `named_as_walked`: a file named is read as a walk finds it (one with no Kubernetes
    object skipped with a note), for pre-commit."""
    sources: list[Source] = []
    named_excluded = _gitignore_spec(exclude) if exclude else None
    for given in paths:
        if given == "-":
            sources.append(Source("-"))
            continue
        path = Path(given)
        if path.is_dir():
            sources.extend(Source(name, walked=True) for name in _walk(path, exclude))
        elif named_excluded is None or not named_excluded.match_file(_from_cwd(path)):
            sources.append(Source(str(path), exists=path.exists(),
                                  walked=named_as_walked and path.is_file()))
    return sources


def _from_cwd(path: Path) -> str:
    """A named file's path relative to the working directory, `/`-separated, as a glob in
    .gitignore syntax is matched against."""
    relative = os.path.relpath(os.path.abspath(path))
    return relative.replace(os.sep, "/")


# Folders that hold other projects' code in a checkout (Go's vendored modules, npm's
# packages): their test manifests are not this project's. Walked when named themselves.
OTHERS_CODE = frozenset({"vendor", "node_modules"})


def walk(directory: Path, exclude: Sequence[str] = ()) -> list[Path]:
    """The manifest files under a directory, sorted, the way a checkout sees them: hidden
    folders and files, `vendor/` and `node_modules/` are left out, and so is what a
    `.gitignore` (in the directory, its subfolders, or its parents up to the repository's
    root) names. `exclude` holds more
    patterns in .gitignore syntax, relative to the directory (`legacy/`, `*.tmpl.yaml`)."""
    return [Path(name) for name in _walk(directory, exclude)]


def _walk(directory: Path, exclude: Sequence[str]) -> list[str]:
    """`walk` as path strings, sorted as Paths sort (by their parts): no Path per file."""
    found: list[str] = []
    excluded = _Ignore(os.path.abspath(directory), _gitignore_spec(exclude)) if exclude else None
    rules_of: dict[str, list[_Ignore]] = {}
    for root, folders, files in os.walk(directory):
        rules = rules_of.get(root)
        if rules is None:
            rules = _parent_ignores(Path(root))
        rules = rules + _ignore_file(Path(root))
        # Where this folder is from each .gitignore's, the deepest first (it wins): worked
        # out once per folder rather than once per file.
        here = os.path.abspath(root)
        checks = [(rule.spec, _relative(here, rule.base)) for rule in reversed(rules)]
        skip = (excluded.spec, _relative(here, excluded.base)) if excluded else None
        folders[:] = sorted(name for name in folders if not name.startswith(".")
                            and name not in OTHERS_CODE
                            and not _ignored(name, checks, skip, folder=True))
        for name in folders:
            rules_of[os.path.join(root, name)] = rules
        found.extend(os.path.join(root, name) for name in files
                     if name.lower().endswith(MANIFEST_SUFFIXES) and not name.startswith(".")
                     and not _ignored(name, checks, skip, folder=False))
    found.sort(key=_parts)
    return found


def _parts(name: str) -> list[str]:
    return name.split(os.sep)


@dataclass(frozen=True, slots=True)
class _Ignore:
    """The patterns of one .gitignore, which apply below its folder (`base`, absolute)."""

    base: str
    spec: pathspec.GitIgnoreSpec


def _gitignore_spec(lines: Iterable[str]) -> pathspec.GitIgnoreSpec:
    """Patterns in .gitignore syntax. pathspec is imported for the first: a walk that meets
    no .gitignore and no --exclude needs none, and its import would delay the run's start."""
    import pathspec

    return pathspec.GitIgnoreSpec.from_lines(lines)


def _ignore_file(folder: Path) -> list[_Ignore]:
    try:
        lines = read_regular(str(folder / ".gitignore")).decode("utf-8", "replace")
    except OSError:
        return []
    return [_Ignore(os.path.abspath(folder),
                    _gitignore_spec(lines.splitlines()))]


def _parent_ignores(folder: Path) -> list[_Ignore]:
    """The .gitignore files above a folder, up to the root of its repository (if any)."""
    folder = folder.resolve()
    parents: list[Path] = []
    for parent in folder.parents:
        parents.append(parent)
        if (parent / ".git").exists():
            break
    else:
        return []  # not in a repository: no .gitignore above applies
    rules: list[_Ignore] = []
    for parent in reversed(parents):
        rules += _ignore_file(parent)
    return rules


def _relative(folder: str, base: str) -> str:
    """A folder's path from a .gitignore's, in its syntax: '' for the same folder."""
    relative = os.path.relpath(folder, base).replace(os.sep, "/")
    return "" if relative == "." else relative + "/"


_Check = tuple["pathspec.GitIgnoreSpec", str]  # patterns, and the folder's path from theirs


def _ignored(name: str, checks: list[_Check], excluded: _Check | None, folder: bool) -> bool:
    """Whether a file or folder `name` of the folder the checks are for is left out."""
    if excluded and _verdict(name, excluded, folder):
        return True
    for check in checks:  # the deepest .gitignore that has a say wins
        verdict = _verdict(name, check, folder)
        if verdict is not None:
            return verdict
    return False


def _verdict(name: str, check: _Check, folder: bool) -> bool | None:
    spec, prefix = check
    return spec.check_file(prefix + name + "/" if folder else prefix + name).include


def read_source(source: Source, data: bytes | None = None) -> Iterator[Document]:
    """The documents of one item of `manifest_sources` (`data`: stdin, already read)."""
    if not source.exists:
        yield Document(f"{source.name}:0", error="no such file or directory",
                       file=source.name)
        return
    name = "<stdin>" if source.name == "-" else source.name
    if data is None:
        try:
            data = _read_bytes(source)
        except OSError as error:
            yield Document(f"{name}:0", error=f"cannot read: {error.strerror}", file=name)
            return
    elif not source.whole:
        data = data[source.start:None if source.end == -1 else source.end]
    if source.whole and name.lower().endswith(".json") and (problem := json_problem(data)):
        line, column, why = problem
        yield Document(f"{name}:{line}", error=f"invalid JSON: {why}", file=name, line=line,
                       column=column)
        return
    yield from read_text(data, name, source.line)


def json_problem(data: bytes) -> tuple[int, int, str] | None:
    """Where and why a .json file is not JSON, as kubectl reads it (a stream of JSON values:
    no trailing comma, no comment, no YAML), or None. The YAML reader, which reads every JSON
    file, then reads it for the fields' positions; alone it would accept `[1, 2,]`."""
    import json

    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as problem:
        return 1, 1, f"not UTF-8 (byte {problem.start})"
    decoder = json.JSONDecoder()
    at = 0
    while True:
        while at < len(text) and text[at] in " \t\r\n":
            at += 1
        if at == len(text):
            return None
        try:
            at = decoder.raw_decode(text, at)[1]
        except json.JSONDecodeError as problem:
            return problem.lineno, problem.colno, f"{problem.msg} (line {problem.lineno}, " \
                f"column {problem.colno})"


def _read_bytes(source: Source) -> bytes:
    if source.name == "-":
        return sys.stdin.buffer.read()
    return read_source_bytes(source)


def read_source_bytes(source: Source) -> bytes:
    """The bytes of a file source: a regular file only when it was found in a directory or
    named by a file (read_regular); what the user named may also be a pipe or a device
    (`check <(helm template ...)`, `--config /dev/null`), read up to NAMED_MAX."""
    if source.walked or source.referenced:
        return read_regular(source.name, source.start, source.end)
    return read_named(source.name, source.start, source.end)


NOT_REGULAR = "not a regular file (a device, pipe or socket)"
# What is read of a pipe or a device the user named: /dev/zero never ends.
NAMED_MAX = 128 * 1024 * 1024


def read_named(name: str, start: int = 0, end: int = -1) -> bytes:
    """The bytes of a file the user named (or of [start, end) of it): a regular file whole;
    a pipe or a device (process substitution, /dev/null) up to NAMED_MAX, else OSError."""
    with open(name, "rb") as file:
        if stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            if start:
                file.seek(start)
            return file.read(-1 if end == -1 else end - start)
        chunks: list[bytes] = []
        size = 0
        while size <= NAMED_MAX:
            chunk = file.read(1024 * 1024)
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            size += len(chunk)
    raise OSError(errno.EFBIG, f"{NOT_REGULAR} that gives more than "
                               f"{NAMED_MAX // 1024 // 1024} MiB", name)


def read_regular(name: str, start: int = 0, end: int = -1) -> bytes:
    """The bytes of a regular file, or of the range [start, end) of it. Whatever else a path
    names (/dev/zero, a FIFO, a socket, or a symlink to one, which a checkout or a test suite
    may hold) is refused with OSError: reading it would never end or would wait for ever.
    Opening with O_NONBLOCK, a FIFO does not wait for a writer (a regular file ignores it).
    Plain descriptor reads: a directory walk reads thousands of small files, and a buffered
    file object per file costs as much again as reading it."""
    fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK)
    try:
        status = os.fstat(fd)
        if stat.S_ISDIR(status.st_mode):  # as open() says it
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), name)
        if not stat.S_ISREG(status.st_mode):
            raise OSError(errno.EINVAL, NOT_REGULAR, name)
        if start:
            os.lseek(fd, start, os.SEEK_SET)
        left = status.st_size - start if end == -1 else end - start
        chunks: list[bytes] = []
        while end == -1 or left > 0:
            # One byte more than the size, so that the next read finds the end of the file.
            chunk = os.read(fd, left if end != -1 else left + 1 if left > 0 else 65536)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    finally:
        os.close(fd)


def read_file(path: Path) -> Iterator[Document]:
    yield from read_source(Source(str(path), exists=path.exists()))


def split(data: bytes, size: int) -> list[tuple[int, int, int]]:
    """(start, end, first line) of byte ranges of about `size` that hold whole documents.

    A range ends before a `---` line: YAML forbids that marker inside a scalar, so each range
    parses as the same documents the whole stream holds. A stream with a directive (`%YAML`)
    is not split, since a directive belongs to the document after it.
    """
    if len(data) <= size or data.startswith(b"%") or b"\n%" in data:
        return [(0, -1, 1)]
    ranges: list[tuple[int, int, int]] = []
    start, line = 0, 1
    while True:
        cut = _MARKER.search(data, start + size)
        if cut is None:
            ranges.append((start, -1, line))
            return ranges
        end = cut.start() + 1
        ranges.append((start, end, line))
        line += data.count(b"\n", start, end)
        start = end


_MARKER = re.compile(rb"\n---(?:[ \t\r]|\n|$)")


def read_text(data: bytes | str, name: str, first_line: int = 1) -> Iterator[Document]:
    """Every object in a YAML/JSON stream, as it is read; `kind: List` objects are opened into
    their items. `first_line`: the line of the stream's start, when it is part of a file.

    A document with a duplicate key is an error for that document alone; a syntax error ends
    the stream (libyaml cannot resynchronise), after the documents before it.
    """
    offset = first_line - 1
    sources = _helm_sources(data, offset)
    previous = 0  # the line the document before starts on
    for line, column, obj, error, positions in _documents(data, offset):
        line += offset
        template = _template(sources, line, obj, previous)
        previous = line
        if error:
            yield Document(f"{name}:{line}", error=f"invalid YAML: {error}", file=name,
                           line=line, column=column)
        elif obj is not None:  # None: an empty document, as between `---` separators
            if (type(obj) is dict and isinstance(obj.get("kind"), str)
                    and obj["kind"].endswith("List") and isinstance(obj.get("items"), list)):
                starts = positions.items(obj["items"]) if positions else []
                for index, item in enumerate(obj["items"]):
                    item_line, item_column = starts[index] if index < len(starts) else (
                        line, column)
                    yield Document(f"{name}:{item_line}", item, file=name, line=item_line,
                                   column=item_column, positions=positions,
                                   template=_template((), item_line, item, 0) or template)
            else:
                yield Document(f"{name}:{line}", obj, file=name, line=line, column=column,
                               positions=positions, template=template)


_HELM_SOURCE = re.compile(rb"^# Source: (\S[^\r\n]*?)\s*$", re.M)
_ORIGIN = "config.kubernetes.io/origin"


def _helm_sources(data: bytes | str, offset: int) -> list[tuple[int, str]]:
    """The `# Source: chart/templates/x.yaml` comments `helm template` writes above each
    object, with their lines, in order; none in most inputs, found with one scan."""
    raw = data.encode() if isinstance(data, str) else data
    if b"# Source: " not in raw:
        return []
    return [(raw.count(b"\n", 0, match.start()) + 1 + offset,
             match.group(1).decode("utf-8", "replace")) for match in _HELM_SOURCE.finditer(raw)]


def _template(sources: Sequence[tuple[int, str]], line: int, obj: Any, previous: int) -> str:
    """What wrote the object starting at `line`: kustomize's origin annotation (`path: ...`)
    when it has one, else the nearest Helm `# Source:` comment above it (helm writes one per
    object, after the `---`) and below the object before it (`previous`: its line)."""
    if type(obj) is dict and type(meta := obj.get("metadata")) is dict \
            and type(notes := meta.get("annotations")) is dict \
            and isinstance(origin := notes.get(_ORIGIN), str):
        for entry in origin.splitlines():
            if entry.startswith("path:") and (path := entry[5:].strip().strip("'\"")):
                return path
    if not sources:
        return ""
    at = bisect.bisect_left(sources, (line, "")) - 1
    return sources[at][1] if at >= 0 and sources[at][0] > previous else ""


def _documents(data: bytes | str, offset: int) -> Iterator[Read]:
    """Documents from the event reader; from the first one it leaves to PyYAML on, PyYAML's.
    The event reader earns its place: with PyYAML's loader alone, `check` of the 5,000-file
    corpus takes 2.4x the wall time, 2.1x the CPU (cli_bench's corpus, 2026-12-07)."""
    done = 0
    try:
        for document in EventReader(data, offset).documents():
            yield document
            done += 1
    except Fallback:
        yield from islice(_slow_documents(data, offset), done, None)


def _slow_documents(data: bytes | str, offset: int) -> Iterator[Read]:
    """PyYAML's own composer and constructor: tags, odd keys and odd merges end up here."""
    loader = KubernetesLoader(data)
    line, column = 1, 1
    try:
        while loader.check_node():
            node = loader.get_node()
            line, column = node.start_mark.line + 1, node.start_mark.column + 1
            try:
                check_node(node)
            except LimitError as error:
                mark = error.problem_mark
                where = (mark.line + 1, mark.column + 1) if mark else (line, column)
                yield *where, None, problem(error, offset), None
                continue
            try:
                obj = loader.construct_document(node)
            except yaml.constructor.ConstructorError as error:
                # The document was composed whole before construction failed: go on with the
                # next one, with the constructor's per-document state cleared.
                loader.constructed_objects, loader.recursive_objects = {}, {}
                loader.state_generators, loader.deep_construct = [], False
                yield line, column, None, problem(error, offset), None
                continue
            yield line, column, obj, "", Positions(_node_marks(node, obj), offset)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = (mark.line + 1, mark.column + 1) if mark else (line, column)
        yield *where, None, problem(error, offset), None
    finally:
        loader.dispose()


def _node_marks(root: Any, obj: Any) -> dict[int, Any]:
    """Positions' marks from a composed document and the object built from it. Construction
    has flattened merge keys into each mapping node, merged pairs first, so the last pair of
    a key is the one the object holds."""
    marks: dict[int, Any] = {}
    pending = [(root, obj)]
    while pending:
        node, value = pending.pop()
        if id(value) in marks:
            continue  # an alias of a collection already seen
        if isinstance(node, yaml.MappingNode) and type(value) is dict:
            keys: dict[Any, Any] = {}
            children: dict[Any, Any] = {}
            for key_node, value_node in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value in value:
                    keys[key_node.value] = key_node.start_mark
                    children[key_node.value] = value_node
            marks[id(value)] = keys
            pending.extend((child, value[key]) for key, child in children.items())
        elif isinstance(node, yaml.SequenceNode) and type(value) is list:
            marks[id(value)] = [item.start_mark for item in node.value]
            pending.extend(zip(node.value, value, strict=False))
    return marks
