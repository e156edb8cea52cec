"""The few Kubernetes API calls the chart's hook Jobs make (`quickq-guard cluster`).

In a Pod it reads the ServiceAccount's token and CA; elsewhere the caller names the server
and its credentials. The server's own API client (`serve --watch-exceptions`,
webhook.server.cluster_view) is lightkube; this one is the standard library's urllib because
`cluster arm` and `cluster probe` read the API server's Warning headers (how the webhook says
it answered a dry-run probe), which lightkube's client does not hand back.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from webhook.cli.exits import CliError

if TYPE_CHECKING:
    import ssl

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")
TIMEOUT = 15.0
# `Warning: 299 - "<text>"`, one header per warning (RFC 7234 warn-text, quotes escaped).
_WARNING = re.compile(r'^\s*299\s+\S+\s+"((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True, slots=True)
class Api:
    """Where the API server is and how to authenticate to it."""

    server: str
    token: str | None = None
    context: ssl.SSLContext | None = None


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: Any
    warnings: tuple[str, ...]


def connect(server: str | None = None, token_file: str | None = None,
            ca_file: str | None = None, client_cert: str | None = None,
            client_key: str | None = None) -> Api:
    """The API server named, or the one of the Pod this runs in (its ServiceAccount)."""
    if server is None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        if not host:
            raise CliError("not in a Pod (no KUBERNETES_SERVICE_HOST): pass --server")
        server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        token_file = token_file or str(SERVICE_ACCOUNT / "token")
        ca_file = ca_file or str(SERVICE_ACCOUNT / "ca.crt")
    token = _read(token_file).strip() if token_file else None
    context = None
    if server.startswith("https://"):
        import ssl  # here: every other command starts faster without it

        try:
            context = ssl.create_default_context(cafile=ca_file)
            if client_cert:
                context.load_cert_chain(client_cert, client_key)
        except (OSError, ssl.SSLError) as error:
            raise CliError(f"cannot load the TLS files: {error}") from None
    return Api(server.rstrip("/"), token, context)


def call(api: Api, method: str, path: str, body: Any = None,
         content_type: str = "application/json") -> Answer:
    """One request; an HTTP error status is an Answer too, only the network failing raises."""
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(f"{api.server}{path}", data=data, method=method)
    request.add_header("Accept", "application/json")
    if data is not None:
        request.add_header("Content-Type", content_type)
    if api.token:
        request.add_header("Authorization", f"Bearer {api.token}")
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT, context=api.context) as reply:
            return _answer(reply.status, reply.read(), reply.headers.get_all("Warning") or [])
    except urllib.error.HTTPError as reply:
        return _answer(reply.code, reply.read(), reply.headers.get_all("Warning") or [])
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise CliError(f"cannot reach the API server at {api.server}: {reason}") from None


def _answer(status: int, raw: bytes, headers: list[str]) -> Answer:
    try:
        body = json.loads(raw) if raw else None
    except ValueError:
        body = raw.decode("utf-8", "replace")
    warnings = []
    for header in headers:
        found = _WARNING.match(header)
        if found:
            warnings.append(re.sub(r"\\(.)", r"\1", found.group(1)))
    return Answer(status, body, tuple(warnings))


def message(answer: Answer) -> str:
    """The API server's explanation of a refused request (a Status object's message)."""
    if isinstance(answer.body, dict):
        return str(answer.body.get("message") or answer.body.get("reason") or answer.body)
    return str(answer.body)


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError as error:
        raise CliError(f"cannot read {path}: {error.strerror}") from None
