"""The build. Everything is declared in pyproject.toml; this file only adds the compiled engine.

With QUICKQ_GUARD_COMPILE=1 (the Dockerfile sets it), mypyc compiles the engine's hot modules
to C extensions, as black and mypy ship theirs: the same typed source, about twice as fast
per evaluation (benchmarks/engine_bench.py). Without it the build is pure Python, which is
what a development checkout runs (an edit takes effect at once). scripts/setup builds both;
scripts/test runs the engine's tests on each.
"""

import os

from setuptools import setup

# Modules whose code runs on every evaluation, and the YAML reader. Left out: those whose
# pydantic models have methods (mypyc compiles a method into an object pydantic does not take
# for one), and all the rest, whose share of an evaluation is small.
COMPILED = [
    "webhook/engine/apiserver.py",
    "webhook/engine/claims.py",
    "webhook/engine/custom_resources.py",
    "webhook/engine/evaluate.py",
    "webhook/engine/globs.py",
    "webhook/engine/hidden.py",
    "webhook/engine/normalize.py",
    "webhook/engine/patch.py",
    "webhook/engine/quantity.py",
    "webhook/engine/results.py",
    "webhook/engine/rules/gpu.py",
    "webhook/engine/rules/images.py",
    "webhook/engine/rules/labels.py",
    "webhook/engine/rules/probes.py",
    "webhook/engine/rules/resources.py",
    "webhook/engine/rules/secrets.py",
    "webhook/engine/rules/security.py",
    "webhook/engine/schema.py",
    "webhook/engine/workload.py",
    # Reading YAML from libyaml's events: most of what `check` does with a large input.
    "webhook/yaml_events.py",
    # What `check` does per file and per object around the engine: finding and reading the
    # files, judging a task, the kustomize look at each file, the JSON report.
    "webhook/manifests.py",
    "webhook/cli/judge.py",
    "webhook/cli/kustomize.py",
    "webhook/cli/formats/json.py",
]

if os.environ.get("QUICKQ_GUARD_COMPILE") == "1":
    from mypyc.build import mypycify

    setup(ext_modules=mypycify(COMPILED, opt_level="3"))
else:
    setup()
