"""The Kubernetes CEL library functions that policies commonly need, for the CEL runtime.

Kubernetes gives quantities, URLs, IPs and CIDRs types of their own; the runtime quickq-guard
uses cannot define types from Python, so here they are strings in canonical form
(`quantity('1Gi') == quantity('1024Mi')` holds, as in Kubernetes) and their methods are
string methods. docs/cel.md lists what is supported and what is not.
"""

from __future__ import annotations

import ipaddress
import json
import math
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import re2
from cel_expr_python import cel as _cel

from webhook.engine.cel import urls
from webhook.engine.linear import Pattern
from webhook.engine.quantity import EXACT, parse_quantity

STRING, BOOL, INT, DOUBLE, DYN = (_cel.Type.STRING, _cel.Type.BOOL, _cel.Type.INT,
                                  _cel.Type.DOUBLE, _cel.Type.DYN)
LIST = _cel.Type.List(DYN)


# --- quantities: quantity('1Gi'), isQuantity(), .isGreaterThan(), .compareTo(), ... --------

def _amount(text: str) -> Decimal:
    negative = text.startswith("-")
    amount = parse_quantity(text[1:] if negative else text)
    if amount is None or not isinstance(text, str):
        raise ValueError(f"{_shown(text)} is not a quantity")
    return -amount if negative else amount


def _canonical(amount: Decimal) -> str:
    text = format(amount.normalize(EXACT), "f")
    return "0" if text in ("-0", "0") else text


def _parses(parse: Callable[[str], object], text: str) -> bool:
    """Whether `parse` takes the text: what isQuantity, isIP and isCIDR ask."""
    try:
        parse(text)
    except ValueError:
        return False
    return True


def quantity(text: str) -> str:
    return _canonical(_amount(text))


def is_quantity(text: str) -> bool:
    return _parses(_amount, text)


def compare_to(left: str, right: str) -> int:
    a, b = _amount(left), _amount(right)
    return (a > b) - (a < b)


def as_integer(text: str) -> int:
    amount = _amount(text)
    if amount != amount.to_integral_value() or not -2**63 <= amount < 2**63:
        raise ValueError(f"quantity {text} is not an integer of 64 bits")
    return int(amount)


def _is_integer(text: str) -> bool:
    """Kubernetes': an integer of 64 bits (webhook.engine.cel.checked refuses, at load, a
    quantity whose scale would make it none there)."""
    amount = _amount(text)
    return amount == amount.to_integral_value() and -2**63 <= amount < 2**63


def _plus(left: str, right: str | int, sign: int) -> str:
    other = Decimal(right) if isinstance(right, int) else _amount(right)
    return _canonical(EXACT.add(_amount(left), EXACT.multiply(sign, other)))


def _sign(text: str) -> int:
    amount = _amount(text)
    return (amount > 0) - (amount < 0)


# Kubernetes keeps a quantity as it was written or summed (Go's resource.Quantity: digits and
# a power of ten in an int64, or an arbitrary decimal, inf.Dec, for what does not fit), and
# isInteger(), asInteger() and asApproximateFloat() answer from that; quickq-guard keeps the
# amount. GoQuantity models Kubernetes' for a quantity made of literals, so that the checker
# (webhook.engine.cel.checked) can refuse at load what Kubernetes answers otherwise.
GoQuantity = tuple[int, int, bool]  # (digits, power of ten, whether an inf.Dec)
_INT64_MAX = 2**63 - 1
_GO_SUFFIXES = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15,
                "E": 18}
_GO_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_GO_QUANTITY = Pattern(r"([+-]?)0*([0-9]*)(?:\.([0-9]*))?([a-zA-Z]*|[eE][+-]?[0-9]+)")


def go_quantity(text: str) -> GoQuantity | None:
    """Go's resource.ParseQuantity of the text, as Kubernetes' quantity() keeps it; None
    where it does not parse."""
    if parse_quantity(text.lstrip("+-")) is None:
        return None
    if text == "0":
        return 0, 0, False
    found = _GO_QUANTITY.fullmatch(text)
    if found is None:
        return None
    sign, number, fraction, suffix = found.groups()
    number, fraction = number or "0", fraction or ""
    negative = sign == "-"
    if suffix in _GO_BINARY:
        power, binary = _GO_BINARY[suffix], True
    else:
        binary = False
        power = _GO_SUFFIXES[suffix] if suffix in _GO_SUFFIXES else int(suffix[1:])
    digits = len(number) + len(fraction)
    if binary:
        precision = (15 - len(number) - int(power * 3 / 10) - 1) if not fraction else -1
        scale, mantissa = 0, 1 << power
    else:
        precision, scale, mantissa = 18 - digits, power, 1
    if precision >= 0 and scale - len(fraction) >= -9:
        value = int(number + fraction) * mantissa
        if value <= _INT64_MAX:
            return (-value if negative else value), scale - len(fraction), False
    exact = EXACT.multiply(Decimal(f"{number}.{fraction or '0'}"),
                           Decimal(2 ** power) if binary else Decimal(1).scaleb(power))
    if binary and exact > _INT64_MAX:  # capped, at a power of ten of 0
        return (-_INT64_MAX if negative else _INT64_MAX), 0, True
    # rounded up to nanos, which leaves the digits at a power of ten of -9
    unscaled = int(exact.scaleb(9, EXACT).to_integral_value(rounding="ROUND_UP", context=EXACT))
    return (-unscaled if negative else unscaled), (-9 if unscaled else 0), True


