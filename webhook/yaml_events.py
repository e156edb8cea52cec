"""YAML to Python objects straight from libyaml's events, and where each field was read."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import yaml

from webhook.engine.yaml_limits import RECURSIVE, LimitError, depth_problem, expansion_problem
from webhook.yaml11 import TYPED_FIRST, CParser, KubernetesConstructor, KubernetesResolver, problem


class Positions:
    """Where the fields of one document are: the parser's mark of each key of its mappings and
    each item of its sequences, by the identity of the dict or list read (so they hold while
    the document's object lives, and an alias points at its anchor). Marks are kept as the
    parser made them; lines and columns are worked out only for the fields asked about."""

    __slots__ = ("marks", "offset")

    def __init__(self, marks: dict[int, Any], offset: int) -> None:
        self.marks = marks  # id(dict) -> {key: mark}, id(list) -> [mark per item]
        self.offset = offset  # lines before the part of the file that was read

    def find(self, obj: Any, path: Sequence[object]) -> tuple[int, int] | None:
        """(line, column) of the deepest field along a path that is in the source. A segment
        is any key YAML allows (`~: x` is a key None), found as the text it was written in."""
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


def _index(segment: object) -> int:
    """A path's segment as an index into a sequence, or -1: a JSON pointer's token
    (a CEL mutation's path) names an item by its digits."""
    if isinstance(segment, int) and not isinstance(segment, bool):
        return segment
    return int(segment) if isinstance(segment, str) and segment.isascii() \
        and segment.isdigit() else -1


# (line, column, object, error, where its fields are (None after an error))
Read = tuple[int, int, Any, str, Positions | None]


class Fallback(Exception):
    """The fast reader met something it leaves to PyYAML's constructor (see EventReader)."""


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
    if text and text[0] not in TYPED_FIRST:
        value: Any = text  # no resolver is added for its first character: a string
    else:
        tag = _RESOLVER.resolve(yaml.ScalarNode, text, (True, False))  # type: ignore[no-untyped-call]
        if tag == _MERGE_TAG:
            raise Fallback  # a plain `<<` outside a key: PyYAML's error message
        value = KubernetesConstructor().construct_document(yaml.ScalarNode(tag, text))
    if len(_PLAIN_VALUES) >= 65536:
        _PLAIN_VALUES.clear()
    _PLAIN_VALUES[text] = value
    return value


class EventReader:
    """YAML to Python objects straight from libyaml's events, with the loader's exact rules.

    PyYAML's loader builds a node tree, resolves every scalar with regexes and constructs
    through generic dispatch, which costs more than parsing itself. Manifests are untagged
    mappings, sequences and scalars, so this reads the events once: quoted and block scalars
    are strings, plain ones go through the same resolver and constructor (cached by text), and
    anchors, aliases and merge keys follow PyYAML's flatten_mapping. Anything else (an explicit
    tag, a duplicate key, a key that is a collection or an alias, an odd merge, an undefined or
    repeated anchor) raises Fallback and the whole stream is read by KubernetesLoader, so
    results and error messages never depend on which reader ran.
    """

    def __init__(self, data: bytes | str, offset: int = 0) -> None:
        if CParser is None:  # pragma: no cover - PyYAML built without libyaml
            raise Fallback
        self.parser = CParser(data)
        self.offset = offset
        # name -> [value, mark, nodes it stands for, its height]; the last two are None
        # while the anchored collection is still being read
        self.anchors: dict[str, list[Any]] = {}
        self.marks: dict[int, Any] = {}  # see Positions
        # See webhook.engine.yaml_limits: nodes read (aliases counted as what they expand
        # to), how many of them through aliases, the nesting depth now and the deepest yet.
        self.decoded = self.aliased = self.depth = self.deepest = 0

    def documents(self) -> Iterator[Read]:
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
            yield *where, None, problem(error, self.offset), None
        except RecursionError:
            raise Fallback from None
        finally:
            parser.dispose()

    def node(self, event: Any) -> Any:
        kind = type(event)
        if kind is yaml.ScalarEvent:
            if event.tag is not None:
                raise Fallback
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
                raise Fallback  # undefined alias: the composer's error
            self.alias(found)
            return found[0]
        raise Fallback  # pragma: no cover - libyaml emits no other event here

    def alias(self, anchor: list[Any]) -> None:
        """Count what an alias expands to; past the bounds, the document is refused, at the
        anchor (as yaml_limits.check_node does for PyYAML's reader)."""
        _, mark, size, height = anchor
        if size is None:
            raise LimitError(RECURSIVE, mark)
        self.decoded += size
        self.aliased += size
        self.deepest = max(self.deepest, self.depth + height)
        refused = expansion_problem(self.decoded, self.aliased) or \
            depth_problem(self.depth + height)
        if refused:
            raise LimitError(refused, mark)

    def sequence(self, event: Any) -> list[Any]:
        if event.tag is not None:
            raise Fallback
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
            raise Fallback  # a duplicate anchor: the composer's error
        scalar = type(event) is ScalarEvent
        self.anchors[event.anchor] = [value, event.start_mark, 1 if scalar else None,
                                      0 if scalar else None]

    def mapping(self, event: Any) -> dict[Any, Any]:
        if event.tag is not None:
            raise Fallback
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
                raise Fallback  # a collection, an alias or a tagged key
            key: Any = key_event.value
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
                raise Fallback  # a duplicate key: PyYAML names the first one it meets
            marks[key] = key_event.start_mark
            value: Any = get_event()
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
                    raise Fallback
                flattened.update(merged)
            if any(key in flattened for key in result):
                raise Fallback
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
        raise Fallback
