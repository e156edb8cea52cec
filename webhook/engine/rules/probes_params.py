"""The probe policies' parameters (webhook.engine.rules.probes holds the rules).

A module of their own, as webhook.engine.rules.gpu_params: the rules are compiled by mypyc in
the image (setup.py), and a pydantic model with methods cannot be in a compiled module.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from pydantic import Field

from webhook.engine.rules._base import Params, matches_any

__all__ = ["LivenessToleranceParams", "StartupProbeParams"]


class LivenessToleranceParams(Params):
    minSeconds: int = 60


class StartupProbeParams(Params):
    # The shortest window the injected probe allows: periodSeconds x failureThreshold.
    periodSeconds: int = Field(10, ge=1)
    failureThreshold: int = Field(60, ge=1)
    # Image glob -> the shortest window in seconds for containers of that image (large model
    # servers load for many minutes); the first glob that matches wins.
    imageWindows: dict[str, int] = Field(default_factory=dict)

    @cached_property
    def window_globs(self) -> dict[str, int]:
        """imageWindows with each `name:*` glob also as `name@*`: an image pinned by digest
        (`vllm/vllm-openai@sha256:...`, as disallow-latest-tag advises) is the same server
        as its tags and loads as long."""
        globs: dict[str, int] = {}
        for pattern, seconds in self.imageWindows.items():
            globs.setdefault(pattern, max(seconds, 1))
            if pattern.endswith(":*"):
                globs.setdefault(pattern[:-2] + "@*", max(seconds, 1))
        return globs

    @cached_property
    def _window_globs(self) -> tuple[str, ...]:
        return tuple(self.window_globs)

    def window(self, image: Any) -> int:
        """The shortest startup window, in seconds, for a container of this image: one
        match against all the globs at once, since most images are in none of them."""
        if isinstance(image, str) and matches_any(image, self._window_globs):
            for pattern, seconds in self.window_globs.items():
                if matches_any(image, (pattern,)):
                    return seconds
        return self.periodSeconds * self.failureThreshold
