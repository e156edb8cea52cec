"""The AdmissionReview of docs/webhook.md, sent with its curl to a running `serve`, is answered
as the page says."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from server_helpers import Server

PAGE = Path(__file__).resolve().parents[2] / "docs" / "webhook.md"


def _section() -> str:
    text = PAGE.read_text()
    return text[text.index("## Try it with curl"):text.index("## Security")]


def test_the_docs_review_is_denied_naming_container_and_field(server: Server,
                                                               certs_dir: Path,
                                                               tmp_path: Path) -> None:
    if shutil.which("curl") is None:
        pytest.skip("curl is not installed")
    section = _section()
    review = json.loads(re.search(r"```json\n(.*?)```", section, re.S)[1])
    (tmp_path / "review.json").write_text(json.dumps(review))
    (tmp_path / "certs").symlink_to(certs_dir)
    shell = re.search(r"```sh\n(.*?)```", section, re.S)[1]
    curl = next(line for line in shell.replace("\\\n", "").splitlines()
                if line.startswith("curl"))
    command = shlex.split(curl.replace("localhost:8443", f"localhost:{server.port}"))
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=30,
                          check=False)
    assert done.returncode == 0, done.stderr
    answer = json.loads(done.stdout)
    response = answer["response"]
    assert response["uid"] == review["request"]["uid"]
    assert response["allowed"] is False
    message = response["status"]["message"]
    assert "container 'web': image 'nginx:latest' uses the 'latest' tag" in message
    assert "spec.containers[0].resources.requests.cpu" in message
