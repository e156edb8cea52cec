"""Kubernetes resource quantities (`100m`, `256Mi`, `1e3`), parsed the way the API server does.

A quantity that does not parse is a policy finding, not an error: the object is still judged
by every other rule.
"""

from __future__ import annotations

from decimal import Context, Decimal
from functools import lru_cache

# <number><suffix>, where suffix is binary SI, decimal SI or a decimal exponent.
# Signs are part of the grammar, but a resource amount may never be negative. Read by
# _split with string methods (linear in the text, as every matcher of object content).
_DIGITS = r"[0-9]+(\.[0-9]*)?|\.[0-9]+"
_SUFFIX = r"Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E|[eE][+-]?[0-9]+"
_ASCII_DIGITS = "0123456789"
# The grammar without a minus sign, as a JSON Schema pattern (ECMA regex) writes it.
NON_NEGATIVE_PATTERN = rf"^([+]?({_DIGITS}))({_SUFFIX})?$"

# Arithmetic on amounts is exact (the default context keeps 28 digits, and would read
# 99999999999999999999999999999999999999 as 1E+38 and lose a nano's round-up).
EXACT = Context(prec=10_000)

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


def _split(text: str) -> tuple[str, str] | None:
    """A quantity's number and suffix (`1.5`, `Gi`), or None when it is not one: the grammar
    above, read with string methods."""
    body = text[1:] if text[:1] in ("+", "-") else text
    rest = body.lstrip(_ASCII_DIGITS)
    digits = len(body) - len(rest)
    if rest[:1] == ".":
        fraction = rest[1:].lstrip(_ASCII_DIGITS)
        digits += len(rest) - 1 - len(fraction)
        rest = fraction
    if digits == 0:
        return None
    number = text[:len(text) - len(rest)]
    if rest in _MULTIPLIERS:
        return number, rest
    exponent = rest[2:] if rest[1:2] in ("+", "-") else rest[1:]
    if rest[:1] in ("e", "E") and exponent and exponent.lstrip(_ASCII_DIGITS) == "":
        return number, rest
    return None


# Parsing is most of require-requests' work, and the same few texts ("100m", "128Mi") come
# back in every object: caching those made a typical review 1.4x faster (benchmarks/
# engine_ab.py). Bounded in bytes, not only in entries: a text longer than CACHED_LENGTH (no
# real amount is) is parsed each time and never kept, so at most 4,096 texts of 32
# characters with their amounts (about 1 MB) stay, whatever objects bring.
CACHED_LENGTH = 32


def _parse_text(text: str) -> Decimal | None:
    return _parse_short(text) if len(text) <= CACHED_LENGTH else _parse_long(text)


@lru_cache(maxsize=4096)
def _parse_short(text: str) -> Decimal | None:
    return _parse_long(text)


def _parse_long(text: str) -> Decimal | None:
    split = _split(text)
    if split is None:
        return None
    number = Decimal(split[0])
    if number < 0:
        return None
    suffix = split[1]
    if suffix not in _MULTIPLIERS:  # a decimal exponent: 1e3, 1E-3 (1E and 1Ei are suffixes)
        exponent = int(suffix[1:])
        # Far beyond any real amount, and beyond what Decimal represents without trapping.
        if abs(exponent) > 1000:
            return None
        amount = number.scaleb(exponent, EXACT)
    else:
        amount = EXACT.multiply(number, _MULTIPLIERS[suffix])
    # As the API server reads it: precision beyond a nano-unit is rounded up, away from zero,
    # and a binary amount is capped at the largest int64.
    if _exponent(amount) < -9:
        amount = amount.quantize(_NANO, rounding="ROUND_UP", context=EXACT)
    if suffix.endswith("i") and amount > _MAX_INT64:
        amount = _MAX_INT64
    return amount


def is_whole(amount: Decimal) -> bool:
    """True when the amount is an integer count (GPUs cannot be split by a request)."""
    return amount == amount.to_integral_value()


_DECIMAL_SUFFIXES = {-9: "n", -6: "u", -3: "m", 0: "", 3: "k", 6: "M", 9: "G", 12: "T",
                     15: "P", 18: "E"}
_BINARY_SUFFIXES = {0: "", 1: "Ki", 2: "Mi", 3: "Gi", 4: "Ti", 5: "Pi", 6: "Ei"}
_NANO = Decimal("1e-9")
_MAX_INT64 = Decimal(2**63 - 1)


def canonical_quantity(value: object) -> object:
    """A quantity as the API server stores it (`0.5` -> `500m`, `1000m` -> `1`, `0.5Gi` ->
    `512Mi`): Quantity.String() in k8s.io/apimachinery. What does not parse is returned as
    written (the valid-resource-quantities policy names it)."""
    if value.__class__ is str:  # most quantities
        return _canonical_text(value) or value
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        text = str(value)
    elif isinstance(value, float):
        text = str(int(value)) if value.is_integer() else repr(value)
    elif isinstance(value, str):
        text = value
    else:
        return value
    return _canonical_text(text) or value


def _canonical_text(text: str) -> str | None:
    return _canonical_short(text) if len(text) <= CACHED_LENGTH else _canonical_long(text)


@lru_cache(maxsize=4096)
def _canonical_short(text: str) -> str | None:
    return _canonical_long(text)


def _canonical_long(text: str) -> str | None:
    split = _split(text)
    if split is None:
        return None
    amount, suffix = Decimal(split[0]), split[1]
    if suffix not in _MULTIPLIERS:  # a decimal exponent (1E and 1Ei are suffixes)
        exponent = int(suffix[1:])
        if abs(exponent) > 1000:
            return None
        amount, style = amount.scaleb(exponent, EXACT), "exponent"
    else:
        amount = EXACT.multiply(amount, _MULTIPLIERS[suffix])
        style = "binary" if suffix.endswith("i") else "decimal"
    # Precision beyond a nano-unit is rounded up, away from zero.
    if _exponent(amount) < -9:
        amount = amount.quantize(_NANO, rounding="ROUND_UP", context=EXACT)
    if amount == 0:
        return "0"
    if style == "binary" and amount > _MAX_INT64:  # the API server caps a binary amount
        amount = _MAX_INT64
    if style == "binary" and (-1024 < amount < 1024 or amount != amount.to_integral_value()):
        style = "decimal"
    if style == "binary":
        whole, power = int(amount), 0
        while whole % 1024 == 0 and power < 6:
            whole, power = whole // 1024, power + 1
        return f"{whole}{_BINARY_SUFFIXES[power]}"
    normal = amount.normalize(EXACT)
    sign, digits, _ = normal.as_tuple()
    exponent = _exponent(normal)
    shift = exponent % 3  # lower the exponent to a multiple of 3
    mantissa, exponent = int("".join(map(str, digits))) * 10 ** shift, exponent - shift
    number = f"{'-' if sign else ''}{mantissa}"
    if style == "exponent":
        return number + (f"e{exponent}" if exponent else "")
    found = _DECIMAL_SUFFIXES.get(exponent)
    return number + found if found is not None else f"{number}e{exponent}"


def _exponent(amount: Decimal) -> int:
    exponent = amount.as_tuple().exponent
    return exponent if isinstance(exponent, int) else 0  # finite: the grammar has no NaN
