"""`serve` stops (exit 2, naming the file) when a certificate, key or client CA it is given is
missing; it makes a self-signed pair only when asked with --self-signed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from server_helpers import free_port


def _serve(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "webhook.cli", "serve", "--host", "127.0.0.1", "--port",
         str(free_port()), *args], capture_output=True, text=True, check=False, timeout=60,
        cwd=cwd)


@pytest.mark.parametrize("missing", ["--cert", "--key"])
def test_a_missing_cert_or_key_is_exit_2_naming_it(tmp_path: Path, certs_dir: Path,
                                                   missing: str) -> None:
    files = {"--cert": str(certs_dir / "tls.crt"), "--key": str(certs_dir / "tls.key")}
    files[missing] = str(tmp_path / "secret" / "tl.crt")  # a typo, or an unmounted Secret
    done = _serve(tmp_path, *(part for pair in files.items() for part in pair))
    assert done.returncode == 2
    assert f"{missing} {files[missing]}: no such file" in done.stderr
    assert "--self-signed" in done.stderr
    assert "Traceback" not in done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written in the working directory


def test_the_default_paths_missing_is_exit_2_and_makes_nothing(tmp_path: Path) -> None:
    done = _serve(tmp_path)
    assert done.returncode == 2
    assert "--cert certs/tls.crt: no such file" in done.stderr
    assert "`quickq-guard certs` writes a development pair to certs/" in done.stderr
    assert not (tmp_path / "certs").exists()


def test_a_missing_client_ca_is_exit_2_naming_it(tmp_path: Path, certs_dir: Path) -> None:
    done = _serve(tmp_path, "--cert", str(certs_dir / "tls.crt"), "--key",
                  str(certs_dir / "tls.key"), "--client-ca", str(tmp_path / "ca.pem"))
    assert done.returncode == 2
    assert f"--client-ca {tmp_path / 'ca.pem'}: no such file" in done.stderr


def test_a_directory_for_a_cert_is_exit_2(tmp_path: Path, certs_dir: Path) -> None:
    done = _serve(tmp_path, "--cert", str(tmp_path), "--key", str(certs_dir / "tls.key"))
    assert done.returncode == 2
    assert f"--cert {tmp_path}: not a file" in done.stderr


def test_a_config_that_does_not_load_stops_self_signed_before_it_makes_a_pair(
        tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text("mode: [\n")
    done = _serve(tmp_path, "--self-signed", "--config", "config.yaml")
    assert done.returncode == 2
    assert "config.yaml: invalid YAML" in done.stderr
    assert not (tmp_path / "certs").exists()  # nothing made for a server that cannot start