def go_add(left: GoQuantity, right: GoQuantity) -> GoQuantity:
    """Quantity.Add: digits at the smaller power of ten in an int64, else an inf.Dec."""
    (a, a_power, a_dec), (b, b_power, b_dec) = left, right
    if not a_dec and not b_dec:
        if b == 0:
            return left
        if a == 0:
            return right
        power = min(a_power, b_power)
        total = a * 10 ** (a_power - power) + b * 10 ** (b_power - power)
        fits = all(-_INT64_MAX - 1 <= v <= _INT64_MAX
                   for v in (a * 10 ** (a_power - power), b * 10 ** (b_power - power), total))
        if fits:
            return total, power, False
    power = min(a_power, b_power)
    return a * 10 ** (a_power - power) + b * 10 ** (b_power - power), power, True


def go_is_integer(quantity: GoQuantity) -> bool:
    """Quantity.AsInt64()'s success: digits in an int64 at a power of ten of 0 or more."""
    value, power, dec = quantity
    return not dec and power >= 0 and -_INT64_MAX - 1 <= value * 10 ** power <= _INT64_MAX


def go_approximate_float(quantity: GoQuantity) -> float:
    """Quantity.AsApproximateFloat64(): the digits as a double times Go's math.Pow10."""
    value, power, _ = quantity
    return float(value) if power == 0 else float(value) * _pow10(power)


def _pow10(power: int) -> float:
    """Go's math.Pow10, from its tables: 1e32k times, or over, 1e0 to 1e31."""
    if 0 <= power <= 308:
        return float(f"1e{power // 32 * 32}") * float(f"1e{power % 32}")
    if -323 <= power < 0:
        return float(f"1e-{-power // 32 * 32}") / float(f"1e{-power % 32}")
    return 0.0 if power < 0 else math.inf


def amount_of(quantity: GoQuantity) -> Decimal:
    value, power, _ = quantity
    return Decimal(value).scaleb(power, EXACT)


# --- URLs: url('https://...'), isURL(), .getScheme(), .getHost(), ... ----------------------
# As Go's net/url has them (webhook.engine.cel.urls): a URL is the text Go's String() writes,
# so that `==` compares what Kubernetes compares.

def url(text: str) -> str:
    """Kubernetes accepts what url.ParseRequestURI does: an absolute URL or path."""
    try:
        urls.parse_request_uri(text)
        return urls.parse(text).text()
    except ValueError:
        raise ValueError(f"{_shown(text)} is not an absolute URL or path") from None


def is_url(text: str) -> bool:
    """Kubernetes' isURL: whether Go's url.ParseRequestURI accepts the text."""
    return _parses(urls.parse_request_uri, text)


def _url(text: str) -> urls.URL:
    return urls.parse(url(text))


# --- IPs and CIDRs: ip('10.0.0.1'), cidr('10.0.0.0/8').containsIP(...), ... --------------

def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if "%" in text:
        raise ValueError(f"{_shown(text)}: IP addresses with zones are not allowed")
    try:
        address = ipaddress.ip_address(text)
    except ValueError:
        raise ValueError(f"{_shown(text)} is not an IP address") from None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        raise ValueError(f"{_shown(text)}: IPv4-mapped IPv6 addresses are not allowed")
    return address


