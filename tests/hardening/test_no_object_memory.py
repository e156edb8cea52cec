"""Nothing an object brings stays in memory once it is judged: no cache is keyed by object
content (issue 32: `image_pin_problem` kept 4,096 images, each as long as the API server
lets it be, and a worker went past its memory limit on about 100 dry-run creates)."""

from __future__ import annotations

import gc
import tracemalloc

from webhook import evaluate, load_policies
from webhook.engine.policy import Config
from webhook.testing import container, pod, with_probe

COUNT = 30
SIZE = 100_000  # characters per unique string: COUNT of them kept would be 3 MB per field


def _unique_pod(index: int) -> dict[str, object]:
    filler = f"{index:06d}" + "a" * SIZE
    app = container("app", image=f"registry.example/x{index}/{filler}:1.0",
                    env=[{"name": f"NAME_{filler}", "value": "x"},
                         {"name": "LOG_SINK", "value": f"http://h/?{filler}"}],
                    resources={"requests": {"cpu": "1" + "0" * SIZE + str(index),
                                            "memory": "128Mi"},
                               "limits": {"memory": "256Mi"}})
    return with_probe(pod(app, name=f"p{index}", labels={"app": "x", "v": filler[:63]}))


def test_judging_unique_huge_strings_keeps_none_of_them() -> None:
    policy_sets = [load_policies(), load_policies(None, Config.model_validate(
        {"podSecurity": {"enforce": "restricted"}}))]
    for policies in policy_sets:  # whatever is loaded once (modules, compiled programs)
        evaluate(_unique_pod(-1), policies)
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for index in range(COUNT):
            obj = _unique_pod(index)
            for policies in policy_sets:
                evaluate(obj, policies)
            del obj
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # One unique string kept per review would be COUNT * SIZE = 3 MB.
    assert kept < SIZE * 5, f"{kept / 1e6:.1f} MB kept after {COUNT} reviews"
