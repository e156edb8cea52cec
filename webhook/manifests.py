"""Reading manifests: YAML or JSON files, directories and streams, the way Kubernetes reads them.

kubectl turns YAML into JSON with YAML 1.1 rules (go-yaml v2): `yes`/`on`/`y` are booleans,
`0755` is octal, `1e3` is a number, duplicate keys are an error, anchors and merge keys work,
and timestamps stay strings. A document that cannot be read becomes an error for that
document alone; the others are still judged.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any

import pathspec
import yaml

from webhook.engine.patch import Path as FieldPath
from webhook.engine.yaml_limits import (
    RECURSIVE,
    LimitError,
    check_node,
    depth_problem,
    expansion_problem,
)

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


def manifest_sources(paths: Iterable[str], exclude: Sequence[str] = ()) -> list[Source]:
    """What `read_paths` reads, in order: `-`, each file named, each directory's manifest files
    (sorted; hidden folders and files, what `.gitignore` ignores and the `exclude` globs are
    left out), or the path as given when it does not exist."""
    sources: list[Source] = []
    for given in paths:
        if given == "-":
            sources.append(Source("-"))
            continue
        path = Path(given)
        if path.is_dir():
            sources.extend(Source(name, walked=True) for name in _walk(path, exclude))
        else:
            sources.append(Source(str(path), exists=path.exists()))
    return sources


def walk(directory: Path, exclude: Sequence[str] = ()) -> list[Path]:
    """The manifest files under a directory, sorted, the way a checkout sees them: hidden
    folders and files are left out, and so is what a `.gitignore` (in the directory, its
    subfolders, or its parents up to the repository's root) names. `exclude` holds more
    patterns in .gitignore syntax, relative to the directory (`legacy/`, `*.tmpl.yaml`)."""
    return [Path(name) for name in _walk(directory, exclude)]


def _walk(directory: Path, exclude: Sequence[str]) -> list[str]:
    """`walk` as path strings, sorted as Paths sort (by their parts): no Path per file."""
    found: list[str] = []
    excluded = _Ignore(os.path.abspath(directory), pathspec.GitIgnoreSpec.from_lines(exclude)) \
        if exclude else None
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


def _ignore_file(folder: Path) -> list[_Ignore]:
    try:
        lines = read_regular(str(folder / ".gitignore")).decode("utf-8", "replace")
    except OSError:
        return []
    return [_Ignore(os.path.abspath(folder),
                    pathspec.GitIgnoreSpec.from_lines(lines.splitlines()))]


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


_Check = tuple[pathspec.GitIgnoreSpec, str]  # patterns, and the folder's path from theirs


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
    yield from read_text(data, name, source.line)


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
    may hold) is refused with OSError: reading it would never end or would wait for ever."""
    with open(name, "rb", opener=_without_waiting) as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(errno.EINVAL, NOT_REGULAR, name)
        if start:
            file.seek(start)
        return file.read(-1 if end == -1 else end - start)


def _without_waiting(name: str, flags: int) -> int:
    """os.open for read_regular: opening a FIFO must not wait for a writer (O_NONBLOCK); a
    regular file ignores the flag."""
    return os.open(name, flags | os.O_NONBLOCK)


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
    for line, column, obj, error, positions in _documents(data, offset):
        line += offset
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
                                   column=item_column, positions=positions)
            else:
                yield Document(f"{name}:{line}", obj, file=name, line=line, column=column,
                               positions=positions)


class Positions:
    """Where the fields of one document are: the parser's mark of each key of its mappings and
    each item of its sequences, by the identity of the dict or list read (so they hold while
    the document's object lives, and an alias points at its anchor). Marks are kept as the
    parser made them; lines and columns are worked out only for the fields asked about."""

    __slots__ = ("marks", "offset")

    def __init__(self, marks: dict[int, Any], offset: int) -> None:
        self.marks = marks  # id(dict) -> {key: mark}, id(list) -> [mark per item]
        self.offset = offset  # lines before the part of the file that was read

    def find(self, obj: Any, path: FieldPath) -> tuple[int, int] | None:
        """(line, column) of the deepest field along a path that is in the source."""
        found = None
        node = obj
        table = self.marks
        for segment in path:
            marks = table.get(id(node))
            if marks is None:
                break
            if type(node) is dict:
                mark = marks.get(segment if type(segment) is str else str(segment))
                if mark is None:
                    break
                node = node.get(segment if type(segment) is str else str(segment))
            elif 0 <= (index := _index(segment)) < len(marks):
                mark = marks[index]
                node = node[index]
            else:
                break
            found = mark
        if found is None:
            return None
        return found.line + 1 + self.offset, found.column + 1

    def items(self, sequence: list[Any]) -> list[tuple[int, int]]:
        """(line, column) of each item of a sequence of the document."""
        return [(mark.line + 1 + self.offset, mark.column + 1)
                for mark in self.marks.get(id(sequence), ())]




