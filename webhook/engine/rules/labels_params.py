"""The label policy's parameters (webhook.engine.rules.labels holds the rule).

A module of their own, as webhook.engine.rules.gpu_params: the rule is compiled by mypyc in
the image (setup.py), and a pydantic model with a validator cannot be in a compiled module.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import field_validator

from webhook.engine.rules._base import Params

__all__ = ["RequireLabelsParams"]

# A Kubernetes label key: an optional DNS subdomain prefix and '/', then a name of up to 63
# characters, alphanumeric at both ends, with '-', '_' and '.' between.
_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_LABEL_KEY = re.compile(rf"(?:{_PREFIX}/)?{_NAME}")
_SHAPE = ("each item of labels is a label key or a list of alternative keys, e.g. "
          "[[app, app.kubernetes.io/name], team]")


class RequireLabelsParams(Params):
    # Every item must be present; an item that is a list is satisfied by any one of its keys.
    labels: tuple[tuple[str, ...], ...] = (("app", "app.kubernetes.io/name"),)

    @field_validator("labels", mode="before")
    @classmethod
    def _alternatives(cls, value: Any) -> Any:
        """`app` stands for [app]; anything else than a key or a list of keys is refused with
        the shape it should have."""
        if not isinstance(value, list | tuple):
            raise ValueError(f"expected a list; {_SHAPE}")
        items = []
        for number, item in enumerate(value, 1):
            keys = [item] if isinstance(item, str) else item
            if not isinstance(keys, list | tuple) or not keys:
                raise ValueError(f"item {number} is {_shown(item)}; {_SHAPE}")
            for key in keys:
                if not isinstance(key, str):
                    raise ValueError(f"item {number} holds {_shown(key)}; {_SHAPE}")
                if not _is_label_key(key):
                    raise ValueError(f"item {number}: {key!r} is not a Kubernetes label key")
            items.append(tuple(keys))
        return tuple(items)


def _is_label_key(key: str) -> bool:
    prefix = key.rpartition("/")[0]
    return len(prefix) <= 253 and _LABEL_KEY.fullmatch(key) is not None


def _shown(value: Any) -> str:
    if isinstance(value, list | tuple):
        return "an empty list" if not value else "a list of lists"
    names = {dict: "a mapping", bool: "a boolean", int: "a number", float: "a number",
             type(None): "null"}
    return names.get(type(value), type(value).__name__)
