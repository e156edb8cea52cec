"""Certificates: in `helm` mode the chart is its own CA, and the API server
must trust the serving certificate through the caBundle it injects."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
from chart_helpers import (
    FULLNAME,
    NAMESPACE,
    b64decode,
    find,
    helm_template,
    helm_template_raw,
    helm_template_with_cluster,
)
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

SERVICE_DNS = [FULLNAME, f"{FULLNAME}.{NAMESPACE}", f"{FULLNAME}.{NAMESPACE}.svc",
               f"{FULLNAME}.{NAMESPACE}.svc.cluster.local"]
WEBHOOK_KINDS = ("ValidatingWebhookConfiguration", "MutatingWebhookConfiguration")


def verify_signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> None:
    """Raise unless `issuer`'s key produced `cert`'s signature."""
    key = issuer.public_key()
    assert cert.signature_hash_algorithm is not None
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(),
                   cert.signature_hash_algorithm)
    elif isinstance(key, ec.EllipticCurvePublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes,
                   ec.ECDSA(cert.signature_hash_algorithm))
    else:
        pytest.fail(f"unexpected CA key type {type(key).__name__}")


@pytest.fixture(scope="module")
def helm_mode() -> list[dict[str, Any]]:
    return helm_template({"certs": {"mode": "helm"}})


def test_secret_holds_tls_pair_and_ca(helm_mode: list[dict[str, Any]]) -> None:
    secret = find(helm_mode, "Secret", f"{FULLNAME}-tls")
    assert secret["type"] == "kubernetes.io/tls"
    assert set(secret["data"]) == {"tls.crt", "tls.key", "ca.crt"}


def test_ca_bundle_is_the_secret_ca(helm_mode: list[dict[str, Any]]) -> None:
    ca = find(helm_mode, "Secret", f"{FULLNAME}-tls")["data"]["ca.crt"]
    for kind in WEBHOOK_KINDS:
        for hook in find(helm_mode, kind)["webhooks"]:
            assert hook["clientConfig"]["caBundle"] == ca, kind


def test_serving_cert_chains_to_ca_with_service_names(helm_mode: list[dict[str, Any]]) -> None:
    data = find(helm_mode, "Secret", f"{FULLNAME}-tls")["data"]
    ca = x509.load_pem_x509_certificate(b64decode(data["ca.crt"]))
    leaf = x509.load_pem_x509_certificate(b64decode(data["tls.crt"]))
    assert leaf.issuer == ca.subject
    verify_signed_by(leaf, ca)
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sorted(sans.get_values_for_type(x509.DNSName)) == sorted(SERVICE_DNS)
    usages = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert x509.oid.ExtendedKeyUsageOID.SERVER_AUTH in usages
    assert leaf.not_valid_after_utc > ca.not_valid_before_utc


def test_webhooks_call_the_service(helm_mode: list[dict[str, Any]]) -> None:
    service = find(helm_mode, "Service")
    assert service["metadata"]["name"] == FULLNAME
    for kind, path in zip(WEBHOOK_KINDS, ("/validate", "/mutate"), strict=True):
        ref = find(helm_mode, kind)["webhooks"][0]["clientConfig"]["service"]
        assert ref == {"name": FULLNAME, "namespace": NAMESPACE, "path": path,
                       "port": service["spec"]["ports"][0]["port"]}


def test_render_generates_a_fresh_ca_without_cluster() -> None:
    """No cluster to look up: each render generates (so reuse is only via lookup)."""
    first = find(helm_template(), "Secret")["data"]["ca.crt"]
    second = find(helm_template(), "Secret")["data"]["ca.crt"]
    assert first != second


def test_cert_manager_mode_injects_ca() -> None:
    docs = helm_template({"certs": {"mode": "cert-manager"}})
    assert not [d for d in docs if d["kind"] == "Secret"]
    cert = find(docs, "Certificate", f"{FULLNAME}-serving")
    assert cert["spec"]["secretName"] == f"{FULLNAME}-tls"
    assert sorted(cert["spec"]["dnsNames"]) == sorted(SERVICE_DNS)
    for kind in WEBHOOK_KINDS:
        config = find(docs, kind)
        assert config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            f"{NAMESPACE}/{FULLNAME}-serving"
        assert "caBundle" not in config["webhooks"][0]["clientConfig"]
    # Self-bootstrapped CA: self-signed issuer -> CA certificate -> CA issuer -> serving.
    ca_cert = find(docs, "Certificate", f"{FULLNAME}-ca")
    assert ca_cert["spec"]["isCA"] is True
    assert cert["spec"]["issuerRef"]["name"] == find(docs, "Issuer", f"{FULLNAME}-ca") \
        ["metadata"]["name"]


def test_cert_manager_mode_with_existing_issuer() -> None:
    ref = {"name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}
    docs = helm_template({"certs": {"mode": "cert-manager", "certManager": {"issuerRef": ref}}})
    assert [d["kind"] for d in docs if d["kind"] in ("Issuer", "Certificate")] == \
        ["Certificate"]
    assert find(docs, "Certificate")["spec"]["issuerRef"] == ref


def test_secret_mode_uses_given_secret_and_bundle(external_ca_bundle: str) -> None:
    docs = helm_template({"certs": {"mode": "secret", "secret": {
        "name": "corp-webhook-tls", "caBundle": external_ca_bundle}}})
    assert not [d for d in docs if d["kind"] in ("Secret", "Certificate")]
    volumes = find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "corp-webhook-tls"}} in volumes
    for kind in WEBHOOK_KINDS:
        assert find(docs, kind)["webhooks"][0]["clientConfig"]["caBundle"] == \
            external_ca_bundle


def previous_install_secret(ca: str, crt: str, key: str) -> dict[str, Any]:
    """The TLS Secret as an earlier `helm install` of this release left it."""
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {
            "name": f"{FULLNAME}-tls", "namespace": NAMESPACE,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": FULLNAME,
                            "meta.helm.sh/release-namespace": NAMESPACE},
        },
        "data": {"tls.crt": crt, "tls.key": key, "ca.crt": ca},
    }


def test_upgrade_keeps_existing_certificates(helm_mode: list[dict[str, Any]]) -> None:
    """helm upgrade must not swap the CA under running pods: lookup reuses it."""
    old = find(helm_mode, "Secret")["data"]
    path = f"/api/v1/namespaces/{NAMESPACE}/secrets/{FULLNAME}-tls"
    objects = {path: previous_install_secret(old["ca.crt"], old["tls.crt"], old["tls.key"])}
    docs = helm_template_with_cluster(objects)
    assert find(docs, "Secret")["data"] == old
    for kind in WEBHOOK_KINDS:
        assert find(docs, kind)["webhooks"][0]["clientConfig"]["caBundle"] == old["ca.crt"]

def pem_certificates(data: str) -> list[x509.Certificate]:
    """The certificates of a base64 PEM bundle, which OpenSSL must load too (it is stricter
    than cryptography's parser about where a PEM line ends)."""
    pem = b64decode(data)
    ssl.create_default_context(cadata=pem.decode())
    return x509.load_pem_x509_certificates(pem)


SECRET_PATH = f"/api/v1/namespaces/{NAMESPACE}/secrets/{FULLNAME}-tls"


def rotate(secret: dict[str, Any], rotation: str) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Render the upgrade that sets certs.helm.rotation against `secret`; the documents and
    the Secret as that upgrade leaves it."""
    docs = helm_template_with_cluster({SECRET_PATH: secret},
                                      {"certs": {"helm": {"rotation": rotation}}})
    new = find(docs, "Secret")
    annotations = {**secret["metadata"]["annotations"], **new["metadata"]["annotations"]}
    return docs, {**secret, "metadata": {**secret["metadata"], "annotations": annotations},
                  "data": new["data"]}


def test_rotation_serves_the_old_and_new_ca_until_the_next_one(
        helm_mode: list[dict[str, Any]]) -> None:
    old = find(helm_mode, "Secret")["data"]
    [old_ca] = pem_certificates(old["ca.crt"])
    docs, secret = rotate(previous_install_secret(old["ca.crt"], old["tls.crt"], old["tls.key"]),
                          "2026-12-01")
    new_ca, kept = pem_certificates(secret["data"]["ca.crt"])
    assert kept == old_ca and new_ca != old_ca
    leaf = x509.load_pem_x509_certificate(b64decode(secret["data"]["tls.crt"]))
    verify_signed_by(leaf, new_ca)  # the new leaf: trusted through the new CA
    assert secret["data"]["tls.key"] != old["tls.key"]
    for kind in WEBHOOK_KINDS:  # a replica still serving the old leaf is trusted too
        assert find(docs, kind)["webhooks"][0]["clientConfig"]["caBundle"] == \
            secret["data"]["ca.crt"]
    assert secret["metadata"]["annotations"]["quickq.io/rotation"] == "2026-12-01"
    # The next rotation drops the CA retired by this one.
    _, again = rotate(secret, "2027-01-01")
    newest, previous = pem_certificates(again["data"]["ca.crt"])
    assert previous == new_ca and newest not in (new_ca, old_ca)


def test_rotation_does_not_stick_under_reuse_values(helm_mode: list[dict[str, Any]]) -> None:
    """--reuse-values keeps certs.helm.rotation; the Secret records it, so nothing rotates."""
    old = find(helm_mode, "Secret")["data"]
    _, rotated = rotate(previous_install_secret(old["ca.crt"], old["tls.crt"], old["tls.key"]),
                        "2026-12-01")
    docs, reused = rotate(rotated, "2026-12-01")
    assert reused["data"] == rotated["data"]
    for kind in WEBHOOK_KINDS:
        assert find(docs, kind)["webhooks"][0]["clientConfig"]["caBundle"] == \
            rotated["data"]["ca.crt"]


@pytest.mark.parametrize("values", [
    {"certs": {"mode": "cert-manager"}},
    {"certs": {"mode": "cert-manager", "certManager": {"issuerRef": {
        "name": "corp-ca", "kind": "ClusterIssuer", "group": "cert-manager.io"}}}},
    "secret",
], ids=["cert-manager", "cert-manager-issuer", "secret"])
def test_gitops_modes_render_the_same_twice(values: Any, external_ca_bundle: str) -> None:
    """What Argo CD renders with `helm template` on every sync: cert-manager and secret mode
    hold no generated key or certificate, so two renders are byte for byte the same."""
    if values == "secret":
        values = {"certs": {"mode": "secret", "secret": {"name": "corp-tls",
                                                         "caBundle": external_ca_bundle}}}
    first, second = helm_template_raw(values), helm_template_raw(values)
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout


def test_helm_mode_renders_the_same_twice_against_its_secret(
        helm_mode: list[dict[str, Any]]) -> None:
    old = find(helm_mode, "Secret")["data"]
    objects = {SECRET_PATH: previous_install_secret(old["ca.crt"], old["tls.crt"], old["tls.key"])}
    assert helm_template_with_cluster(objects) == helm_template_with_cluster(objects)


def test_incomplete_existing_secret_is_regenerated() -> None:
    """A Secret missing ca.crt (e.g. hand-made) cannot feed the caBundle: regenerate."""
    path = f"/api/v1/namespaces/{NAMESPACE}/secrets/{FULLNAME}-tls"
    broken = previous_install_secret("", "Zm9v", "YmFy")
    del broken["data"]["ca.crt"]
    docs = helm_template_with_cluster({path: broken})
    data = find(docs, "Secret")["data"]
    assert data["tls.crt"] != "Zm9v"
    x509.load_pem_x509_certificate(b64decode(data["ca.crt"]))