# (line, column, object, error, where its fields are (None after an error))
def _index(segment: str | int) -> int:
    """A path's segment as an index into a sequence, or -1: a JSON pointer's token
    (a CEL mutation's path) names an item by its digits."""
    if type(segment) is int:
        return segment
    return int(segment) if isinstance(segment, str) and segment.isascii() \
        and segment.isdigit() else -1


_Read = tuple[int, int, Any, str, Positions | None]


def _documents(data: bytes | str, offset: int) -> Iterator[_Read]:
    """Documents from the fast reader; from the first one it leaves to PyYAML on, PyYAML's."""
    done = 0
    try:
        for document in _FastReader(data, offset).documents():
            yield document
            done += 1
    except _Fallback:
        yield from islice(_slow_documents(data, offset), done, None)


def _slow_documents(data: bytes | str, offset: int) -> Iterator[_Read]:
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
                yield *where, None, _problem(error, offset), None
                continue
            try:
                obj = loader.construct_document(node)
            except yaml.constructor.ConstructorError as error:
                # The document was composed whole before construction failed: go on with the
                # next one, with the constructor's per-document state cleared.
                loader.constructed_objects, loader.recursive_objects = {}, {}
                loader.state_generators, loader.deep_construct = [], False
                yield line, column, None, _problem(error, offset), None
                continue
            yield line, column, obj, "", Positions(_node_marks(node, obj), offset)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = (mark.line + 1, mark.column + 1) if mark else (line, column)
        yield *where, None, _problem(error, offset), None
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


def _problem(error: yaml.YAMLError, offset: int = 0) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    text = f"{context}: {problem}" if context and "already" in str(problem) else problem
    if not mark:
        return str(text)
    return f"{text} (line {mark.line + 1 + offset}, column {mark.column + 1})"


class KubernetesResolver(yaml.resolver.BaseResolver):
    """Plain-scalar typing as go-yaml v2 does it (the library behind kubectl's YAML)."""


def _add(tag: str, pattern: str, first: str) -> None:
    KubernetesResolver.add_implicit_resolver(tag, re.compile(pattern, re.X), list(first))


_add("tag:yaml.org,2002:bool",
     r"^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE|on|On|ON|off|Off|OFF)$",
     "yYnNtTfFoO")
_add("tag:yaml.org,2002:int",
     r"""^(?:[-+]?0b[0-1_]+|[-+]?0o?[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$""",
     "-+0123456789")
_add("tag:yaml.org,2002:float",
     r"""^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?
         |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""",
     "-+0123456789.")
_add("tag:yaml.org,2002:null", r"^(?:~|null|Null|NULL|)$", "~nN\0")
KubernetesResolver.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^$"), [""])
_add("tag:yaml.org,2002:merge", r"^(?:<<)$", "<")


class KubernetesConstructor(yaml.constructor.SafeConstructor):
    """Safe construction with kubectl's stricter edges: duplicate keys fail, ints follow Go."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            self.flatten_mapping(node)
            seen: set[Any] = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if isinstance(key, list | dict):
                    raise yaml.constructor.ConstructorError(
                        None, None, "a mapping key must be a scalar", key_node.start_mark)
                if key in seen:
                    raise yaml.constructor.ConstructorError(
                        "while reading a mapping", node.start_mark,
                        f"key {key!r} is already defined", key_node.start_mark)
                seen.add(key)
        return super().construct_mapping(node, deep=deep)

    bool_values = {**yaml.constructor.SafeConstructor.bool_values, "y": True, "n": False}

    def construct_yaml_int(self, node: Any) -> int:
        text = str(self.construct_scalar(node)).replace("_", "")
        sign = -1 if text.startswith("-") else 1
        text = text.lstrip("+-")
        if text.startswith(("0b", "0x", "0o")):
            return sign * int(text, 0)
        if len(text) > 1 and text.startswith("0"):
            return sign * int(text, 8)
        return sign * int(text)


KubernetesConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:int", KubernetesConstructor.construct_yaml_int)
# Timestamps are not resolved implicitly, and an explicit !!timestamp stays its text.
KubernetesConstructor.add_constructor(  # type: ignore[type-var]
    "tag:yaml.org,2002:timestamp", yaml.constructor.SafeConstructor.construct_yaml_str)

# libyaml's parser when PyYAML was built with it (PyPI's wheels are); PyYAML's otherwise.
try:
    from yaml.cyaml import CParser  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    CParser = None  # type: ignore[misc,assignment]

_BASES: tuple[type, ...] = (
    (CParser,) if CParser is not None
    else (yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, yaml.composer.Composer)
)


class KubernetesLoader(*_BASES, KubernetesConstructor, KubernetesResolver):  # type: ignore[misc]
    def __init__(self, stream: bytes | str) -> None:
        if CParser is not None:
            CParser.__init__(self, stream)
        else:  # pragma: no cover
            yaml.reader.Reader.__init__(self, stream)
            yaml.scanner.Scanner.__init__(self)
            yaml.parser.Parser.__init__(self)
            yaml.composer.Composer.__init__(self)
        KubernetesConstructor.__init__(self)
        KubernetesResolver.__init__(self)


class _Fallback(Exception):
    """The fast reader met something it leaves to PyYAML's constructor (see _FastReader)."""


