"""Building Secret → BackendSecurityPolicy → ServiceBackend → Route chains in a test namespace,
remembering every secret value so a test can prove none leaked (with every value the stand-ins
minted: tests/support/leaks.py)."""

from __future__ import annotations

import base64
import json
from typing import Any

import yaml

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors, objects
from rotator import formats
from tests.support import leaks as leakscan
from tests.support.polling import wait_for

KINDS = {"policy": rapi.POLICIES, "backend": rapi.BACKENDS, "route": rapi.ROUTES}


class Chain:
    def __init__(self, api: clients.Client, namespace: str) -> None:
        self.api = api
        self.ns = namespace
        self.secret_values: set[str] = set()
        self._allowed: dict[str, set[str]] = {}

    # --- building ----------------------------------------------------------------------------

    def secret(self, name: str, **data: str) -> None:
        self.secret_values.update(v for v in data.values() if len(v) >= 8)
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name},
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        }
        try:
            self.api.create(objects.SECRETS, body, namespace=self.ns)
        except errors.AlreadyExists:
            self.api.patch(objects.SECRETS, name, {"data": body["data"]}, namespace=self.ns)

    def request_rotation(self, policy: str, value: str) -> None:
        """Asks for a rotation the way a user does: a new ``rotator.dev/rotate-requested-at``
        value on the policy."""
        self.api.patch(
            rapi.POLICIES,
            policy,
            {"metadata": {"annotations": {rapi.ROTATE_REQUESTED_ANNOTATION: value}}},
            namespace=self.ns,
        )

    def remember(self, *values: str) -> None:
        self.secret_values.update(values)

    def api_key_policy(
        self,
        name: str,
        *,
        secret: str,
        targets: list[str],
        key: str | None = None,
        header: str | None = None,
    ) -> None:
        ref: dict[str, str] = {"name": secret, **({"key": key} if key else {})}
        self.create(
            "policy",
            name,
            {
                "type": "APIKey",
                "targetRefs": [{"name": t} for t in targets],
                "apiKey": {"secretRef": ref, **({"header": header} if header else {})},
            },
        )

    def aws_file_policy(
        self,
        name: str,
        *,
        secret: str,
        targets: list[str],
        region: str = "us-east-1",
        profile: str | None = None,
    ) -> None:
        file: dict[str, Any] = {"secretRef": {"name": secret}}
        if profile:
            file["profile"] = profile
        self.create(
            "policy",
            name,
            {
                "type": "AWSCredentials",
                "targetRefs": [{"name": t} for t in targets],
                "awsCredentials": {"region": region, "credentialsFile": file},
            },
        )

    def backend(self, name: str, *, schema: str = "OpenAI", host: str = "api.openai.com") -> None:
        self.create("backend", name, {"schema": schema, "endpoint": {"host": host}})

    def route(self, name: str, *rules: list[str], model: str = "gpt-4o") -> None:
        self.create(
            "route",
            name,
            {
                "rules": [
                    {
                        "matches": [{"modelName": model}],
                        "backendRefs": [{"name": b} for b in backends],
                    }
                    for backends in rules
                ]
            },
        )

    def create(self, kind: str, name: str, spec: dict[str, Any], *, opt_in: bool = True) -> None:
        """Creates a rotator object; a policy's ServiceAccount (serviceAccountToken source) is
        first opted in for it, as its owner would (``opt_in=False`` leaves it as it is)."""
        resource = KINDS[kind]
        if kind == "policy" and opt_in:
            for account in _service_accounts(spec):
                self.allow_service_account(account, name)
        self.api.create(
            resource,
            {
                "apiVersion": rapi.API_VERSION,
                "kind": resource.kind,
                "metadata": {"name": name},
                "spec": spec,
            },
            namespace=self.ns,
        )

    def allow_service_account(self, account: str, *policies: str) -> None:
        """Adds ``policies`` to the ServiceAccount's ``rotator.dev/allowed-policies`` (creating
        the ServiceAccount if the namespace's controller has not made it yet)."""
        allowed = self._allowed.setdefault(account, set())
        allowed.update(policies)
        body = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": account,
                "annotations": {rapi.ALLOWED_POLICIES_ANNOTATION: ",".join(sorted(allowed))},
            },
        }
        self.api.patch(
            objects.SERVICEACCOUNTS,
            account,
            body,
            namespace=self.ns,
            patch_type=clients.PatchType.APPLY,
            field_manager="rotator-tests",
            force=True,
        )

    def delete(self, kind: str, name: str) -> None:
        resource = objects.SECRETS if kind == "secret" else KINDS[kind]
        self.api.delete(resource, name, namespace=self.ns)

    # --- reading -----------------------------------------------------------------------------

    def get(self, kind: str, name: str) -> dict[str, Any] | None:
        resource = objects.SECRETS if kind == "secret" else KINDS[kind]
        try:
            return self.api.get(resource, name, namespace=self.ns)
        except errors.NotFound:
            return None

    def condition(self, kind: str, name: str, type_: str) -> dict[str, Any] | None:
        obj = self.get(kind, name) or {}
        for c in (obj.get("status") or {}).get("conditions") or []:
            if c["type"] == type_:
                return dict(c)
        return None

    def wait_condition(
        self,
        kind: str,
        name: str,
        type_: str,
        status: str,
        reason: str | None = None,
        timeout: float = 30,
    ) -> dict[str, Any]:
        def matches() -> dict[str, Any] | None:
            c = self.condition(kind, name, type_)
            if c and c["status"] == status and (reason is None or c["reason"] == reason):
                return c
            return None

        return wait_for(
            matches, timeout=timeout, what=f"{kind} {name} {type_}={status} {reason or ''}"
        )

    def secret_data(self, name: str) -> dict[str, str] | None:
        secret = self.get("secret", name)
        if secret is None:
            return None
        return {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}

    def route_config(self, route: str) -> dict[str, Any] | None:
        data = self.secret_data(rapi.route_config_secret_name(route))
        return None if data is None else yaml.safe_load(data[rapi.ROUTE_CONFIG_KEY])

    def config_hash(self, route: str) -> str | None:
        secret = self.get("secret", rapi.route_config_secret_name(route))
        return (
            None
            if secret is None
            else secret["metadata"]["annotations"][rapi.CONFIG_HASH_ANNOTATION]
        )

    def backend_credentials(self, route: str) -> dict[str, dict[str, Any] | None]:
        """Backend name → its inlined credentials (None when it has none), over every rule."""
        config = self.route_config(route) or {"rules": []}
        return {
            b["name"]: b.get("credentials") for rule in config["rules"] for b in rule["backends"]
        }

    def events(self) -> list[dict[str, Any]]:
        return list(self.api.list(objects.EVENTS, namespace=self.ns).get("items") or [])

    def event_reasons(self, name: str) -> set[str]:
        return {e["reason"] for e in self.events() if e["involvedObject"]["name"] == name}

    # --- secrecy -----------------------------------------------------------------------------

    def leaks(self, controller_logs: str, *, metrics: str = "") -> list[str]:
        """Where any secret value (or its base64) appears — the chain's own (:meth:`secret`,
        :meth:`remember`) and every one the run's stand-ins minted or were given
        (:data:`tests.support.leaks.MINTED`) — in the controller's logs and ``metrics`` text,
        this namespace's Events and the statuses of its rotator objects. Route configs and
        derived Secrets carry credentials by design and are not looked at."""
        places = {"controller log": controller_logs, "events": json.dumps(self.events())}
        if metrics:
            places["controller metrics"] = metrics
        for kind, resource in KINDS.items():
            items = self.api.list(resource, namespace=self.ns).get("items") or []
            places[f"{kind} status"] = json.dumps([i.get("status") for i in items])
        values = {**leakscan.MINTED.values(), "the test": self.secret_values}
        return leakscan.Scanner(values).leaks(places)


