"""Certificates: a private CA and the webhook's serving certificate; the live TLS context.

The API server trusts only the `caBundle` of the webhook configuration and checks the name
`<service>.<namespace>.svc` against the certificate's SANs, so `quickq-guard certs` makes a CA
once and reissues serving certificates from it: the `caBundle` stays the same across renewals.
Keys are ECDSA P-256: a handshake costs a fraction of what RSA-2048 costs.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import ipaddress
import os
import re
import ssl
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a Service's, a namespace's name
RENEW_CA_BEFORE = datetime.timedelta(days=30)


@dataclass(frozen=True, slots=True)
class CertFiles:
    """Where `certs` wrote its files."""

    ca_cert: Path
    ca_key: Path
    cert: Path
    key: Path
    ca_reused: bool


def run(args: argparse.Namespace) -> int:
    """`quickq-guard certs`: write ca.crt/ca.key/tls.crt/tls.key and print the caBundle."""
    try:
        files = ensure_certs(Path(args.out), args.service, args.namespace, args.days)
    except (OSError, ValueError) as error:
        print(f"quickq-guard certs: {error}", file=sys.stderr)
        return 1
    ca = "reused the CA in" if files.ca_reused else "created a CA in"
    print(f"{ca} {files.ca_cert}; serving certificate {files.cert} "
          f"(key {files.key}) for {', '.join(service_names(args.service, args.namespace))}",
          file=sys.stderr)
    print(ca_bundle(files.ca_cert))
    return 0


def service_names(service: str, namespace: str) -> list[str]:
    """Every name a client may use for the webhook: in-cluster forms and loopback."""
    return [service, f"{service}.{namespace}", f"{service}.{namespace}.svc",
            f"{service}.{namespace}.svc.cluster.local", "localhost", "127.0.0.1"]


def ca_bundle(ca_cert: Path) -> str:
    """The base64 PEM that goes into a webhook configuration's `caBundle`."""
    return base64.b64encode(ca_cert.read_bytes()).decode()


def ensure_certs(out: Path, service: str, namespace: str, days: int = 365) -> CertFiles:
    """Reuse a valid CA in `out` (or create one) and issue a fresh serving certificate."""
    if not 1 <= days <= CA_DAYS:
        raise ValueError(f"--days is 1 to {CA_DAYS} (the CA's own validity, which no serving "
                         f"certificate outlives), not {days}")
    for option, name in (("--service", service), ("--namespace", namespace)):
        if not _DNS_LABEL.fullmatch(name):
            raise ValueError(f"{option} {name!r} is not a name Kubernetes gives a Service or "
                             "namespace: lowercase letters, digits and '-', at most 63")
    out.mkdir(parents=True, exist_ok=True)
    files = CertFiles(out / "ca.crt", out / "ca.key", out / "tls.crt", out / "tls.key", False)
    loaded = load_ca(files.ca_cert, files.ca_key)
    if loaded is None:
        ca_key, ca_cert = create_ca()
        _write(files.ca_key, _key_pem(ca_key), private=True)
        _write(files.ca_cert, ca_cert.public_bytes(serialization.Encoding.PEM))
    else:
        ca_key, ca_cert = loaded
        files = CertFiles(files.ca_cert, files.ca_key, files.cert, files.key, True)
    key, cert = issue_serving(ca_key, ca_cert, service_names(service, namespace), days)
    # Key first, then certificate, each replaced atomically: a server polling these files
    # sees a mismatched pair for a moment at most, which its reload check rejects and retries.
    _write(files.key, _key_pem(key), private=True)
    _write(files.cert, cert.public_bytes(serialization.Encoding.PEM))
    return files


def create_ca(days: int = CA_DAYS) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "quickq-guard CA")])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                       critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def issue_serving(ca_key: ec.EllipticCurvePrivateKey, ca_cert: x509.Certificate,
                  names: list[str], days: int) -> tuple[ec.EllipticCurvePrivateKey,
                                                        x509.Certificate]:
    """A serving certificate for `names` (DNS names and IP addresses), never outliving its CA."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = _now()
    not_after = min(now + datetime.timedelta(days=days), ca_cert.not_valid_after_utc)
    sans: list[x509.GeneralName] = []
    for name in names:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            sans.append(x509.DNSName(name))
    ski = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
        .issuer_name(ca_cert.subject).public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                       critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski),
                       critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def load_ca(cert_path: Path, key_path: Path) -> tuple[ec.EllipticCurvePrivateKey,
                                                      x509.Certificate] | None:
    """The CA in these files if it is usable for a while yet: a CA, its key, not expiring."""
    if not (cert_path.is_file() and key_path.is_file()):
        return None
    try:
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
        constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier)
    except (ValueError, TypeError, x509.ExtensionNotFound):
        return None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not constraints.ca:
        return None
    if key.public_key() != cert.public_key():
        return None
    if cert.not_valid_after_utc - _now() < RENEW_CA_BEFORE:
        return None
    return key, cert


def expiry_of(cert_pem: bytes) -> float:
    """The certificate's notAfter as a Unix time, for the expiry metric."""
    return x509.load_pem_x509_certificate(cert_pem).not_valid_after_utc.timestamp()


# TLS 1.2 suites: forward-secret key exchange (ECDHE) and authenticated encryption (AEAD)
# only, for ECDSA and RSA certificates alike. TLS 1.3 suites are all of that kind already.
TLS12_CIPHERS = "ECDHE+AESGCM:ECDHE+CHACHA20:!aNULL:!eNULL:!MD5:!DSS"


def server_context(cert: str | Path, key: str | Path,
                   client_ca: str | Path | None = None) -> ssl.SSLContext:
    """The one TLS context the server keeps: TLS 1.2 at least with TLS12_CIPHERS only, no
    renegotiation or compression, and client certificates signed by `client_ca` if given."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.set_ciphers(TLS12_CIPHERS)
    context.options |= (ssl.OP_NO_COMPRESSION | ssl.OP_CIPHER_SERVER_PREFERENCE
                        | ssl.OP_NO_RENEGOTIATION)
    context.set_alpn_protocols(["http/1.1"])
    if client_ca is not None:
        context.load_verify_locations(cafile=str(client_ca))
        context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(str(cert), str(key))
    return context


def reload_pair(context: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """Put a new certificate and key into the live context, or raise and leave it untouched.

    The pair is first loaded into a throwaway context (a key that does not match, or half a
    file, fails there), then into the live one from the same private copy, so what is checked is
    what is loaded. Connections already open keep their session; new handshakes get the new pair.
    """
    with tempfile.TemporaryDirectory(prefix="quickq-guard-tls-") as directory:
        cert_file = Path(directory) / "tls.crt"
        key_file = Path(directory) / "tls.key"
        _write(cert_file, cert_pem)
        _write(key_file, key_pem, private=True)
        probe = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        probe.load_cert_chain(str(cert_file), str(key_file))
        context.load_cert_chain(str(cert_file), str(key_file))


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write(path: Path, data: bytes, private: bool = False) -> None:
    """Write atomically (temporary file, then rename); keys are created 0600, never wider."""
    mode = 0o600 if private else 0o644
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as stream:
            stream.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
