"""Bounds on what a YAML document may expand to: aliases and nesting depth.

A few hundred bytes of anchors and aliases ("billion laughs") stand for a billion nodes. The
reader shares the anchored object instead of copying it, but anything that walks the object
(a schema check, CEL's conversion of `object`) walks every expansion: gigabytes and minutes,
or a crash of the C++ CEL runtime on a deep enough object. So a document is refused before
anything converts it, with the rule Kubernetes' own YAML reader follows (go-yaml, since
v2.2.8): past 1,000 nodes and 100 of them expanded from aliases, the share of alias-expanded
nodes may be at most 99% up to 400,000 nodes, falling to 10% at 4,000,000. Depth is bounded
by libyaml's own nesting limit, counted through aliases too.
"""

from __future__ import annotations

from typing import Any

import yaml

MAX_DEPTH = 1000  # libyaml's limit on nesting as written; aliases may not deepen past it
_LOW, _HIGH = 400_000, 4_000_000


def allowed_alias_ratio(decoded: int) -> float:
    """The share of nodes that may come from aliases in a document of `decoded` nodes."""
    if decoded <= _LOW:
        return 0.99
    if decoded >= _HIGH:
        return 0.10
    return 0.99 - 0.89 * (decoded - _LOW) / (_HIGH - _LOW)


def expansion_problem(decoded: int, aliased: int) -> str:
    """Why a document of `decoded` nodes, `aliased` of them through aliases, is refused, or
    '' when it is not."""
    if aliased > 100 and decoded > 1000 and aliased / decoded > allowed_alias_ratio(decoded):
        return (f"aliases expand this document past {decoded:,} nodes ({aliased:,} of them "
                "copies of anchors): refused as an alias bomb, as Kubernetes refuses such "
                "excessive aliasing")
    return ""


def depth_problem(depth: int) -> str:
    if depth > MAX_DEPTH:
        return (f"aliases nest this document more than {MAX_DEPTH} levels deep: refused "
                "(deeper nesting cannot be judged safely)")
    return ""


class LimitError(yaml.MarkedYAMLError):
    """A document past the bounds above; its mark is the alias or node where it went past."""

    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem=problem, problem_mark=mark)


def check_node(root: yaml.Node) -> None:
    """Raise LimitError when a composed document (PyYAML's node graph, where an alias is the
    anchor's node again) expands past the bounds, or holds an anchor inside itself. Counts in
    document order, as the fast reader of manifests does, so both stop at the same anchor."""
    size: dict[int, int] = {}
    height: dict[int, int] = {}  # levels of collections (a scalar: 0)
    unfinished: set[int] = set()
    decoded = aliased = 0
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 0, False)]
    while stack:
        node, depth, done = stack.pop()
        key = id(node)
        children = _children(node)
        if done:
            unfinished.discard(key)
            size[key] = 1 + sum(size[id(child)] for child in children)
            height[key] = (1 + max((height[id(child)] for child in children), default=0)
                           if isinstance(node, yaml.CollectionNode) else 0)
            continue
        if key in unfinished:
            raise LimitError(RECURSIVE, node.start_mark)
        if key in size:  # an alias: counted as all it stands for
            decoded += size[key]
            aliased += size[key]
            problem = expansion_problem(decoded, aliased) or depth_problem(depth + height[key])
            if problem:
                raise LimitError(problem, node.start_mark)
            continue
        decoded += 1
        unfinished.add(key)
        stack.append((node, depth, True))
        stack.extend((child, depth + 1, False) for child in reversed(children))


RECURSIVE = "an anchor holds an alias of itself: the document would be infinite"


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []
