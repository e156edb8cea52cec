"""The API calls `quickq-guard cluster` (the chart's hook Jobs) makes, through lightkube.

In a Pod the client is the ServiceAccount's (lightkube's in-cluster config); elsewhere a
kubeconfig's, or a server's named with its credentials. Its transport keeps the Warning
headers of each answer: how the webhook says it answered a dry-run probe, which lightkube's
calls do not return. Every failure is a CliError of one line.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import ApiError, Client, ConfigError, KubeConfig, SingleConfig
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.models import Cluster, User
from lightkube.types import PatchType

from webhook.api_resources import resource
from webhook.cli.exits import CliError

TIMEOUT = 15.0
# `Warning: 299 - "<text>"`, one header per warning (RFC 7234 warn-text, quotes escaped).
_WARNING = re.compile(r'^\s*299\s+\S+\s+"((?:[^"\\]|\\.)*)"')
# Generic resources: objects as plain dicts, as the webhook's cluster views read them; the
# hooks read a few fields and need no typed model (nor its stricter decoding).
POD = resource("", "v1", "Pod", "pods")
CONFIGURATIONS = {plural: resource("admissionregistration.k8s.io", "v1", kind, plural,
                                   namespaced=False)
                  for kind, plural in (("ValidatingWebhookConfiguration",
                                        "validatingwebhookconfigurations"),
                                       ("MutatingWebhookConfiguration",
                                        "mutatingwebhookconfigurations"))}


@dataclass(frozen=True, slots=True)
class Answer:
    """What the API server said to a dry-run create: its refusal (None: admitted) and its
    warnings."""

    refusal: str | None
    warnings: tuple[str, ...]


class LastAnswer(httpx2.HTTPTransport):
    """The transport lightkube would build, keeping the last answer: its Warning headers,
    and its status and body when lightkube cannot say why it was refused."""

    def __init__(self, verify: ssl.SSLContext) -> None:
        super().__init__(verify=verify)
        self.answer: httpx2.Response | None = None

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.answer = None
        self.answer = super().handle_request(request)
        return self.answer

    def warnings(self) -> tuple[str, ...]:
        """The texts of the last answer's Warning headers."""
        headers = self.answer.headers.get_list("Warning") if self.answer else []
        found = (_WARNING.match(header) for header in headers)
        return tuple(re.sub(r"\\(.)", r"\1", match.group(1)) for match in found if match)


# lightkube's error for a refusal (ApiError, an HTTPStatusError), or what it raises instead
# when the refusal is not a Status object (a proxy's or a load balancer's): a KeyError with
# no Content-Type, a ValueError for a body it cannot read as one. Api._refusal tells these
# from a bug by the last answer's status.
REFUSED = (httpx2.HTTPStatusError, KeyError, ValueError)


class Api:
    """A lightkube client of one API server, its last answer, and its failures as
    CliErrors."""

    def __init__(self, single: SingleConfig) -> None:
        self.server = single.cluster.server
        try:
            self.transport = LastAnswer(verify_cluster(
                single.cluster, single.user or User(), single.abs_file, trust_env=False))
        except (ConfigError, OSError, ssl.SSLError) as error:
            raise CliError(f"cannot load the TLS files: {error}") from None
        # No proxy from the environment (a transport given): the hooks talk to their own
        # cluster's API server only, as the webhook's cluster views do.
        self.client = Client(single, timeout=httpx2.Timeout(TIMEOUT), trust_env=False,
                             transport=self.transport)

    def dry_run_create(self, pod: dict[str, Any]) -> Answer:
        """What the API server and its webhooks say to creating `pod`, which it does not."""
        with self._reaching("cannot dry-run create the probe Pod"):
            try:
                self.client.create(POD(**pod), dry_run=True)
            except REFUSED as error:
                return Answer(self._refusal(error), self.transport.warnings())
        return Answer(None, self.transport.warnings())

    def get(self, resource: str, name: str) -> dict[str, Any]:
        with self._reaching(f"cannot read {resource}/{name}"):
            got = dict(self.client.get(CONFIGURATIONS[resource], name))
        return got

    def json_patch(self, resource: str, name: str, ops: list[dict[str, Any]]) -> None:
        with self._reaching(f"cannot patch {resource}/{name}"):
            self.client.patch(CONFIGURATIONS[resource], name, ops, patch_type=PatchType.JSON)

    def delete(self, resource: str, name: str) -> bool:
        """Delete it; False when it was gone already."""
        with self._reaching(f"cannot delete {resource}/{name}"):
            try:
                self.client.delete(CONFIGURATIONS[resource], name)
            except REFUSED:
                if self.transport.answer is None or self.transport.answer.status_code != 404:
                    raise
                return False
        return True

    def _refusal(self, error: Exception) -> str:
        """The API server's explanation of a refused request (a Status object's message)."""
        answer = self.transport.answer
        if answer is None or answer.status_code < 400:
            raise error  # not a refusal: a bug, shown as one
        if isinstance(error, ApiError) and (error.status.message or error.status.reason):
            return str(error.status.message or error.status.reason)
        return answer.text.strip()[:300] or f"HTTP {answer.status_code}"

    @contextlib.contextmanager
    def _reaching(self, refused: str) -> Iterator[None]:
        try:
            yield
        except REFUSED as error:
            raise CliError(f"{refused}: {self._refusal(error)}") from None
        except (ConfigError, OSError) as error:  # the token file missing or unreadable
            raise CliError(f"cannot authenticate to the API server: {error}") from None
        except httpx2.TransportError as error:
            raise CliError(f"cannot reach the API server at {self.server}: "
                           f"{error or type(error).__name__}") from None


def config(kubeconfig: str | None = None, server: str | None = None,
           token_file: str | None = None, ca_file: str | None = None,
           client_cert: str | None = None, client_key: str | None = None) -> SingleConfig:
    """The API server named (a kubeconfig's current context, or a server and its
    credentials), or the one of the Pod this runs in."""
    if not (kubeconfig or server or os.environ.get("KUBERNETES_SERVICE_HOST")):
        raise CliError("not in a Pod (no KUBERNETES_SERVICE_HOST): pass --kubeconfig or "
                       "--server")
    try:
        if kubeconfig:
            kube = KubeConfig.from_file(kubeconfig)
        elif server:
            kube = KubeConfig.from_one(
                cluster=Cluster(server=server, certificate_auth=_absolute(ca_file)),
                user=User(token_file=_absolute(token_file), client_cert=_absolute(client_cert),
                          client_key=_absolute(client_key)))
        else:
            kube = KubeConfig.from_service_account()
        single = kube.get()
    except (ConfigError, OSError) as error:
        raise CliError(f"cannot read the Kubernetes configuration: {error}") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        raise CliError(f"cannot read the Kubernetes configuration: {kubeconfig} is not YAML"
                       + (f" (line {where.line + 1})" if where else "")) from None
    except (KeyError, TypeError, AttributeError, ValueError) as error:  # another shape
        raise CliError("cannot read the Kubernetes configuration: not the shape of one "
                       f"({type(error).__name__}: {error})") from None
    assert single is not None  # get() without a default raises instead
    return single


def _absolute(path: str | None) -> str | None:
    # lightkube resolves a relative path against the kubeconfig's, and there is none here
    return str(Path(path).absolute()) if path else None
