"""Kubernetes' own CEL, from the Go library built beside this module (kubecel/main.go).

The library compiles a policy's expressions as kube-apiserver's admission plugins do and
evaluates them on one activation per review, parsed once; every call returns JSON. ctypes
releases the GIL for the length of each call, so a long evaluation leaves the other threads
(the webhook's /healthz) running. The library is loaded when first used, never at import:
a process must not fork once the Go runtime has started in it (webhook.cli.judge forks its
workers before, or starts them fresh).
"""

from __future__ import annotations

import ctypes
import os
import threading
from pathlib import Path
from typing import Any

import orjson

LIBRARY = Path(__file__).with_name("_kubecel.so")
SOURCE = Path(__file__).with_name("kubecel")
BUILD = (f"cd {SOURCE} && go build -buildmode=c-shared -trimpath -ldflags='-s -w' "
         f"-o ../{LIBRARY.name} .")

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_loaded_in: int | None = None  # the process that loaded it


class LibraryMissing(RuntimeError):
    """The Go library is not built; the message names the command that builds it."""


def loaded() -> bool:
    """Whether this process has started the Go runtime (a fork would inherit it broken)."""
    return _library is not None


def _load() -> ctypes.CDLL:
    global _library, _loaded_in
    with _lock:
        if _library is not None:
            return _library
        if not LIBRARY.is_file():
            raise LibraryMissing(
                f"quickq-guard's CEL library is not built ({LIBRARY} is missing): CEL policies "
                f"need it; build it with Go 1.26 or later: {BUILD} (scripts/setup does this)")
        library = ctypes.CDLL(str(LIBRARY))
        for name in ("qq_compile", "qq_activation"):
            function = getattr(library, name)
            function.argtypes = [ctypes.c_char_p, ctypes.c_int]
            function.restype = ctypes.c_void_p
        library.qq_eval.argtypes = [ctypes.c_longlong, ctypes.c_longlong, ctypes.c_char_p,
                                    ctypes.c_int]
        library.qq_eval.restype = ctypes.c_void_p
        library.qq_eval_all.argtypes = [ctypes.c_longlong, ctypes.c_char_p, ctypes.c_int]
        library.qq_eval_all.restype = ctypes.c_void_p
        library.qq_release.argtypes = [ctypes.c_longlong]
        library.qq_release.restype = None
        library.qq_free.argtypes = [ctypes.c_void_p]
        library.qq_free.restype = None
        library.qq_info.argtypes = []
        library.qq_info.restype = ctypes.c_void_p
        _library, _loaded_in = library, os.getpid()
        return library


def _answer(library: ctypes.CDLL, pointer: int | None) -> Any:
    if not pointer:
        raise RuntimeError("quickq-guard's CEL library returned nothing")
    try:
        return orjson.loads(ctypes.string_at(pointer))
    finally:
        library.qq_free(pointer)


def _checked(answer: Any) -> Any:
    if isinstance(answer, dict) and "error" in answer:
        raise RuntimeError(str(answer["error"]))
    return answer


def compile_policy(spec: dict[str, Any]) -> dict[str, Any]:
    """{handle, errors, variableErrors, types} of a policy's expressions (see main.go's
    compileSpec). Raises RuntimeError where the library refuses the spec itself."""
    library = _load()
    data = orjson.dumps(spec)
    answer: dict[str, Any] = _checked(_answer(library, library.qq_compile(data, len(data))))
    return answer


def activation(data: bytes) -> int:
    """The handle of a review's variables, given as JSON. Raises RuntimeError."""
    library = _load()
    answer = _checked(_answer(library, library.qq_activation(data, len(data))))
    return int(answer["handle"])


def evaluate(policy: int, bound: int, requests: bytes) -> list[dict[str, Any]]:
    """One result per request (main.go's evalRequest and evalResult), as a JSON list."""
    library = _load()
    answer: list[dict[str, Any]] = _checked(_answer(
        library, library.qq_eval(policy, bound, requests, len(requests))))
    return answer


def evaluate_all(bound: int, calls: bytes) -> list[list[dict[str, Any]] | None]:
    """Several policies' requests on one activation in one call: `calls` is a JSON list of
    [policy handle, [request...]]; one list of results per policy (None: no such policy)."""
    library = _load()
    answer: list[list[dict[str, Any]] | None] = _checked(_answer(
        library, library.qq_eval_all(bound, calls, len(calls))))
    return answer


def release(handle: int) -> None:
    """Forget a policy or an activation (at garbage collection, in the process that made
    it: a handle means nothing in another)."""
    if _library is not None and _loaded_in == os.getpid():
        _library.qq_release(handle)


def info() -> dict[str, Any]:
    """The library's limits and compatibility version."""
    library = _load()
    answer: dict[str, Any] = _answer(library, library.qq_info())
    return answer
