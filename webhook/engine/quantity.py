"""Kubernetes resource quantities (`100m`, `256Mi`, `1e3`), parsed the way the API server does.

A quantity that does not parse is a policy finding, not an error: the object is still judged
by every other rule.
"""

from __future__ import annotations

import re
from decimal import Decimal
from functools import lru_cache

# <number><suffix>, where suffix is binary SI, decimal SI or a decimal exponent.
# Signs are part of the grammar, but a resource amount may never be negative.
_QUANTITY = re.compile(
    r"^(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+))"
    r"(?P<suffix>Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+)?$"
)

_MULTIPLIERS: dict[str, Decimal] = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}


def parse_quantity(value: object) -> Decimal | None:
    """The amount a resource quantity stands for, or None when it is not a valid amount.

    Numbers are accepted as the API server accepts them in JSON (`cpu: 2`); booleans,
    negative amounts and malformed strings (`1GB`, `500mi`, `''`) are not.
    """
    if type(value) is str:  # the common case first: quantities are mostly strings
        return _parse_text(value)
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return Decimal(value) if value >= 0 else None
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")) or value < 0:
            return None
        return Decimal(repr(value))
    if isinstance(value, str):
        return _parse_text(value)
    return None


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> Decimal | None:
    match = _QUANTITY.match(text)
    if match is None:
        return None
    number = Decimal(match.group("number"))
    if number < 0:
        return None
    suffix = match.group("suffix") or ""
    if suffix[:1] in ("e", "E"):
        exponent = int(suffix[1:])
        # Far beyond any real amount, and beyond what Decimal represents without trapping.
        if abs(exponent) > 1000:
            return None
        return number.scaleb(exponent)
    return number * _MULTIPLIERS[suffix]


def is_whole(amount: Decimal) -> bool:
    """True when the amount is an integer count (GPUs cannot be split by a request)."""
    return amount == amount.to_integral_value()