def _service_accounts(spec: Any) -> set[str]:
    """The Kubernetes ServiceAccounts a policy spec's serviceAccountToken sources name."""
    found: set[str] = set()
    if isinstance(spec, dict):
        for key, value in spec.items():
            if key == "serviceAccountToken" and isinstance(value, dict):
                found.add(str(value.get("serviceAccountName", "")))
            else:
                found |= _service_accounts(value)
    elif isinstance(spec, list):
        for item in spec:
            found |= _service_accounts(item)
    return found


class AWSChain(Chain):
    """Chains whose policies mint AWS credentials."""

    def aws_policy(
        self, name: str, targets: list[str], source: dict[str, Any], region: str = "us-east-1"
    ) -> None:
        self.create(
            "policy",
            name,
            {
                "type": "AWSCredentials",
                "targetRefs": [{"name": t} for t in targets],
                "awsCredentials": {"region": region, **source},
            },
        )

    def aws_keys(self, policy: str) -> formats.AWSKeys | None:
        """The keys in a policy's derived Secret (remembered as secrets for the leak scan)."""
        data = self.secret_data(rapi.derived_secret_name(policy))
        if data is None:
            return None
        keys = formats.parse_aws_credentials(data["credentials"], profile="default", where="test")
        self.remember(keys.secret_access_key, *([keys.session_token] if keys.session_token else []))
        return keys

    def expiration(self, policy: str) -> float | None:
        secret = self.get("secret", rapi.derived_secret_name(policy))
        if secret is None:
            return None
        value = secret["metadata"].get("annotations", {}).get(rapi.EXPIRATION_ANNOTATION)
        return None if value is None else clocks.parse_rfc3339(value)