_MERGE_TAG = "tag:yaml.org,2002:merge"
_MISSING = object()
ScalarEvent = yaml.ScalarEvent
_RESOLVER = KubernetesResolver()
_PLAIN_VALUES: dict[str, Any] = {}  # plain scalar text -> its YAML 1.1 value (immutable)


def _plain(text: str) -> Any:
    """The value of a plain scalar, typed by exactly the resolver and constructor above."""
    try:
        return _PLAIN_VALUES[text]
    except KeyError:
        pass
    tag = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
    if tag == _MERGE_TAG:
        raise _Fallback  # a plain `<<` outside a key: PyYAML's error message
    value = KubernetesConstructor().construct_document(yaml.ScalarNode(tag, text))
    if len(_PLAIN_VALUES) >= 65536:
        _PLAIN_VALUES.clear()
    _PLAIN_VALUES[text] = value
    return value


class _FastReader:
    """YAML to Python objects straight from libyaml's events, with the loader's exact rules.

    PyYAML's loader builds a node tree, resolves every scalar with regexes and constructs
    through generic dispatch, which costs more than parsing itself. Manifests are untagged
    mappings, sequences and scalars, so this reads the events once: quoted and block scalars
    are strings, plain ones go through the same resolver and constructor (cached by text), and
    anchors, aliases and merge keys follow PyYAML's flatten_mapping. Anything else (an explicit
    tag, a duplicate key, a key that is a collection or an alias, an odd merge, an undefined or
    repeated anchor) raises _Fallback and the whole stream is read by KubernetesLoader, so
    results and error messages never depend on which reader ran.
    """

    def __init__(self, data: bytes | str, offset: int = 0) -> None:
        if CParser is None:  # pragma: no cover - PyYAML built without libyaml
            raise _Fallback
        self.parser = CParser(data)
        self.offset = offset
        # name -> [value, mark, nodes it stands for, its height]; the last two are None
        # while the anchored collection is still being read
        self.anchors: dict[str, list[Any]] = {}
        self.marks: dict[int, Any] = {}  # see Positions
        # See webhook.engine.yaml_limits: nodes read (aliases counted as what they expand
        # to), how many of them through aliases, the nesting depth now and the deepest yet.
        self.decoded = self.aliased = self.depth = self.deepest = 0

    def documents(self) -> Iterator[_Read]:
        """(line, column, object, error, positions) per document, as they are read."""
        parser = self.parser
        line, column = 1, 1
        try:
            parser.get_event()  # StreamStartEvent
            while type(parser.get_event()) is not yaml.StreamEndEvent:  # DocumentStartEvent
                self.anchors = {}
                self.marks = {}
                self.decoded = self.aliased = self.depth = self.deepest = 0
                event: Any = parser.get_event()
                line, column = event.start_mark.line + 1, event.start_mark.column + 1
                obj = self.node(event)
                parser.get_event()  # DocumentEndEvent
                yield line, column, obj, "", Positions(self.marks, self.offset)
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            where = (mark.line + 1, mark.column + 1) if mark else (line, column)
            yield *where, None, _problem(error, self.offset), None
        except RecursionError:
            raise _Fallback from None
        finally:
            parser.dispose()

    def node(self, event: Any) -> Any:
        kind = type(event)
        if kind is yaml.ScalarEvent:
            if event.tag is not None:
                raise _Fallback
            self.decoded += 1
            value = _plain(event.value) if event.implicit[0] else event.value
            if event.anchor is not None:
                self.anchor(event, value)
            return value
        if kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            start, level = self.decoded, self.depth + 1
            outer, self.deepest = self.deepest, level
            self.depth = level
            self.decoded += 1
            value = self.mapping(event) if kind is yaml.MappingStartEvent \
                else self.sequence(event)
            self.depth = level - 1
            height, self.deepest = self.deepest - level + 1, max(outer, self.deepest)
            if event.anchor is not None:
                self.anchors[event.anchor][2:] = [self.decoded - start, height]
            return value
        if kind is yaml.AliasEvent:
            found = self.anchors.get(event.anchor)
            if found is None:
                raise _Fallback  # undefined alias: the composer's error
            self.alias(found)
            return found[0]
        raise _Fallback  # pragma: no cover - libyaml emits no other event here

    def alias(self, anchor: list[Any]) -> None:
        """Count what an alias expands to; past the bounds, the document is refused, at the
        anchor (as yaml_limits.check_node does for PyYAML's reader)."""
        _, mark, size, height = anchor
        if size is None:
            raise LimitError(RECURSIVE, mark)
        self.decoded += size
        self.aliased += size
        self.deepest = max(self.deepest, self.depth + height)
        problem = expansion_problem(self.decoded, self.aliased) or \
            depth_problem(self.depth + height)
        if problem:
            raise LimitError(problem, mark)

    def sequence(self, event: Any) -> list[Any]:
        if event.tag is not None:
            raise _Fallback
        items: list[Any] = []
        if event.anchor is not None:
            self.anchor(event, items)
        marks: list[Any] = []
        self.marks[id(items)] = marks
        get_event = self.parser.get_event
        item: Any = get_event()
        while type(item) is not yaml.SequenceEndEvent:
            mark = item.start_mark
            if type(item) is yaml.AliasEvent:  # where its anchor is, as PyYAML's composer has it
                mark = self.anchors.get(str(item.anchor), (None, mark))[1]
            marks.append(mark)
            items.append(self.node(item))
            item = get_event()
        return items

    def anchor(self, event: Any, value: Any) -> None:
        if event.anchor in self.anchors:
            raise _Fallback  # a duplicate anchor: the composer's error
        scalar = type(event) is ScalarEvent
        self.anchors[event.anchor] = [value, event.start_mark, 1 if scalar else None,
                                      0 if scalar else None]

    def mapping(self, event: Any) -> dict[Any, Any]:
        if event.tag is not None:
            raise _Fallback
        result: dict[Any, Any] = {}
        if event.anchor is not None:
            self.anchor(event, result)
        marks: dict[Any, Any] = {}  # the mark of each key
        self.marks[id(result)] = marks
        get_event = self.parser.get_event
        plain_values = _PLAIN_VALUES
        merges: list[dict[Any, Any]] = []
        key_event = get_event()
        while type(key_event) is not yaml.MappingEndEvent:
            if type(key_event) is not ScalarEvent or key_event.tag is not None:
                raise _Fallback  # a collection, an alias or a tagged key
            key = key_event.value
            self.decoded += 1  # the key
            if key_event.implicit[0]:
                if key == "<<" and key_event.anchor is None:
                    merges.extend(self.merge(get_event()))
                    key_event = get_event()
                    continue
                key = plain_values.get(key, _MISSING)
                if key is _MISSING:
                    key = _plain(key_event.value)
            if key_event.anchor is not None:
                self.anchor(key_event, key)
            if key in result:
                raise _Fallback  # a duplicate key: PyYAML names the first one it meets
            marks[key] = key_event.start_mark
            value = get_event()
            # An untagged scalar without anchor, the most common value, is read right here.
            if type(value) is ScalarEvent and value.tag is None and value.anchor is None:
                self.decoded += 1
                if value.implicit[0]:
                    text = value.value
                    value = plain_values.get(text, _MISSING)
                    result[key] = _plain(text) if value is _MISSING else value
                else:
                    result[key] = value.value
            else:
                result[key] = self.node(value)
            key_event = get_event()
        if merges:
            # PyYAML puts merged pairs first, in the order of the `<<` keys, then the
            # mapping's own keys; a key that occurs twice in that list is an error (or, for
            # the very same key merged twice, ignored): either way PyYAML's to decide.
            flattened: dict[Any, Any] = {}
            for merged in merges:
                if any(key in flattened for key in merged):
                    raise _Fallback
                flattened.update(merged)
            if any(key in flattened for key in result):
                raise _Fallback
            own = dict(result)
            result.clear()  # the same object: an anchor may already point at it
            result.update(flattened)
            result.update(own)
            # A merged key is where the mapping it came from has it, as PyYAML's nodes say.
            own_marks = dict(marks)
            marks.clear()
            for merged in merges:
                marks.update(self.marks.get(id(merged), {}))
            marks.update(own_marks)
        return result

    def merge(self, event: Any) -> list[dict[Any, Any]]:
        """The mappings a `<<` value merges: one mapping (or a list of one). The order of a
        longer list changed between PyYAML releases, so that is left to PyYAML."""
        value = self.node(event)
        if type(value) is dict:
            return [value]
        if type(value) is list and len(value) == 1 and type(value[0]) is dict:
            return value
        raise _Fallback
