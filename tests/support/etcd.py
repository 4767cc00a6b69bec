"""Reaching into the control plane's etcd through its v3 JSON gateway, to make things happen that
the API server would not do on request: deleting behind its back, compacting history."""

from __future__ import annotations

import base64
import json
import urllib.request
from typing import Any


def _call(etcd_url: str, path: str, body: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"{etcd_url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        result: dict[str, Any] = json.loads(response.read())
        return result


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def revision(etcd_url: str) -> int:
    return int(_call(etcd_url, "/v3/kv/range", {"key": _b64("/")})["header"]["revision"])


def delete(etcd_url: str, key: str) -> int:
    """Deletes one key; returns how many were deleted."""
    return int(_call(etcd_url, "/v3/kv/deleterange", {"key": _b64(key)}).get("deleted", 0))


def put(etcd_url: str, key: str, value: str) -> None:
    _call(etcd_url, "/v3/kv/put", {"key": _b64(key), "value": _b64(value)})


def compact(etcd_url: str, at_revision: int) -> None:
    _call(etcd_url, "/v3/kv/compaction", {"revision": str(at_revision), "physical": True})
