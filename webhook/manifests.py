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
    for given in paths:
        if given == "-":
            yield from read_text(sys.stdin.buffer.read(), "<stdin>")
            continue
        path = Path(given)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*")
                           if p.is_file() and p.suffix.lower() in MANIFEST_SUFFIXES)
            for file in files:
                yield from read_file(file)
        elif path.exists():
            yield from read_file(path)
        else:
            yield Document(str(path), error="no such file or directory")


def read_file(path: Path) -> Iterator[Document]:
    try:
        data = path.read_bytes()
    except OSError as error:
        yield Document(str(path), error=f"cannot read: {error.strerror}")
        return
    yield from read_text(data, str(path))


def read_text(data: bytes | str, name: str) -> Iterator[Document]:
    """Every object in a YAML/JSON stream; `kind: List` objects are opened into their items."""
    loader = KubernetesLoader(data)
    number = 0
    try:
        while loader.check_node():
            number += 1
            obj = loader.get_data()
            if obj is None:
                continue  # an empty document, as between `---` separators
            yield from _expand(obj, f"{name}:{number}")
    except yaml.YAMLError as error:
        yield Document(f"{name}:{number or 1}", error=f"invalid YAML: {_problem(error)}")
    finally:
        loader.dispose()


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

# libyaml's parser when PyYAML was built with it (PyPI's wheels are): several times faster.
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
