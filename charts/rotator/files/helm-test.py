"""`helm test`'s check of an installed rotator, run by the test Pod (templates/tests/) with the
python of the controller's image: the standard library only, nothing pulled, nothing installed.

1. /readyz answers 200 through a Service in front of the controller's Pods (a Service sends
   only to ready Pods, so this is "some replica has synced its caches and serves probes").
2. A sample chain (an API-key Secret, a BackendSecurityPolicy, a ServiceBackend and a Route)
   becomes Ready: the policy Ready=True, the backend ResolvedRefs=True, the route
   ResolvedRefs=True and Programmed=True. The chain is removed afterwards, pass or fail.

In a Pod it uses the in-cluster ServiceAccount; ROTATOR_TEST_API_SERVER, ROTATOR_TEST_TOKEN_FILE
and ROTATOR_TEST_CA_FILE point it at another API server (tests/e2e/test_chart.py runs it against
the local control plane). The API key is random and never printed.
"""

from __future__ import annotations

import json
import os
import secrets
import ssl
import sys
import time
import urllib.error
import urllib.request
from typing import Any

IN_CLUSTER = "/var/run/secrets/kubernetes.io/serviceaccount"
API_VERSION = "rotator.dev/v1alpha1"
GROUP = f"/apis/{API_VERSION}"


class API:
    """The few REST calls the check makes, with the ServiceAccount's token."""

    def __init__(self) -> None:
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        default = f"https://{'[' + host + ']' if ':' in host else host}:{port}"
        self.server = os.environ.get("ROTATOR_TEST_API_SERVER", default)
        token_file = os.environ.get("ROTATOR_TEST_TOKEN_FILE", f"{IN_CLUSTER}/token")
        ca_file = os.environ.get("ROTATOR_TEST_CA_FILE", f"{IN_CLUSTER}/ca.crt")
        with open(token_file, encoding="utf-8") as f:
            self.token = f.read().strip()
        self.context = ssl.create_default_context(cafile=ca_file)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(  # noqa: S310 (https to the API server only)
            self.server + path, data=data, method=method
        )
        request.add_header("Authorization", f"Bearer {self.token}")
        request.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(request, context=self.context, timeout=10) as response:  # noqa: S310
            return json.loads(response.read() or b"{}")

    def delete(self, path: str) -> None:
        try:
            self.call("DELETE", path)
        except urllib.error.HTTPError as e:
            if e.code != 404:
                raise


def wait(what: str, check: Any, timeout: float) -> None:
    """Polls ``check`` (returns None when done, else what it saw) every second until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        seen = check()
        if seen is None:
            print(f"ok: {what}", flush=True)
            return
        if time.monotonic() > deadline:
            raise SystemExit(f"FAILED: {what} within {timeout:.0f} s; last seen: {seen}")
        time.sleep(1)


def readyz(url: str) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 (the Service's URL)
            return None if response.status == 200 else f"HTTP {response.status}"
    except (urllib.error.URLError, OSError) as e:
        return str(e)


def condition(api: API, path: str, kind: str, status: str = "True") -> str | None:
    try:
        found = api.call("GET", path)
    except urllib.error.HTTPError as e:
        return f"HTTP {e.code}"
    conditions = {c["type"]: c for c in (found.get("status") or {}).get("conditions") or []}
    got = conditions.get(kind)
    if got is not None and got["status"] == status:
        return None
    return json.dumps(got) if got else f"no {kind} condition yet"


def main() -> None:
    namespace = os.environ["ROTATOR_TEST_NAMESPACE"]
    name = os.environ.get("ROTATOR_TEST_NAME", "rotator-helm-test")
    timeout = float(os.environ.get("ROTATOR_TEST_TIMEOUT", "120"))
    readyz_url = os.environ["ROTATOR_TEST_READYZ_URL"]
    wait(f"{readyz_url} answers 200", lambda: readyz(readyz_url), timeout)

    api = API()
    core, group = f"/api/v1/namespaces/{namespace}", f"{GROUP}/namespaces/{namespace}"
    paths = {
        "secret": f"{core}/secrets/{name}",
        "policy": f"{group}/backendsecuritypolicies/{name}",
        "backend": f"{group}/servicebackends/{name}",
        "route": f"{group}/routes/{name}",
    }
    for path in paths.values():  # what a previous, interrupted run left
        api.delete(path)
    try:
        metadata = {"name": name, "labels": {"app.kubernetes.io/part-of": "rotator-helm-test"}}
        key = {"apiKey": "sk-" + secrets.token_urlsafe(24)}
        secret = {"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "stringData": key}
        api.call("POST", f"{core}/secrets", secret)
        kinds = {
            ("backendsecuritypolicies", "BackendSecurityPolicy"): {
                "type": "APIKey",
                "targetRefs": [{"name": name}],
                "apiKey": {"secretRef": {"name": name}},
            },
            ("servicebackends", "ServiceBackend"): {
                "schema": "OpenAI",
                "endpoint": {"host": "api.openai.com"},
            },
            ("routes", "Route"): {
                "rules": [
                    {"matches": [{"modelName": "helm-test"}], "backendRefs": [{"name": name}]}
                ]
            },
        }
        for (plural, kind), spec in kinds.items():
            body = {"apiVersion": API_VERSION, "kind": kind, "metadata": metadata, "spec": spec}
            api.call("POST", f"{group}/{plural}", body)
        wait("the policy is Ready", lambda: condition(api, paths["policy"], "Ready"), timeout)
        wait(
            "the backend has ResolvedRefs",
            lambda: condition(api, paths["backend"], "ResolvedRefs"),
            timeout,
        )
        wait(
            "the route has ResolvedRefs",
            lambda: condition(api, paths["route"], "ResolvedRefs"),
            timeout,
        )
        wait(
            "the route is Programmed", lambda: condition(api, paths["route"], "Programmed"), timeout
        )
    finally:
        for path in reversed(paths.values()):
            api.delete(path)
    print("rotator passed its helm test", flush=True)


if __name__ == "__main__":
    try:
        main()
    except urllib.error.HTTPError as e:
        # the API server's Status message (it never repeats a Secret's data)
        sys.exit(f"FAILED: {e.url}: HTTP {e.code}: {e.read()[:500].decode(errors='replace')}")
