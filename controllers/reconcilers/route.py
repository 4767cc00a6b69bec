"""The Route reconciler: render the route configuration with every backend's credentials and
write the route config Secret ``rotator-route-<name>`` only when its content changes.

A backend that is missing, or whose credentials are not ready, conflicted or expired, is left
out of the configuration (traffic goes to the others) and named in ``ResolvedRefs``. The
reconcile asks to run again when the earliest inlined credential expires, so an expired
credential never stays in a configuration.
"""

from __future__ import annotations

import base64
from typing import Any, cast

import structlog

from controllers.reconcilers import api, conditions, routeconfig, status
from controllers.reconcilers.backend import policies_for
from controllers.reconcilers.conditions import false, true
from controllers.reconcilers.derived import owner_reference
from controllers.runtime import apply, events, objects
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store

log = structlog.get_logger(__name__)

ACCEPTED = "Accepted"
RESOLVED_REFS = "ResolvedRefs"
PROGRAMMED = "Programmed"


class Unresolved(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class RouteReconciler:
    def __init__(
        self,
        *,
        api_client: clients.Client,
        routes: Store,
        backends: Store,
        policies: Store,
        managed_secrets: Store,
        recorder: events.EventRecorder,
        clock: clocks.Clock,
    ) -> None:
        self._api = api_client
        self._routes = routes
        self._backends = backends
        self._policies = policies
        self._managed = managed_secrets
        self._recorder = recorder
        self._clock = clock

    def reconcile(self, request: Request) -> Result:
        cached = self._routes.get(request.key)
        if cached is None or objects.is_being_deleted(cached):
            return Result()  # the config Secret goes with its owner (garbage collector)
        route = cast(api.Route, cached)
        now = self._clock.now()
        resolved: dict[str, routeconfig.ResolvedBackend] = {}
        problems: dict[str, Unresolved] = {}
        for rule in route["spec"]["rules"]:
            for ref in rule["backendRefs"]:
                name = ref["name"]
                if name in resolved or name in problems:
                    continue
                try:
                    resolved[name] = self._resolve(request.namespace, name, now)
                except Unresolved as exc:
                    problems[name] = exc
        text = routeconfig.render(route, resolved)
        digest = routeconfig.config_hash(text)
        self._ensure_config_secret(route, text, digest)
        status.write(
            self._api,
            self._recorder,
            route,
            api.ROUTES,
            fields={},
            updates=[
                true(ACCEPTED, "Accepted", "the spec is valid"),
                _resolved_refs(problems),
                # No hash here: a rotation rewrites the config Secret (whose annotation carries
                # the hash), not the status of every Route that uses the credential.
                true(
                    PROGRAMMED,
                    "Programmed",
                    f"configuration in Secret {api.route_config_secret_name(request.name)}",
                ),
            ],
            now=now,
            event_types=(RESOLVED_REFS, PROGRAMMED),
        )
        expiries = [
            clocks.parse_rfc3339(b.credentials.expires_at)
            for b in resolved.values()
            if b.credentials is not None and b.credentials.expires_at
        ]
        return Result(requeue_after=max(0.0, min(expiries) - now) + 0.001) if expiries else Result()

    def _resolve(self, namespace: str, name: str, now: float) -> routeconfig.ResolvedBackend:
        key = objects.make_key(namespace, name)
        backend = self._backends.get(key)
        if backend is None or objects.is_being_deleted(backend):
            raise Unresolved("BackendNotFound", f"ServiceBackend {name} not found")
        spec = cast(api.BackendSpec, backend["spec"])
        policies = policies_for(self._policies, key)
        if not policies:
            return routeconfig.ResolvedBackend(name, spec, None)
        if len(policies) > 1:
            raise Unresolved(
                "PolicyConflict", f"ServiceBackend {name} is targeted by several policies"
            )
        policy = policies[0]
        policy_name = objects.name(policy)
        if not conditions.is_true(policy, "Ready"):
            raise Unresolved("PolicyNotReady", f"BackendSecurityPolicy {policy_name} is not ready")
        secret = self._managed.get(
            objects.make_key(namespace, api.derived_secret_name(policy_name))
        )
        if secret is None:
            raise Unresolved("PolicyNotReady", f"credentials of {policy_name} not written yet")
        expires = (objects.meta(secret).get("annotations") or {}).get(api.EXPIRATION_ANNOTATION)
        if expires is not None and clocks.parse_rfc3339(expires) <= now:
            raise Unresolved(
                "CredentialsExpired", f"credentials of {policy_name} expired at {expires}"
            )
        data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
        credentials = routeconfig.ResolvedCredentials(
            policy_name, str(policy["spec"]["type"]), data, expires
        )
        return routeconfig.ResolvedBackend(name, spec, credentials)

    def _ensure_config_secret(self, route: api.Route, text: str, digest: str) -> None:
        md = route["metadata"]
        name = api.route_config_secret_name(md["name"])
        desired: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": name,
                "namespace": md["namespace"],
                "labels": {api.MANAGED_BY_LABEL: api.MANAGED_BY, "rotator.dev/route": md["name"]},
                "annotations": {api.CONFIG_HASH_ANNOTATION: digest},
                "ownerReferences": [owner_reference(route, "Route")],
            },
            "type": "Opaque",
            "data": {api.ROUTE_CONFIG_KEY: base64.b64encode(text.encode()).decode()},
        }
        actual = self._managed.get(objects.make_key(md["namespace"], name))
        if (
            actual is not None
            and (actual.get("data") or {}) == desired["data"]
            and apply.subset(desired["metadata"], actual.get("metadata"))
        ):
            return
        apply.apply(
            self._api,
            objects.SECRETS,
            desired,
            field_manager=api.FIELD_MANAGER,
            resource_version=objects.meta(actual).get("resourceVersion") if actual else None,
        )
        log.info("route.config_written", secret_name=name, config_hash=digest[:12])


def _resolved_refs(problems: dict[str, Unresolved]) -> conditions.Cond:
    if not problems:
        return true(RESOLVED_REFS, "ResolvedRefs", "every backend and its credentials resolved")
    first = problems[sorted(problems)[0]]
    detail = "; ".join(str(problems[n]) for n in sorted(problems))
    return false(RESOLVED_REFS, first.reason, f"left out of the configuration: {detail}")
