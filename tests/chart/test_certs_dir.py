"""certs/: where `quickq-guard certs` writes a development pair and `serve` looks for one, and
the cert-manager examples certs/README.md tells users to apply, checked against the chart."""

from __future__ import annotations

import argparse
import subprocess

import pytest
import yaml
from chart_helpers import FULLNAME, REPO, find, helm_template, kubectl_dry_run

from webhook.cli import main
from webhook.cli.main import parser

CERTS = REPO / "certs"


def _examples(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((CERTS / name).read_text()) if doc]


def test_certs_writes_to_certs_and_serve_reads_from_there_by_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["certs"]) == 0
    written = sorted(p.name for p in (tmp_path / "certs").iterdir())
    assert written == ["ca.crt", "ca.key", "tls.crt", "tls.key"]
    args: argparse.Namespace = parser().parse_args(["serve"])
    assert (args.cert, args.key) == ("certs/tls.crt", "certs/tls.key")
    assert (tmp_path / args.cert).is_file() and (tmp_path / args.key).is_file()


def test_the_key_material_is_git_ignored_and_the_examples_are_not():
    def ignored(path: str) -> bool:
        return subprocess.run(["git", "check-ignore", "-q", path], cwd=REPO,
                              check=False).returncode == 0

    for name in ("ca.key", "tls.key", "tls.crt", "ca.crt"):
        assert ignored(f"certs/{name}"), name
    for path in ("certs/README.md", "certs/cert-manager-issuer.yaml",
                 "certs/cert-manager-secret.yaml"):
        assert (REPO / path).is_file() and not ignored(path), path


@pytest.mark.parametrize("name", ["cert-manager-issuer.yaml", "cert-manager-secret.yaml"])
def test_each_example_is_what_kubectl_would_apply(name):
    docs = _examples(name)
    assert docs and all(d["apiVersion"] == "cert-manager.io/v1" for d in docs)
    done = kubectl_dry_run(docs)
    assert done.returncode == 0, done.stderr
    assert len(list(yaml.safe_load_all(done.stdout))) >= 1


def test_the_chart_takes_the_example_issuer_in_cert_manager_mode():
    issuers = {d["metadata"]["name"] for d in _examples("cert-manager-issuer.yaml")
               if d["kind"] == "Issuer"}
    docs = helm_template(sets=["certs.mode=cert-manager",
                               "certs.certManager.issuerRef.name=quickq-guard-own-ca",
                               "certs.certManager.issuerRef.kind=Issuer"])
    serving = find(docs, "Certificate")  # the chart makes no CA of its own then
    assert serving["spec"]["issuerRef"]["name"] in issuers
    assert serving["spec"]["issuerRef"]["kind"] == "Issuer"


def test_the_secret_mode_example_names_the_charts_service():
    [certificate] = _examples("cert-manager-secret.yaml")
    chart = find(helm_template(sets=["certs.mode=cert-manager"]), "Certificate",
                 "quickq-guard-serving")
    assert certificate["spec"]["dnsNames"] == chart["spec"]["dnsNames"]
    assert certificate["spec"]["commonName"] == chart["spec"]["commonName"]
    issuers = {d["metadata"]["name"] for d in _examples("cert-manager-issuer.yaml")}
    assert certificate["spec"]["issuerRef"]["name"] in issuers
    docs = helm_template(sets=["certs.mode=secret",
                               f"certs.secret.name={certificate['spec']['secretName']}",
                               "certs.secret.caBundle=Zm9v"])
    mounted = [v for v in find(docs, "Deployment", FULLNAME)["spec"]["template"]["spec"]["volumes"]
               if "secret" in v]
    assert certificate["spec"]["secretName"] in {v["secret"]["secretName"] for v in mounted}


def test_the_readme_names_the_three_modes_and_the_examples():
    text = (CERTS / "README.md").read_text()
    values = yaml.safe_load((REPO / "charts/quickq-guard/values.yaml").read_text())
    assert values["certs"]["mode"] == "helm"
    for mode in ("`helm`", "`cert-manager`", "`secret`", "cert-manager-issuer.yaml",
                 "cert-manager-secret.yaml"):
        assert mode in text, mode


def test_nothing_in_the_checkout_certs_dir_holds_a_key():
    for path in CERTS.iterdir():
        if path.suffix in (".yaml", ".md"):
            assert "PRIVATE KEY" not in path.read_text(), path
