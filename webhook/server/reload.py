"""Policies and certificate that change under a running server: detect, check, swap.

A Kubernetes ConfigMap or Secret volume changes by swapping a `..data` symlink, which leaves
the mtimes of the visible paths alone, so changes are found by hashing what the files hold.
A new version is swapped in only once it loads whole; otherwise the old one stays in force.
"""

from __future__ import annotations

import hashlib
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from webhook.engine.policy import Config, PolicySet
from webhook.loader import default_policies_dir, load_config, load_policies, policy_files
from webhook.server import certs


@dataclass(frozen=True, slots=True)
class PolicySets:
    """The policies in force, split by type: /validate judges with the validate policies only
    and /mutate with the mutate ones, so each finding is answered (and warned about) once."""

    full: PolicySet
    validate: PolicySet
    mutate: PolicySet
    fingerprint: bytes

    @property
    def mode(self) -> str:
        return self.full.config.mode


@dataclass(frozen=True, slots=True)
class PolicySource:
    """Where policies come from, and the mode the command line forces (None: the config's)."""

    directory: str | None
    config: str | None
    mode: str | None = None

    def fingerprint(self) -> bytes:
        """A hash of every file a load reads: names and contents, following symlinks."""
        digest = hashlib.blake2b(digest_size=16)
        directory = Path(self.directory) if self.directory else default_policies_dir()
        try:
            paths = policy_files(directory)  # exactly what a load reads
        except OSError as error:
            paths = []
            digest.update(f"unreadable {error}".encode())
        if self.config:
            paths.append(Path(self.config))
        for path in paths:
            digest.update(str(path).encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError as error:
                digest.update(f"unreadable {error.errno}".encode())
            digest.update(b"\0")
        return digest.digest()

    def load(self) -> PolicySets:
        """Load and split the policies; raises PolicyError with file, field and reason."""
        fingerprint = self.fingerprint()
        config: Config = load_config(self.config)
        if self.mode is not None:
            config = config.model_copy(update={"mode": self.mode})
        full = load_policies(self.directory, config)
        return PolicySets(
            full=full,
            validate=PolicySet(tuple(p for p in full.policies if p.type == "validate"), config),
            mutate=PolicySet(tuple(p for p in full.policies if p.type == "mutate"), config),
            fingerprint=fingerprint,
        )


@dataclass(slots=True)
class ServingCert:
    """The live TLS contexts and the certificate/key files they were loaded from.

    `context` serves /validate and /mutate (client certificates required with `client_ca`);
    `probe_context` serves the probe port with the same pair and never asks for a client
    certificate, so the kubelet and Prometheus, which hold none, still get through.
    """

    cert: str
    key: str
    client_ca: str | None = None
    context: ssl.SSLContext = field(init=False)
    probe_context: ssl.SSLContext = field(init=False)
    fingerprint: bytes = field(init=False)
    expiry: float = field(init=False)

    def __post_init__(self) -> None:
        cert_pem, key_pem = self._read()
        self.context = certs.server_context(self.cert, self.key, self.client_ca)
        self.probe_context = certs.server_context(self.cert, self.key)
        self.fingerprint = _hash(cert_pem, key_pem)
        self.expiry = certs.expiry_of(cert_pem)

    def changed(self) -> tuple[bytes, bytes] | None:
        """The files' contents when they differ from what is loaded."""
        cert_pem, key_pem = self._read()
        return None if _hash(cert_pem, key_pem) == self.fingerprint else (cert_pem, key_pem)

    def reload(self, cert_pem: bytes, key_pem: bytes) -> None:
        """Load the new pair into the live context (raises, changing nothing, if it is bad).

        Call it from the event loop's thread: OpenSSL must not see the context changed while
        the same thread could be starting a handshake with it.
        """
        certs.reload_pair(self.context, cert_pem, key_pem)
        certs.reload_pair(self.probe_context, cert_pem, key_pem)
        self.fingerprint = _hash(cert_pem, key_pem)
        self.expiry = certs.expiry_of(cert_pem)

    def _read(self) -> tuple[bytes, bytes]:
        return Path(self.cert).read_bytes(), Path(self.key).read_bytes()


def _hash(*parts: bytes) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for part in parts:
        digest.update(len(part).to_bytes(8, "big") + part)
    return digest.digest()
