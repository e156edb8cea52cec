"""quickq-guard's CEL (Kubernetes' own, through its Go library) beside the CEL runtimes on
PyPI, compared on what quickq-guard's policies need: conformance on the expressions policies
use, compile and evaluation speed, and compile errors.

None of the PyPI runtimes is a dependency of quickq-guard; install them to compare them:

    pip install cel-expr-python common-expression-language cel-python
    python benchmarks/cel_runtimes.py

A runtime that is not installed is reported as such. Each PyPI runtime is set up with the
most complete environment its public API offers; quickq-guard's through webhook.engine.cel.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "api", "namespace": "ml", "labels": {"app": "api", "team": "a"},
                 "annotations": {"owner": "ml"}},
    "spec": {"containers": [
        {"name": "api", "image": "registry.example.com/api:1.4.2",
         "ports": [{"containerPort": 8080}],
         "env": [{"name": "LOG_LEVEL", "value": "info"}, {"name": "PORT", "value": "8080"}],
         "resources": {"requests": {"cpu": "500m", "memory": "512Mi"},
                       "limits": {"cpu": "1", "memory": "1Gi"}},
         "securityContext": {"runAsNonRoot": True, "allowPrivilegeEscalation": False},
         "livenessProbe": {"httpGet": {"path": "/healthz", "port": 8080},
                           "periodSeconds": 10, "failureThreshold": 6}},
        {"name": "sidecar", "image": "registry.example.com/proxy:2.1",
         "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}}}],
        "serviceAccountName": "api"},
}

# What policies write, with the value each must give on POD's first container: all of it
# valid on the API server (which has no cel.bind, math or base64).
CONFORMANCE: list[tuple[str, Any]] = [
    ("has(container.securityContext) && container.securityContext.runAsNonRoot == true", True),
    ("!container.image.endsWith(':latest')", True),
    ("'cpu' in container.resources.requests", True),
    ("object.spec.containers.all(c, c.image.startsWith('registry.example.com/'))", True),
    ("object.spec.containers.exists_one(c, c.name == 'api')", True),
    ("object.spec.containers.map(c, c.name).filter(n, n != 'api') == ['sidecar']", True),
    ("container.image.matches('^[a-z.]+/[a-z]+:[0-9.]+$')", True),
    ("size(object.metadata.labels) == 2", True),
    ("object.metadata.labels.team + '-' + container.name", "a-api"),
    ("has(object.spec.hostNetwork) ? object.spec.hostNetwork : false", False),
    ("container.livenessProbe.periodSeconds * container.livenessProbe.failureThreshold >= 60",
     True),
    ("type(container.image) == string", True),
    ("object.spec.containers.size() == 2", True),
    ("object.spec.?hostNetwork.orValue(false)", False),
    ("object.metadata.labels[?'tier'].orValue('none')", "none"),
    ("container.image.split(':')[1]", "1.4.2"),
    ("['a', 'b'].join(',')", "a,b"),
    ("container.name.upperAscii()", "API"),
    ("container.image.substring(0, 8)", "registry"),
    ("container.image.indexOf('/')", 20),
    ("duration('90s') > duration('1m')", True),
    # Kubernetes' own libraries, which a policy exported to the API server may call
    ("quantity(container.resources.limits.memory)"
     ".isGreaterThan(quantity(container.resources.requests.memory))", True),
    ("url('https://registry.example.com/v2/').getHost()", "registry.example.com"),
    ("sets.contains(['api', 'sidecar'], [container.name])", True),
]
POLICY = [  # a typical three-expression policy, run per container
    "!has(container.securityContext) || !has(container.securityContext.privileged) "
    "|| container.securityContext.privileged == false",
    "!container.image.endsWith(':latest')",
    "has(container.resources) && has(container.resources.requests) "
    "&& 'cpu' in container.resources.requests",
]
ERRORS = ["container.image.startsWith(1)", "container.image == 'a' &&"]


class Runtime:
    """compile(text) -> program; run(program, data) -> plain value."""

    name = ""
    package = ""

    def compile(self, text: str) -> Any:
        raise NotImplementedError

    def run(self, program: Any, data: dict[str, Any]) -> Any:
        raise NotImplementedError

    def run_policy(self, programs: list[Any], obj: dict[str, Any]) -> None:
        for container in obj["spec"]["containers"]:
            for program in programs:
                self.run(program, {"object": obj, "container": container})


class KubernetesCel(Runtime):
    name, package = "quickq-guard: Kubernetes' CEL (Go library)", "quickq-guard"

    def __init__(self) -> None:
        from webhook.engine import cel

        self.cel = cel

    def compile(self, text: str) -> Any:
        return self.cel.compile_expression(text, "container")

    def run(self, program: Any, data: dict[str, Any]) -> Any:
        return self.cel.evaluate(program, self.cel.activation("container", data))

    def run_policy(self, programs: list[Any], obj: dict[str, Any]) -> None:
        # One activation per container, shared by its expressions (as quickq-guard does).
        for container in obj["spec"]["containers"]:
            bound = self.cel.activation("container", {"object": obj, "container": container})
            for program in programs:
                self.cel.evaluate(program, bound)


class CelCpp(Runtime):
    name, package = "cel-expr-python (C++)", "cel-expr-python"

    def __init__(self) -> None:
        from cel_expr_python import cel
        from cel_expr_python.ext import (
            ext_bindings,
            ext_encoders,
            ext_math,
            ext_optional,
            ext_strings,
        )

        self.env = cel.NewEnv(
            variables={"object": cel.Type.DYN, "container": cel.Type.DYN},
            extensions=[ext_strings.ExtStrings(), ext_optional.ExtOptional(),
                        ext_bindings.ExtBindings(), ext_math.ExtMath(),
                        ext_encoders.ExtEncoders()])

    def compile(self, text: str) -> Any:
        return self.env.compile(text)

    def run(self, program: Any, data: dict[str, Any]) -> Any:
        value = program.eval(data=data)
        if value.type().name() == "ERROR":
            raise RuntimeError(value.value())
        return value.plain_value()

    def run_policy(self, programs: list[Any], obj: dict[str, Any]) -> None:
        # One activation per container, shared by its expressions (as quickq-guard does).
        for container in obj["spec"]["containers"]:
            bound = self.env.Activation({"object": obj, "container": container})
            for program in programs:
                program.eval(bound)


class CelRust(Runtime):
    name, package = "common-expression-language (Rust)", "common-expression-language"

    def __init__(self) -> None:
        import cel
        from cel import stdlib

        self.cel, self.stdlib = cel, stdlib

    def compile(self, text: str) -> Any:
        return self.cel.compile(text)

    def run(self, program: Any, data: dict[str, Any]) -> Any:
        context = self.cel.Context(data)
        self.stdlib.add_stdlib_to_context(context)
        return program.execute(context)

    def run_policy(self, programs: list[Any], obj: dict[str, Any]) -> None:
        for container in obj["spec"]["containers"]:
            context = self.cel.Context({"object": obj, "container": container})
            for program in programs:
                program.execute(context)


class CelPython(Runtime):
    name, package = "cel-python (pure Python)", "cel-python"

    def __init__(self) -> None:
        import celpy

        self.celpy = celpy
        self.env = celpy.Environment()

    def compile(self, text: str) -> Any:
        return self.env.program(self.env.compile(text))

    def run(self, program: Any, data: dict[str, Any]) -> Any:
        return program.evaluate({k: self.celpy.json_to_cel(v) for k, v in data.items()})

    def run_policy(self, programs: list[Any], obj: dict[str, Any]) -> None:
        converted = self.celpy.json_to_cel(obj)
        for container in converted["spec"]["containers"]:
            for program in programs:
                program.evaluate({"object": converted, "container": container})


def conformance(runtime: Runtime) -> tuple[int, list[str]]:
    passed, failed = 0, []
    data = {"object": POD, "container": POD["spec"]["containers"][0]}
    for text, expected in CONFORMANCE:
        try:
            value = runtime.run(runtime.compile(text), data)
            # A bool is not the int 1; each runtime has its own value classes.
            ok = value == expected and (not isinstance(expected, bool)
                                        or str(value) == str(expected))
        except Exception:  # a parse error, a missing function: not conformant here
            ok = False
        if ok:
            passed += 1
        else:
            failed.append(text)
    return passed, failed


def per_second(action: Callable[[], None], seconds: float, repeat: int) -> float:
    """Calls per second of CPU time, the median of `repeat` loops."""
    rates = []
    for _ in range(repeat):
        done, start = 0, time.process_time()
        while (elapsed := time.process_time() - start) < seconds:
            action()
            done += 1
        rates.append(done / elapsed)
    return statistics.median(rates)


def first_error(runtime: Runtime, text: str) -> str:
    """What the user sees for a bad expression: at compile time, or failing that, the first
    evaluation."""
    try:
        program = runtime.compile(text)
    except Exception as error:
        return "compile: " + " | ".join(str(error).strip().splitlines()[:3])[:160]
    try:
        runtime.run(program, {"object": POD, "container": POD["spec"]["containers"][0]})
    except Exception as error:
        return "at evaluation: " + str(error).strip().splitlines()[0][:140]
    return "no error"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"Python {sys.version.split()[0]}; policy: {len(POLICY)} expressions per container, "
          f"a Pod of {len(POD['spec']['containers'])} containers; per second of CPU time, median "
          f"of {args.repeat} x {args.seconds}s")
    for kind in (KubernetesCel, CelCpp, CelRust, CelPython):
        try:
            runtime = kind()
        except ImportError:
            print(f"\n{kind.name}: not installed (pip install {kind.package})")
            continue
        passed, failed = conformance(runtime)
        programs = [runtime.compile(text) for text in POLICY]
        evals = per_second(lambda r=runtime, p=programs: r.run_policy(p, POD),
                           args.seconds, args.repeat)
        counter = iter(range(10**9))
        compiles = per_second(
            lambda r=runtime, c=counter: r.compile(f"{POLICY[1]} || size('{next(c)}') == 0"),
            args.seconds, args.repeat)
        print(f"\n{runtime.name}")
        print(f"  conformance: {passed}/{len(CONFORMANCE)}"
              + (f"; fails: {'; '.join(failed)}" if failed else ""))
        print(f"  policy evaluations/s (3 expressions x 2 containers): {evals:,.0f}")
        print(f"  compiles/s: {compiles:,.0f}")
        for text in ERRORS:
            print(f"  error for {text!r}: {first_error(runtime, text)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