def _network(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    address, slash, length = text.partition("/")
    if not slash or not (length.isascii() and length.isdigit()) or (
            length.startswith("0") and length != "0"):  # Go's netip: no leading zero
        raise ValueError(f"{_shown(text)} is not a CIDR")
    _address(address)
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError:
        raise ValueError(f"{_shown(text)} is not a CIDR") from None


def ip(text: str) -> str:
    return str(_address(text))


def is_ip(text: str) -> bool:
    return _parses(_address, text)


def cidr(text: str) -> str:
    network = _network(text)
    return f"{_address(text.partition('/')[0])}/{network.prefixlen}"


def is_cidr(text: str) -> bool:
    return _parses(_network, text)


def _contains_ip(network: str, address: str) -> bool:
    return _address(address) in _network(network)


def _contains_cidr(network: str, other: str) -> bool:
    inner, outer = _network(other), _network(network)
    return inner.version == outer.version and inner.subnet_of(outer)  # type: ignore[arg-type]


# --- lists: .isSorted(), .sum(), .min(), .max(), .slice(), .indexOf(), .lastIndexOf() -----
# Declared with Kubernetes' overloads (its lists library, and cel-go's slice), so that the type
# checker refuses what the API server refuses when a policy is created: `['a'].sum()`,
# `[[1]].min()`, `[1].indexOf('a')` ("found no matching overload"), and types the result as
# Kubernetes does (`[1u, 2u].sum()` is a uint). Type parameters (`list<~A>`) can only be
# declared through the runtime's environment config, so the whole library is declared there
# (`config`). Every call is evaluated by its guard (webhook.engine.cel.go), which binds the
# list and hands it to Python with its timestamps and durations exact; a call whose list the
# guard cannot bind is refused at load (webhook.engine.cel.checked). The runtime still needs an
# implementation of each function to plan a program: one overload per function, of a list
# type no expression has (UNBOUND_LIST), serves every list at run time; it is never reached.

COMPARABLE = ("int", "uint", "double", "bool", "duration", "timestamp", "string", "bytes")
SUMMABLE = ("int", "uint", "double", "duration")
UNBOUND_LIST = "list<qq__unbound>"
LIST_METHODS = ("isSorted", "sum", "min", "max", "slice")

# name -> (overload id, signature, result, implementation or None: only type-checked)
Declarations = dict[str, list[tuple[str, str, str, Callable[..., Any] | None]]]


def _unbound(*_: Any) -> Any:
    raise ValueError("no such overload (a lists library call whose list was not bound)")


def slice_indexes(size: int, start: int, end: int) -> range:
    """The indexes list.slice(start, end) takes from a list of `size` items, refusing what
    Python would forgive, as Kubernetes does."""
    if start < 0 or end < 0:
        raise ValueError(f"cannot slice({start}, {end}), negative indexes not supported")
    if start > end:
        raise ValueError(f"cannot slice({start}, {end}), start index must be less than or "
                         "equal to end index")
    if end > size:
        raise ValueError(f"cannot slice({start}, {end}), list is length {size}")
    return range(start, end)


LISTS: Declarations = {
    "isSorted": [*((f"list_{kind}_is_sorted", f"list<{kind}>.isSorted()", "bool", None)
                   for kind in COMPARABLE),
                 ("qq__is_sorted_unbound", f"{UNBOUND_LIST}.isSorted()", "bool", _unbound)],
    "sum": [*((f"list_{kind}_sum", f"list<{kind}>.sum()", kind, None) for kind in SUMMABLE),
            ("qq__sum_unbound", f"{UNBOUND_LIST}.sum()", "dyn", _unbound)],
    **{name: [*((f"list_{kind}_{name}", f"list<{kind}>.{name}()", kind, None)
                for kind in COMPARABLE),
              (f"qq__{name}_unbound", f"{UNBOUND_LIST}.{name}()", "dyn", _unbound)]
       for name in ("min", "max")},
    "slice": [("list_slice", "list<~T>.slice(int, int)", "list<~T>", None),
              ("qq__slice_unbound", f"{UNBOUND_LIST}.slice(int, int)", "dyn", _unbound)],
}


def config(*declared: Declarations) -> tuple[Any, dict[str, Callable[..., Any]]]:
    """The runtime's environment config declaring these functions, and the implementations
    by overload id (NewEnv's `config` and `function_impls`)."""
    functions = [{"name": name, "overloads": [
        {"id": overload, "signature": signature, "return": result}
        for overload, signature, result, _ in overloads]}
        for declarations in declared for name, overloads in declarations.items()]
    impls = {overload: impl for declarations in declared
             for overloads in declarations.values()
             for overload, _, _, impl in overloads if impl is not None}
    return _cel.NewEnvConfigFromYaml(json.dumps({"functions": functions})), impls


# --- regular expressions: .find(), .findAll() ---------------------------------------------
# RE2, as `matches` and Kubernetes use: the same syntax, and time linear in the text, so a
# pattern like (a+)+$ cannot be made to backtrack for minutes by the object under review.
# Compiled at each call, not cached: the pattern may be read from the object, and a cache
# keyed by it would keep what objects bring.

def _regex(pattern: str) -> Any:
    problem = go_regex_problem(pattern)
    if problem:
        raise ValueError(f"invalid regular expression: {problem}")
    options = re2.Options()
    options.log_errors = False  # a bad pattern is the policy's error, not a log line
    try:
        return re2.compile(pattern, options)
    except re2.error as error:
        message = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) \
            else str(error)
        # RE2 ends its message with the part of the pattern it stopped at; the pattern may
        # be a value read from the object, so only the reason is kept.
        raise ValueError(f"invalid regular expression: {message.split(':')[0]}") from None


