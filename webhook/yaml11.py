"""kubectl's YAML rules as PyYAML's resolver and constructor: go-yaml v2 types plain scalars
by YAML 1.1 (`yes`/`on`/`y` are booleans, `0755` is octal, timestamps stay strings) and refuses
duplicate keys. KubernetesLoader reads with them whatever the fast event reader
(webhook.yaml_events) leaves to PyYAML: tags, odd keys, odd merges.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

__all__ = [
    "TYPED_FIRST",
    "CParser",
    "KubernetesConstructor",
    "KubernetesLoader",
    "KubernetesResolver",
    "problem",
]


class KubernetesResolver(yaml.resolver.BaseResolver):
    """Plain-scalar typing as go-yaml v2 does it (the library behind kubectl's YAML)."""


# The characters a plain scalar of any type but string starts with: each resolver is added
# for the first characters its values can have, so a plain scalar that starts with none of
# these (or is empty) is a string, its text as written.
_typed_first: set[str] = set()


def _add(tag: str, pattern: str, first: str) -> None:
    KubernetesResolver.add_implicit_resolver(tag, re.compile(pattern, re.X), list(first))
    _typed_first.update(first)


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
TYPED_FIRST = frozenset(_typed_first)


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
    from yaml.cyaml import CParser  # type: ignore[attr-defined,unused-ignore]
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


def problem(error: yaml.YAMLError, offset: int = 0) -> str:
    """A reader's error as a line of text, with where it is (after `offset` lines)."""
    mark = getattr(error, "problem_mark", None)
    what = getattr(error, "problem", None) or str(error)
    context = getattr(error, "context", None)
    text = f"{context}: {what}" if context and "already" in str(what) else what
    if not mark:
        return str(text)
    return f"{text} (line {mark.line + 1 + offset}, column {mark.column + 1})"
