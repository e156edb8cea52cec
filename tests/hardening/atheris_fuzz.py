"""Coverage-guided fuzzing (atheris/libFuzzer) of what the server does with a request body:
parse_review -> judge (evaluate) -> respond -> dumps, exactly as webhook.server._review.

Anything but an AdmissionError (a 4xx) from parsing, or any exception after it, is a crash.

    .venv/bin/pip install atheris
    .venv/bin/python tests/hardening/atheris_fuzz.py -max_total_time=60 CORPUS_DIR

test_atheris.py runs it for a few seconds when atheris is installed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import atheris

with atheris.instrument_imports(include=["webhook"]):
    from webhook.server import admission
    from webhook.server.app import judge
    from webhook.server.reload import PolicySource

SETS = PolicySource(None, None).load()
HERE = Path(__file__).resolve().parent


def seeds() -> list[bytes]:
    sys.path.insert(0, str(HERE.parent / "server"))
    from server_helpers import bad_pod, pod, review, with_probe

    nodetemplate = {"apiVersion": "quickq.io/v1", "kind": "NodeTemplate",
                    "metadata": {"name": "n"}, "spec": {"image": "a:latest",
                                                        "resources": {"limits": {
                                                            "nvidia.com/gpu": "1"}}}}
    return [json.dumps(review(obj)).encode()
            for obj in (pod(), bad_pod(), with_probe(pod()), nodetemplate)]


def one_input(data: bytes) -> None:
    try:
        parsed = admission.parse_review(data)
    except admission.AdmissionError as error:
        assert 400 <= error.status < 500
        return
    for policies, mutating in ((SETS.validate, False), (SETS.mutate, True)):
        decision = judge(parsed, policies) if parsed.operation in admission.JUDGED_OPERATIONS \
            else None
        answer = json.loads(admission.dumps(admission.respond(parsed, decision,
                                                              mutating=mutating)))
        assert answer["response"]["uid"] == parsed.uid
        assert isinstance(answer["response"]["allowed"], bool)


def main() -> None:
    args = list(sys.argv)
    corpus = [a for a in args[1:] if not a.startswith("-")]
    for directory in corpus:  # seed an empty corpus directory with valid reviews
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        if not any(path.iterdir()):
            for index, seed in enumerate(seeds()):
                (path / f"seed-{index}.json").write_bytes(seed)
    atheris.Setup(args, one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