def go_regex_problem(pattern: str) -> str | None:
    """What Go's regexp refuses in a pattern RE2 takes: `\\C` (any byte), which Kubernetes
    refuses as an invalid escape sequence. None when there is nothing."""
    index = 0
    while index < len(pattern):
        if pattern[index] != "\\":
            index += 1
            continue
        following = pattern[index + 1:index + 2]
        if following == "Q":  # literal text up to \E
            end = pattern.find("\\E", index + 2)
            index = len(pattern) if end < 0 else end + 2
            continue
        if following == "C":
            return "invalid escape sequence: \\C"
        index += 2
    return None


def regex_problem(pattern: str) -> str | None:
    """Why a pattern does not compile, as Go's regexp and RE2 both must take it, or None."""
    try:
        _regex(pattern)
    except ValueError as error:
        return str(error)
    return None


def regex_matches(text: str, pattern: str) -> bool:
    """`matches` with a pattern that is not a literal (a literal one is checked at load and
    run by the runtime's own RE2): as Go's regexp, which refuses `\\C`."""
    return _regex(pattern).search(text) is not None


def _find(text: str, pattern: str) -> str:
    found = _regex(pattern).search(text)
    return str(found.group()) if found else ""


def _find_all(text: str, pattern: str, limit: int = -1) -> list[str]:
    """Go's FindAllString(text, limit): successive matches, but an empty match right where
    the previous one ended is not one (`'aaa'.findAll('a*')` is ["aaa"], not ["aaa", ""])."""
    regex = _regex(pattern)
    found: list[str] = []
    position, previous_end = 0, -1
    while (limit < 0 or len(found) < limit) and position <= len(text):
        match = regex.search(text, position)
        if match is None:
            break
        start, end = match.span()
        accepted = True
        if end == position:  # an empty match
            accepted = start != previous_end
            position += 1
        else:
            position = end
        previous_end = end
        if accepted:
            found.append(str(match.group()))
    return found


def _shown(text: Any) -> str:
    """A value as an error names it: by its length only, since it may be a secret."""
    if not isinstance(text, str):
        return f"a {type(text).__name__}"
    return f"a string of {len(text)} characters"


def _declare(name: str, *overloads: tuple[str, Any, list[Any], bool, Callable[..., Any]]
             ) -> tuple[str, Any]:
    return name, _cel.FunctionDecl(name, [
        _cel.Overload(overload_id, result, parameters, is_member=member, impl=impl)
        for overload_id, result, parameters, member, impl in overloads])


