"""``rotator standins``: a running ``rotator dev``'s stand-ins, driven from another terminal
through their admin endpoint (:mod:`.admin`) — the provider's side of an operator's work.

A hand rotation of the sample API key with overlap (README, docs/operations.md)::

    rotator standins accept-key NEW        # the provider: a second key, both valid
    kubectl patch secret openai-api-key …  # the cluster: rotator renders, the gateway rolls
    rotator standins wait-released OLD     # no gateway proxy carries the old key any more
    rotator standins retire-key OLD        # the provider: the old key revoked

Each command prints the endpoint's JSON answer and exits 0, or says what failed and exits 1.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from rotator_devkit.devenv import admin

ENV = "ROTATOR_DEV_ADMIN"
"""The admin endpoint's URL, when not given with ``--admin`` (``rotator dev`` prints it)."""
DEFAULT_URL = f"http://127.0.0.1:{admin.DEFAULT_PORT}"

COMMANDS = ("status", "accept-key", "retire-key", "wait-released", "fail", "heal")


def default_url() -> str:
    return os.environ.get(ENV) or DEFAULT_URL


def _call(url: str, path: str, body: dict[str, Any] | None = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - the user's own loopback endpoint
        url.rstrip("/") + path, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return _json(response.read(), f"HTTP {response.status}")
    except urllib.error.HTTPError as exc:
        answer = _json(exc.read() or b"{}", str(exc))
        raise RuntimeError(
            answer.get("error", str(exc)) if isinstance(answer, dict) else exc
        ) from exc


def _json(body: bytes, status: str) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:  # another program on the port, or a proxy's page
        raise RuntimeError(
            f"the answer ({status}) is not JSON: is this rotator dev's admin address?"
        ) from exc


def run(
    command: str,
    value: str | None,
    *,
    url: str,
    timeout: float = 300.0,
    now: Callable[[], float] = time.monotonic,
) -> int:
    """One command (:data:`COMMANDS`) with its argument (a key, a stand-in's name)."""
    try:
        if command == "status":
            answer = _call(url, "/status")
        elif command in ("accept-key", "retire-key"):
            field = "accept" if command == "accept-key" else "retire"
            answer = _call(url, "/keys", {field: [value]})
        elif command in ("fail", "heal"):
            mode = "fail" if command == "fail" else "ok"
            answer = _call(url, "/mode", {"standIn": value, "mode": mode})
        else:
            answer = _wait_released(url, str(value), timeout, now)
    except (RuntimeError, OSError, TimeoutError) as exc:
        print(f"rotator standins {command}: {exc} ({url})", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0


def _wait_released(url: str, key: str, timeout: float, now: Callable[[], float]) -> Any:
    """Polls until no gateway proxy carries ``key``: every proxy started with it was replaced
    and has answered the requests it took (the analogue of ``kubectl rollout status``)."""
    deadline = now() + timeout
    while (answer := _call(url, "/held", {"key": key}))["held"]:
        if now() > deadline:
            raise TimeoutError(f"a gateway proxy still carries the key after {timeout:.0f} s")
        time.sleep(0.5)  # polling another process's state, with a deadline
    return answer
