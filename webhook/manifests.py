"""Reading manifests: YAML or JSON files, directories and streams, the way Kubernetes reads them.

kubectl turns YAML into JSON with YAML 1.1 rules (go-yaml v2): `yes`/`on`/`y` are booleans,
`0755` is octal, `1e3` is a number, duplicate keys are an error, anchors and merge keys work,
and timestamps stay strings. A document that cannot be read becomes an error for that
document alone; the others are still judged.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

MANIFEST_SUFFIXES = (".yaml", ".yml", ".json")


@dataclass(frozen=True, slots=True)
class Document:
    """One object read from a source (`file:document` or `file:document/item` for Lists)."""

    source: str
    obj: Any = None
    error: str = ""


def read_paths(paths: Iterable[str]) -> Iterator[Document]:
    """The documents of files, directories (recursively, *.yaml/*.yml/*.json) and `-` (stdin)."""
    for source in manifest_sources(paths):
        yield from read_source(source)


def manifest_sources(paths: Iterable[str]) -> list[str | Path]:
    """What `read_paths` reads, in order: `-`, each file (a directory's sorted), or the given
    path as a str when it does not exist. Lets the CLI split the work between processes."""
    sources: list[str | Path] = []
    for given in paths:
        if given == "-":
            sources.append("-")
            continue
        path = Path(given)
        if path.is_dir():
            sources.extend(sorted(p for p in path.rglob("*")
                                  if p.is_file() and p.suffix.lower() in MANIFEST_SUFFIXES))
        elif path.exists():
            sources.append(path)
        else:
            sources.append(str(path))
    return sources


def read_source(source: str | Path) -> Iterator[Document]:
    """The documents of one item of `manifest_sources`."""
    if isinstance(source, Path):
        yield from read_file(source)
    elif source == "-":
        yield from read_text(sys.stdin.buffer.read(), "<stdin>")
    else:
        yield Document(source, error="no such file or directory")


def read_file(path: Path) -> Iterator[Document]:
    try:
        data = path.read_bytes()
    except OSError as error:
        yield Document(str(path), error=f"cannot read: {error.strerror}")
        return
    yield from read_text(data, str(path))


def read_text(data: bytes | str, name: str) -> Iterator[Document]:
    """Every object in a YAML/JSON stream; `kind: List` objects are opened into their items.

    A document with a duplicate key is an error for that document alone; a syntax error ends
    the stream (libyaml cannot resynchronise), after the documents before it.
    """
    try:
        documents = _FastReader(data).documents()
    except _Fallback:
        documents = _slow_documents(data)
    for number, obj, error in documents:
        if error:
            yield Document(f"{name}:{number}", error=f"invalid YAML: {error}")
        elif obj is not None:  # None: an empty document, as between `---` separators
            yield from _expand(obj, f"{name}:{number}")


def _slow_documents(data: bytes | str) -> list[tuple[int, Any, str]]:
    """PyYAML's own composer and constructor: tags, odd keys and odd merges end up here."""
    loader = KubernetesLoader(data)
    documents: list[tuple[int, Any, str]] = []
    number = 0
    try:
        while loader.check_node():
            number += 1
            try:
                documents.append((number, loader.get_data(), ""))
            except yaml.constructor.ConstructorError as error:
                # The document was composed whole before construction failed: go on with the
                # next one, with the constructor's per-document state cleared.
                loader.constructed_objects, loader.recursive_objects = {}, {}
                loader.state_generators, loader.deep_construct = [], False
                documents.append((number, None, _problem(error)))
    except yaml.YAMLError as error:
        documents.append((number or 1, None, _problem(error)))
    finally:
        loader.dispose()
    return documents


def _expand(obj: Any, source: str) -> Iterator[Document]:
    if (isinstance(obj, dict) and isinstance(obj.get("kind"), str)
            and obj["kind"].endswith("List") and isinstance(obj.get("items"), list)):
        for index, item in enumerate(obj["items"]):
            yield Document(f"{source}/items[{index}]", item)
    else:
        yield Document(source, obj)


def _problem(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    text = f"{context}: {problem}" if context and "already" in str(problem) else problem
    return f"{text} (line {mark.line + 1}, column {mark.column + 1})" if mark else text


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
    through generic dispatch: about 2.5x the time of parsing alone. Manifests are untagged
    mappings, sequences and scalars, so this reads the events once: quoted and block scalars
    are strings, plain ones go through the same resolver and constructor (cached by text), and
    anchors, aliases and merge keys follow PyYAML's flatten_mapping. Anything else (an explicit
    tag, a duplicate key, a key that is a collection or an alias, an odd merge, an undefined or
    repeated anchor) raises _Fallback and the whole stream is read by KubernetesLoader, so
    results and error messages never depend on which reader ran.
    """

    def __init__(self, data: bytes | str) -> None:
        if CParser is None:  # pragma: no cover - PyYAML built without libyaml
            raise _Fallback
        self.parser = CParser(data)
        self.anchors: dict[str, Any] = {}

    def documents(self) -> list[tuple[int, Any, str]]:
        """(number, object, error) per document, in order."""
        parser = self.parser
        documents: list[tuple[int, Any, str]] = []
        number = 0
        try:
            parser.get_event()  # StreamStartEvent
            while type(parser.get_event()) is not yaml.StreamEndEvent:  # DocumentStartEvent
                number += 1
                self.anchors = {}
                documents.append((number, self.node(parser.get_event()), ""))
                parser.get_event()  # DocumentEndEvent
        except yaml.YAMLError as error:
            documents.append((number or 1, None, _problem(error)))
        except RecursionError:
            raise _Fallback from None
        finally:
            parser.dispose()
        return documents

    def node(self, event: Any) -> Any:
        kind = type(event)
        if kind is yaml.ScalarEvent:
            if event.tag is not None:
                raise _Fallback
            value = _plain(event.value) if event.implicit[0] else event.value
            if event.anchor is not None:
                self.anchor(event, value)
            return value
        if kind is yaml.MappingStartEvent:
            return self.mapping(event)
        if kind is yaml.SequenceStartEvent:
            if event.tag is not None:
                raise _Fallback
            items: list[Any] = []
            if event.anchor is not None:
                self.anchor(event, items)
            get_event = self.parser.get_event
            item = get_event()
            while type(item) is not yaml.SequenceEndEvent:
                items.append(self.node(item))
                item = get_event()
            return items
        if kind is yaml.AliasEvent:
            found = self.anchors.get(event.anchor)
            if found is None:
                raise _Fallback  # undefined alias: the composer's error
            return found[0]
        raise _Fallback  # pragma: no cover - libyaml emits no other event here

    def anchor(self, event: Any, value: Any) -> None:
        if event.anchor in self.anchors:
            raise _Fallback  # a duplicate anchor: the composer's error
        self.anchors[event.anchor] = (value,)

    def mapping(self, event: Any) -> dict[Any, Any]:
        if event.tag is not None:
            raise _Fallback
        result: dict[Any, Any] = {}
        if event.anchor is not None:
            self.anchor(event, result)
        get_event = self.parser.get_event
        plain_values = _PLAIN_VALUES
        merges: list[dict[Any, Any]] = []
        key_event = get_event()
        while type(key_event) is not yaml.MappingEndEvent:
            if type(key_event) is not ScalarEvent or key_event.tag is not None:
                raise _Fallback  # a collection, an alias or a tagged key
            key = key_event.value
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
            value = get_event()
            # An untagged scalar without anchor, the most common value, is read right here.
            if type(value) is ScalarEvent and value.tag is None and value.anchor is None:
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