_KUBERNETES = [
    _declare("quantity", ("quantity_string", STRING, [STRING], False, quantity)),
    _declare("isQuantity", ("is_quantity_string", BOOL, [STRING], False, is_quantity)),
    _declare("compareTo", ("quantity_compare_to", INT, [STRING, STRING], True, compare_to)),
    _declare("isGreaterThan", ("quantity_is_greater_than", BOOL, [STRING, STRING], True,
                               lambda a, b: compare_to(a, b) > 0)),
    _declare("isLessThan", ("quantity_is_less_than", BOOL, [STRING, STRING], True,
                            lambda a, b: compare_to(a, b) < 0)),
    _declare("add",
             ("quantity_add", STRING, [STRING, STRING], True, lambda a, b: _plus(a, b, 1)),
             ("quantity_add_int", STRING, [STRING, INT], True, lambda a, b: _plus(a, b, 1))),
    _declare("sub",
             ("quantity_sub", STRING, [STRING, STRING], True, lambda a, b: _plus(a, b, -1)),
             ("quantity_sub_int", STRING, [STRING, INT], True, lambda a, b: _plus(a, b, -1))),
    _declare("asInteger", ("quantity_as_integer", INT, [STRING], True, as_integer)),
    _declare("asApproximateFloat", ("quantity_as_float", DOUBLE, [STRING], True,
                                    lambda a: float(_amount(a)))),
    _declare("isInteger", ("quantity_is_integer", BOOL, [STRING], True, _is_integer)),
    _declare("sign", ("quantity_sign", INT, [STRING], True, _sign)),
    _declare("url", ("url_string", STRING, [STRING], False, url)),
    _declare("isURL", ("is_url_string", BOOL, [STRING], False, is_url)),
    _declare("getScheme", ("url_get_scheme", STRING, [STRING], True,
                           lambda u: _url(u).scheme)),
    _declare("getHost", ("url_get_host", STRING, [STRING], True, lambda u: _url(u).host)),
    _declare("getHostname", ("url_get_hostname", STRING, [STRING], True,
                             lambda u: _url(u).hostname())),
    _declare("getPort", ("url_get_port", STRING, [STRING], True, lambda u: _url(u).port())),
    _declare("getEscapedPath", ("url_get_escaped_path", STRING, [STRING], True,
                                lambda u: _url(u).escaped_path())),
    _declare("getQuery", ("url_get_query", _cel.Type.Map(STRING, LIST), [STRING], True,
                          lambda u: _url(u).query())),
    _declare("ip", ("ip_string", STRING, [STRING], False, ip),
             ("cidr_ip", STRING, [STRING], True, lambda c: str(_address(c.partition("/")[0])))),
    _declare("isIP", ("is_ip_string", BOOL, [STRING], False, is_ip)),
    _declare("ip.isCanonical", ("ip_is_canonical", BOOL, [STRING], False,
                                lambda t: ip(t) == t)),
    _declare("family", ("ip_family", INT, [STRING], True, lambda a: _address(a).version)),
    _declare("isUnspecified", ("ip_is_unspecified", BOOL, [STRING], True,
                               lambda a: _address(a).is_unspecified)),
    _declare("isLoopback", ("ip_is_loopback", BOOL, [STRING], True,
                            lambda a: _address(a).is_loopback)),
    _declare("isLinkLocalMulticast", ("ip_is_link_local_multicast", BOOL, [STRING], True,
                                      lambda a: _link_local_multicast(_address(a)))),
    _declare("isLinkLocalUnicast", ("ip_is_link_local_unicast", BOOL, [STRING], True,
                                    lambda a: _address(a).is_link_local)),
    _declare("isGlobalUnicast", ("ip_is_global_unicast", BOOL, [STRING], True,
                                 lambda a: _global_unicast(_address(a)))),
    _declare("cidr", ("cidr_string", STRING, [STRING], False, cidr)),
    _declare("isCIDR", ("is_cidr_string", BOOL, [STRING], False, is_cidr)),
    _declare("containsIP", ("cidr_contains_ip", BOOL, [STRING, STRING], True, _contains_ip)),
    _declare("containsCIDR", ("cidr_contains_cidr", BOOL, [STRING, STRING], True,
                              _contains_cidr)),
    _declare("masked", ("cidr_masked", STRING, [STRING], True,
                        lambda c: str(_network(c)))),
    _declare("prefixLength", ("cidr_prefix_length", INT, [STRING], True,
                              lambda c: _network(c).prefixlen)),
    _declare("jsonpatch.escapeKey", ("jsonpatch_escape_key", STRING, [STRING], False,
                                     lambda key: key.replace("~", "~0").replace("/", "~1"))),
    _declare("find", ("string_find", STRING, [STRING, STRING], True, _find)),
    _declare("findAll",
             ("string_find_all", _cel.Type.List(STRING), [STRING, STRING], True, _find_all),
             ("string_find_all_n", _cel.Type.List(STRING), [STRING, STRING, INT], True,
              _find_all)),
]
KUBERNETES_FUNCTIONS = [declared for _, declared in _KUBERNETES]
# Served by Python: the runtime must not hand them an optional (it cannot convert one). So
# is format, through its guard (webhook.engine.cel.go), named so that a refusal says where
# the expression as written has the optional.
PYTHON_FUNCTIONS = frozenset((*(name for name, _ in _KUBERNETES), *LISTS, "format"))


def _link_local_multicast(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Go's netip: 224.0.0.0/24, or an IPv6 multicast address of link-local scope, whatever
    its flags (ff02::1, ff12::1)."""
    if address.version == 4:
        return address in ipaddress.ip_network("224.0.0.0/24")
    return int(address) >> 112 & 0xFF0F == 0xFF02


def _global_unicast(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Go's net.IP.IsGlobalUnicast: not unspecified, loopback, multicast, link-local or
    the IPv4 broadcast address."""
    if address.version == 4 and str(address) == "255.255.255.255":
        return False
    return not (address.is_unspecified or address.is_loopback or address.is_multicast
                or address.is_link_local)
