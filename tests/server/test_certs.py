"""`quickq-guard certs`: a CA once, serving certificates from it, keys private."""

from __future__ import annotations

import base64
import ipaddress
import ssl
import stat
from pathlib import Path

import pytest
from cryptography import x509

from webhook.cli import main
from webhook.server.certs import reload_pair, server_context


def _load(path: Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


def test_certs_writes_ca_and_serving_pair(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert main(["certs", "--service", "guard", "--namespace", "ops", "--out", str(out),
                 "--days", "3"]) == 0
    bundle = capsys.readouterr().out.strip()
    assert base64.b64decode(bundle) == (out / "ca.crt").read_bytes()
    for name in ("tls.key", "ca.key"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600
    ca, cert = _load(out / "ca.crt"), _load(out / "tls.crt")
    cert.verify_directly_issued_by(ca)
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "guard", "guard.ops", "guard.ops.svc", "guard.ops.svc.cluster.local", "localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    days = (cert.not_valid_after_utc - cert.not_valid_before_utc).days
    assert days == 3

    assert main(["certs", "--service", "guard", "--namespace", "ops", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == bundle  # the CA is reused: same caBundle
    renewed = _load(out / "tls.crt")
    assert renewed.serial_number != cert.serial_number
    renewed.verify_directly_issued_by(ca)


@pytest.mark.parametrize(("args", "problem"), [
    (["--days", "99999999"], "--days is 1 to 3650 (the CA's own validity, which no serving "
                             "certificate outlives), not 99999999"),
    (["--service", "web_hook"], "--service 'web_hook' is not a name Kubernetes gives"),
    (["--namespace", "ML"], "--namespace 'ML' is not a name Kubernetes gives"),
])
def test_certs_refuses_what_no_certificate_could_serve(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
        problem: str) -> None:
    assert main(["certs", "--out", str(tmp_path / "out"), *args]) == 1
    assert problem in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_expired_or_broken_ca_is_replaced(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--out", str(tmp_path)]) == 0
    first = capsys.readouterr().out
    (tmp_path / "ca.key").write_text("not a key")
    assert main(["certs", "--out", str(tmp_path)]) == 0
    assert capsys.readouterr().out != first


def test_a_mismatched_pair_does_not_touch_the_live_context(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    for out in (one, two):
        assert main(["certs", "--out", str(out)]) == 0
    context = server_context(one / "tls.crt", one / "tls.key")
    with pytest.raises(ssl.SSLError):
        reload_pair(context, (one / "tls.crt").read_bytes(), (two / "tls.key").read_bytes())
    reload_pair(context, (two / "tls.crt").read_bytes(), (two / "tls.key").read_bytes())
