"""URLs as Go's net/url reads and writes them, for Kubernetes' url library.

Kubernetes' `url(s)` takes what url.ParseRequestURI takes (an absolute URL or an absolute
path), reads it with url.Parse, and its getters and its `==` are the parsed URL's: the host
unescaped (`[fe80::1%25en0]` is `[fe80::1%en0]`), the path escaped as EscapedPath() writes
it (`/a b` is `/a%20b`), the query as Query() reads it (a pair with a `;` or a bad escape is
left out), and two URLs equal when String() writes them the same (`HTTPS://a/` is
`https://a/`). quickq-guard keeps a URL as that String() text, and reads it again for each
getter. Go works on bytes, so this does too (a str's UTF-8).

The Go is 1.26's, which Kubernetes 1.36 is built with: an http(s) host with two colons is
refused there (1.35, built with 1.25, read the last one as the port's).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

# encoding modes (net/url's)
PATH, PATH_SEGMENT, HOST, ZONE, USER_PASSWORD, QUERY_COMPONENT, FRAGMENT = range(7)
_MAX_QUERY_PARAMETERS = 10_000


def _should_escape(c: int, mode: int) -> bool:
    """Whether the byte is escaped in that part of a URL (net/url's shouldEscape)."""
    if 0x61 <= c <= 0x7A or 0x41 <= c <= 0x5A or 0x30 <= c <= 0x39:
        return False
    char = chr(c)
    if mode in (HOST, ZONE) and char in "!$&'()*+,;=:[]<>\"":
        return False
    if char in "-_.~":
        return False
    if char in "$&+,/:;=?@":
        if mode == PATH:
            return char == "?"
        if mode == PATH_SEGMENT:
            return char in "/;,?"
        if mode == USER_PASSWORD:
            return char in "@/?:"
        if mode == QUERY_COMPONENT:
            return True
        if mode == FRAGMENT:
            return False
    return not (mode == FRAGMENT and char in "!()*")


_HEX = b"0123456789abcdefABCDEF"


def _unescape(text: str, mode: int) -> str:
    """net/url's unescape: %XX escapes (and `+` in a query); raises ValueError."""
    data = text.encode()
    out = bytearray()
    index = 0
    while index < len(data):
        byte = data[index]
        if byte == 0x25:  # %
            pair = data[index + 1:index + 3]
            if len(pair) < 2 or pair[0] not in _HEX or pair[1] not in _HEX:
                raise ValueError("invalid URL escape")
            value = int(pair, 16)
            if mode == HOST and value < 0x80 and pair != b"25":
                raise ValueError("invalid URL escape")
            if mode == ZONE and pair != b"25" and value != 0x20 and _should_escape(value, HOST):
                raise ValueError("invalid URL escape")
            out.append(value)
            index += 3
            continue
        if byte == 0x2B and mode == QUERY_COMPONENT:  # +
            out.append(0x20)
        elif mode in (HOST, ZONE) and byte < 0x80 and _should_escape(byte, mode):
            raise ValueError("invalid character in host name")
        else:
            out.append(byte)
        index += 1
    return out.decode(errors="replace")


def _escape(text: str, mode: int) -> str:
    out = []
    for byte in text.encode():
        if byte == 0x20 and mode == QUERY_COMPONENT:
            out.append("+")
        elif _should_escape(byte, mode):
            out.append(f"%{byte:02X}")
        else:
            out.append(chr(byte))
    return "".join(out)


def _valid_encoded(text: str, mode: int) -> bool:
    return all(chr(byte) in "!$&'()*+,;=:@[]%" or not _should_escape(byte, mode)
               for byte in text.encode())


def _valid_optional_port(port: str) -> bool:
    return port == "" or (port[0] == ":" and all("0" <= c <= "9" for c in port[1:]))


def _valid_userinfo(text: str) -> bool:
    return all(c.isascii() and (c.isalnum() or c in "-._:~!$&'()*+,;=%@") for c in text)


@dataclass(frozen=True, slots=True)
class URL:
    """The fields of Go's url.URL that Kubernetes' library reads or String() writes."""

    scheme: str = ""
    opaque: str = ""
    user: str | None = None  # escaped as String() writes it
    host: str = ""
    omit_host: bool = False
    path: str = ""
    raw_path: str = ""
    force_query: bool = False
    raw_query: str = ""
    fragment: str = ""
    raw_fragment: str = ""

    def escaped_path(self) -> str:
        if self.raw_path and _valid_encoded(self.raw_path, PATH):
            try:
                if _unescape(self.raw_path, PATH) == self.path:
                    return self.raw_path
            except ValueError:
                pass
        return "*" if self.path == "*" else _escape(self.path, PATH)

    def _escaped_fragment(self) -> str:
        if self.raw_fragment and _valid_encoded(self.raw_fragment, FRAGMENT):
            try:
                if _unescape(self.raw_fragment, FRAGMENT) == self.fragment:
                    return self.raw_fragment
            except ValueError:
                pass
        return _escape(self.fragment, FRAGMENT)

    def hostname(self) -> str:
        return _split_host_port(self.host)[0]

    def port(self) -> str:
        return _split_host_port(self.host)[1]

    def query(self) -> dict[str, list[str]]:
        """Query(): the pairs that parse; a malformed one is left out."""
        found: dict[str, list[str]] = {}
        if self.raw_query.count("&") + 1 > _MAX_QUERY_PARAMETERS:
            return found
        for pair in self.raw_query.split("&"):
            if ";" in pair or not pair:
                continue
            key, _, value = pair.partition("=")
            try:
                key, value = _unescape(key, QUERY_COMPONENT), _unescape(value, QUERY_COMPONENT)
            except ValueError:
                continue
            found.setdefault(key, []).append(value)
        return found

    def text(self) -> str:
        """String()."""
        out = f"{self.scheme}:" if self.scheme else ""
        if self.opaque:
            out += self.opaque
        else:
            if (self.scheme or self.host or self.user is not None) and not (
                    self.omit_host and not self.host and self.user is None):
                if self.host or self.path or self.user is not None:
                    out += "//"
                if self.user is not None:
                    out += self.user + "@"
                out += _escape(self.host, HOST)
            path = self.escaped_path()
            if path and path[0] != "/" and self.host:
                out += "/"
            if not out and ":" in path.partition("/")[0]:
                out += "./"
            out += path
        if self.force_query or self.raw_query:
            out += "?" + self.raw_query
        if self.fragment:
            out += "#" + self._escaped_fragment()
        return out


def _split_host_port(host: str) -> tuple[str, str]:
    port = ""
    colon = host.rfind(":")
    if colon != -1 and _valid_optional_port(host[colon:]):
        host, port = host[:colon], host[colon + 1:]
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    return host, port


def parse_request_uri(text: str) -> URL:
    """url.ParseRequestURI: an absolute URL or an absolute path. Raises ValueError."""
    return _parse(text, via_request=True)


def parse(text: str) -> URL:
    """url.Parse, its #fragment cut off first. Raises ValueError."""
    rest, hash_, fragment = text.partition("#")
    found = _parse(rest, via_request=False)
    if not hash_ or not fragment:
        return found
    unescaped = _unescape(fragment, FRAGMENT)
    raw = "" if _escape(unescaped, FRAGMENT) == fragment else fragment
    return URL(found.scheme, found.opaque, found.user, found.host, found.omit_host, found.path,
               found.raw_path, found.force_query, found.raw_query, unescaped, raw)


def _parse(text: str, via_request: bool) -> URL:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        raise ValueError("invalid control character in URL")
    if not text and via_request:
        raise ValueError("empty url")
    if text == "*":
        return URL(path="*")
    scheme, rest = _scheme(text)
    scheme = scheme.lower()
    force_query, raw_query = False, ""
    if rest.endswith("?") and rest.count("?") == 1:
        force_query, rest = True, rest[:-1]
    else:
        rest, _, raw_query = rest.partition("?")
    if not rest.startswith("/"):
        if scheme:
            return URL(scheme=scheme, opaque=rest, force_query=force_query, raw_query=raw_query)
        if via_request:
            raise ValueError("invalid URI for request")
        if ":" in rest.partition("/")[0]:
            raise ValueError("first path segment in URL cannot contain colon")
    user, host, omit_host = None, "", False
    if (scheme or (not via_request and not rest.startswith("///"))) and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        rest = slash + path
        user, host = _authority(scheme, authority)
    elif scheme and rest.startswith("/"):
        omit_host = True
    path = _unescape(rest, PATH)
    raw_path = "" if _escape(path, PATH) == rest else rest
    return URL(scheme, "", user, host, omit_host, path, raw_path, force_query, raw_query)


def _scheme(text: str) -> tuple[str, str]:
    for index, char in enumerate(text):
        if char.isascii() and char.isalpha():
            continue
        if char.isascii() and (char.isdigit() or char in "+-."):
            if index == 0:
                return "", text
            continue
        if char == ":":
            if index == 0:
                raise ValueError("missing protocol scheme")
            return text[:index], text[index + 1:]
        return "", text
    return "", text


def _authority(scheme: str, authority: str) -> tuple[str | None, str]:
    """(the userinfo as String() writes it, or None; the host). Raises ValueError."""
    at = authority.rfind("@")
    host = _host(scheme, authority[at + 1:] if at >= 0 else authority)
    if at < 0:
        return None, host
    userinfo = authority[:at]
    if not _valid_userinfo(userinfo):
        raise ValueError("invalid userinfo")
    if ":" not in userinfo:
        return _escape(_unescape(userinfo, USER_PASSWORD), USER_PASSWORD), host
    name, _, password = userinfo.partition(":")
    return (_escape(_unescape(name, USER_PASSWORD), USER_PASSWORD) + ":"
            + _escape(_unescape(password, USER_PASSWORD), USER_PASSWORD)), host


def _host(scheme: str, host: str) -> str:
    opening = host.rfind("[")
    if opening > 0:
        raise ValueError("invalid IP-literal")
    if opening == 0:
        closing = host.rfind("]")
        if closing < 0:
            raise ValueError("missing ']' in host")
        colon_port = host[closing + 1:]
        if not _valid_optional_port(colon_port):
            raise ValueError("invalid port after host")
        name = host[1:closing]
        zone = name.find("%25")
        unescaped = (_unescape(name[:zone], HOST) + _unescape(name[zone:], ZONE)
                     if zone >= 0 else _unescape(name, HOST))
        if not _ipv6_literal(unescaped):
            raise ValueError("invalid host")
        return f"[{unescaped}]{_unescape(colon_port, HOST)}"
    colon = host.find(":")
    if colon != -1:
        last = host.rfind(":")
        if last != colon and scheme in ("http", "https"):
            raise ValueError("invalid host: more than one colon")  # Go 1.26
        if not _valid_optional_port(host[last:]):
            raise ValueError("invalid port after host")
    return _unescape(host, HOST)


def _ipv6_literal(text: str) -> bool:
    """netip.ParseAddr takes it and it is no IPv4 address (an IPv4-mapped one is IPv6)."""
    address, _, zone = text.partition("%")
    if "%" in text and not zone:
        return False
    try:
        return isinstance(ipaddress.ip_address(address), ipaddress.IPv6Address)
    except ValueError:
        return False
