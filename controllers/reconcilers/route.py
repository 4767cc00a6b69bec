"""The Route reconciler: render the route configuration with every backend's credentials and
write the route config Secret ``rotator-route-<name>`` only when its content changes.

A backend that is missing, or whose credentials are not ready, conflicted, expired or not text
(``InvalidCredentials``), is left out of the configuration (traffic goes to the others) and named
in ``ResolvedRefs``: one bad input never holds back the others' fresh credentials. The reconcile
asks to run again when the earliest inlined credential expires, so an expired credential never
stays in a configuration.

A configuration that cannot be written — larger than a Secret may hold, or refused by the API
server as invalid — is not retried (the same inputs fail the same way): ``Programmed`` turns False
(``ConfigTooLarge``, ``ConfigRejected``), its message says the previous configuration is stale, and
the next change of an input renders again.

Rendering is the costly part of a reconcile that changes nothing, and a restart reconciles every
Route: the config Secret records a hash of the inputs it was rendered from, bound to its data and
``config-hash`` (:data:`api.CONFIG_INPUTS_ANNOTATION`), and a Route whose inputs hash the same
and whose Secret still matches is not rendered (a restart at 10,000 routes renders none).
"""

from __future__ import annotations

import base64
import hashlib
from typing import cast

import structlog

from controllers.reconcilers import (
    api,
    conditions,
    echoes,
    litellmconfig,
    routeconfig,
    secretviews,
    status,
)
from controllers.reconcilers.backend import policies_for, settling
from controllers.reconcilers.conditions import false, true
from controllers.reconcilers.derived import owner_reference
from controllers.reconcilers.restarts import RolloutRestarts
from controllers.runtime import apiclient, apply, eventsink, objects
from controllers.runtime import clock as clocks
from controllers.runtime import errors as api_errors
from controllers.runtime.objects import Body
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store

log = structlog.get_logger(__name__)


class Unresolved(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class RouteReconciler:
    def __init__(
        self,
        *,
        api_client: apiclient.ApiClient,
        routes: Store,
        backends: Store,
        policies: Store,
        managed_secrets: Store,
        recorder: eventsink.EventSink,
        own_writes: echoes.OwnWrites,
        clock: clocks.Clock,
        restarts: RolloutRestarts | None = None,
    ) -> None:
        self._api = api_client
        self._restarts = restarts or RolloutRestarts(api_client, recorder, clock)
        self._own_writes = own_writes
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
        names = {ref["name"] for rule in route["spec"]["rules"] for ref in rule["backendRefs"]}
        if (wait := settling(route, now)) > 0 and any(
            self._arriving(request.namespace, name) for name in names
        ):
            return Result(requeue_after=wait)  # a new route waits for what was applied with it
        resolved: dict[str, routeconfig.ResolvedBackend] = {}
        expiries: list[float] = []
        problems: dict[str, Unresolved] = {}
        for rule in route["spec"]["rules"]:
            for ref in rule["backendRefs"]:
                name = ref["name"]
                if name in resolved or name in problems:
                    continue
                try:
                    resolved[name], expiry = self._resolve(request.namespace, name, now)
                except Unresolved as exc:
                    problems[name] = exc
                    continue
                if expiry is not None:
                    expiries.append(expiry)
        litellm = _output_format(route) == litellmconfig.FORMAT
        digest_of = litellmconfig.inputs_digest if litellm else routeconfig.inputs_digest
        inputs = digest_of(route, resolved)
        in_place = self._up_to_date(route, inputs)
        if in_place is not None:  # written from these very inputs: nothing to render
            programmed = _programmed(route)
        else:
            render = litellmconfig.render if litellm else routeconfig.render
            text = render(route, resolved)
            programmed = self._program(route, text, inputs)
            in_place = routeconfig.config_hash(text) if programmed.status == "True" else None
        # spec.rolloutRestartTargets: rolled out once the configuration is in place (restarts.py)
        rollout = self._restarts.reconcile(route, in_place)
        status.write(
            self._api,
            self._recorder,
            route,
            api.ROUTES,
            fields=rollout.fields,
            updates=[
                conditions.accepted(),
                _resolved_refs(problems),
                programmed,
                *rollout.updates,
                *([_translated(route, resolved)] if litellm else []),
            ],
            now=now,
            event_types=(api.RESOLVED_REFS, api.PROGRAMMED, api.TRANSLATED),
            drop=[*rollout.drop, *([] if litellm else [api.TRANSLATED])],
        )
        # counted from the clock as the reconcile ends: the queue counts the delay from the return
        waits = [max(0.0, min(expiries) - self._clock.now()) + 0.001] if expiries else []
        if rollout.requeue_after is not None:
            waits.append(rollout.requeue_after)
        return Result(requeue_after=min(waits)) if waits else Result()

    def _up_to_date(self, route: api.Route, inputs: str) -> str | None:
        """The hash of the configuration in the config Secret, if it was rendered from
        ``inputs`` and holds what was written then (:data:`api.CONFIG_INPUTS_ANNOTATION`); None
        when it must be rendered: the inputs changed, the Secret is missing, edited, written by
        an earlier version (no record), or our last write is not in the cache yet."""
        md = route["metadata"]
        key = objects.make_key(md["namespace"], api.route_config_secret_name(md["name"]))
        actual = self._managed.get(key)
        if actual is None or self._own_writes.unseen(key, actual) is not None:
            return None
        annotations = objects.meta(actual).get("annotations") or {}
        digest = annotations.get(api.CONFIG_HASH_ANNOTATION)
        data_digest = actual.get(secretviews.DATA_DIGEST)
        if not isinstance(digest, str) or not isinstance(data_digest, str):
            return None
        wanted = _config_metadata(route, digest, _record(inputs, data_digest, digest))
        return digest if apply.subset(wanted, actual.get("metadata")) else None

    def _program(self, route: api.Route, text: str, inputs: str) -> conditions.Cond:
        """Writes the config Secret if it can be written; the ``Programmed`` condition either way.

        No hash in the message: a rotation rewrites the config Secret (whose annotation carries
        the hash), not the status of every Route that uses the credential.
        """
        name = api.route_config_secret_name(objects.name(route))
        size = routeconfig.secret_size(text)
        if size > routeconfig.MAX_SECRET_BYTES:
            log.warning("route.config_too_large", secret_name=name, size=size)
            return false(
                api.PROGRAMMED,
                api.REASON_CONFIG_TOO_LARGE,
                f"the configuration is {size} bytes, over the {routeconfig.MAX_SECRET_BYTES} "
                f"a Secret can hold; {self._previous(route, name)}",
            )
        try:
            self._ensure_config_secret(route, text, routeconfig.config_hash(text), inputs)
        except api_errors.Invalid as exc:  # the API server's message names fields, not data
            log.warning("route.config_rejected", secret_name=name, error=str(exc))
            return false(
                api.PROGRAMMED,
                api.REASON_CONFIG_REJECTED,
                f"the API server refused Secret {name}: {_bounded([str(exc)])}; "
                f"{self._previous(route, name)}",
            )
        return _programmed(route)

    def _previous(self, route: api.Route, name: str) -> str:
        """What the gateway still loads when the new configuration could not be written."""
        actual = self._managed.get(objects.make_key(objects.namespace(route), name))
        if actual is None:
            return f"Secret {name} was not written"
        return f"Secret {name} keeps the previous configuration, which is stale"

    def _arriving(self, namespace: str, name: str) -> bool:
        """Whether what backend ``name`` resolves from may still be on its way to the cache: the
        backend, its policy, that policy's first ``Ready``, or the derived Secret of a Ready
        policy. A new route waits (``backend.settling``) instead of writing a configuration
        without the backend and, a moment later, with it."""
        key = objects.make_key(namespace, name)
        if self._backends.get(key) is None:
            return True
        policies = policies_for(self._policies, key)
        if len(policies) != 1:
            return not policies  # several: a conflict, not a delay
        ready = conditions.of(policies[0], api.READY)
        if ready is None:
            return True
        secret = api.derived_secret_name(objects.name(policies[0]))
        return (
            ready["status"] == "True"
            and self._managed.get(objects.make_key(namespace, secret)) is None
        )

    def _resolve(
        self, namespace: str, name: str, now: float
    ) -> tuple[routeconfig.ResolvedBackend, float | None]:
        """The backend with its credentials, and when they expire; raises :class:`Unresolved`."""
        key = objects.make_key(namespace, name)
        backend = self._backends.get(key)
        if backend is None or objects.is_being_deleted(backend):
            raise Unresolved(api.REASON_BACKEND_NOT_FOUND, f"ServiceBackend {name} not found")
        spec = cast(api.BackendSpec, backend["spec"])
        policies = policies_for(self._policies, key)
        if not policies:
            return routeconfig.ResolvedBackend(name, spec, None), None
        if len(policies) > 1:
            raise Unresolved(
                api.REASON_POLICY_CONFLICT,
                f"ServiceBackend {name} is targeted by several policies",
            )
        policy = policies[0]
        policy_name = objects.name(policy)
        if not conditions.is_true(policy, api.READY):
            raise Unresolved(
                api.REASON_POLICY_NOT_READY, f"BackendSecurityPolicy {policy_name} is not ready"
            )
        secret_name = api.derived_secret_name(policy_name)
        secret = self._managed.get(objects.make_key(namespace, secret_name))
        if secret is None:
            raise Unresolved(
                api.REASON_POLICY_NOT_READY, f"credentials of {policy_name} not written yet"
            )
        where = (
            f"ServiceBackend {name}: Secret {secret_name} of BackendSecurityPolicy {policy_name}"
        )
        expires = (objects.meta(secret).get("annotations") or {}).get(api.EXPIRATION_ANNOTATION)
        try:
            expiry = clocks.parse_rfc3339(expires) if expires is not None else None
        except ValueError:
            raise Unresolved(
                api.REASON_INVALID_CREDENTIALS,
                f"{where}: annotation {api.EXPIRATION_ANNOTATION} is not an RFC 3339 time",
            ) from None
        if expiry is not None and expiry <= now:
            raise Unresolved(
                api.REASON_CREDENTIALS_EXPIRED,
                f"credentials of {policy_name} expired at {expires}",
            )
        try:
            data = routeconfig.credentials_text(secret.get("data") or {})
        except routeconfig.InvalidCredentials as exc:
            raise Unresolved(api.REASON_INVALID_CREDENTIALS, f"{where}: {exc}") from None
        # The header comes from the spec, not the derived Secret: changing it bumps the
        # policy's generation, which wakes the Route, and needs no new credential.
        credentials = routeconfig.ResolvedCredentials(
            policy_name,
            str(policy["spec"]["type"]),
            data,
            expires,
            header=routeconfig.api_key_header(policy["spec"]),
            gcp=routeconfig.gcp_location(policy["spec"]),
        )
        return routeconfig.ResolvedBackend(name, spec, credentials), expiry

    def _ensure_config_secret(self, route: api.Route, text: str, digest: str, inputs: str) -> None:
        md = route["metadata"]
        name = api.route_config_secret_name(md["name"])
        data = {api.ROUTE_CONFIG_KEY: base64.b64encode(text.encode()).decode()}
        key = objects.make_key(md["namespace"], name)
        actual = self._managed.get(key)
        known = self._own_writes.unseen(key, actual) or actual  # the cache may lag our write
        if (
            known is not None
            and secretviews.holds_data(known, data)
            # The record of the inputs is left out of the comparison: a Secret is rewritten for
            # what a gateway reads, never for the record alone. One without a record (written
            # by an earlier version: an upgrade writes nothing), or with a stale or edited one,
            # gets it with its next configuration and is rendered at each start until then.
            and apply.subset(_config_metadata(route, digest, None), known.get("metadata"))
        ):
            return
        record = _record(inputs, secretviews.data_digest(data), digest)
        desired: Body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": _config_metadata(route, digest, record),
            "type": "Opaque",
            "data": data,
        }
        self._own_writes.apply_secret(self._api, desired, actual)
        log.info("route.config_written", secret_name=name, config_hash=digest[:12])


def _config_metadata(route: api.Route, digest: str, record: str | None) -> Body:
    """The config Secret's metadata for configuration ``digest`` (and its inputs'
    ``record``, when given)."""
    md = route["metadata"]
    labels, owner_annotations = api.owner_labels(api.ROUTE_LABEL, md["name"])
    annotations = {api.CONFIG_HASH_ANNOTATION: digest, **owner_annotations}
    if record is not None:
        annotations[api.CONFIG_INPUTS_ANNOTATION] = record
    return {
        "name": api.route_config_secret_name(md["name"]),
        "namespace": md["namespace"],
        "labels": {api.MANAGED_BY_LABEL: api.MANAGED_BY, **labels},
        "annotations": annotations,
        "ownerReferences": [owner_reference(route, "Route")],
    }


def _output_format(route: api.Route) -> str:
    return str((route["spec"].get("output") or {}).get("format") or api.DEFAULT_OUTPUT_FORMAT)


def _translated(
    route: api.Route, resolved: dict[str, routeconfig.ResolvedBackend]
) -> conditions.Cond:
    """``Translated`` of a LiteLLM Route: what its configuration leaves out
    (:func:`litellmconfig.build`; no YAML is written for it)."""
    _, gaps = litellmconfig.build(route, resolved)
    if not gaps:
        return true(api.TRANSLATED, api.REASON_TRANSLATED, "LiteLLM expresses the whole spec")
    return false(
        api.TRANSLATED,
        api.REASON_NOT_EXPRESSIBLE,
        f"left out of the LiteLLM configuration: {_bounded([str(g) for g in gaps])}",
    )


def _programmed(route: api.Route) -> conditions.Cond:
    name = api.route_config_secret_name(objects.name(route))
    return true(api.PROGRAMMED, api.REASON_PROGRAMMED, f"configuration in Secret {name}")


def _record(inputs: str, data_digest: str, digest: str) -> str:
    """:data:`api.CONFIG_INPUTS_ANNOTATION` for a config Secret holding data of
    ``data_digest`` (:func:`secretviews.data_digest`) and configuration hash ``digest``,
    rendered from ``inputs``: bound to all three, so an edit of the data or of either
    annotation no longer matches, and the configuration is rendered and repaired."""
    return hashlib.sha256(f"{inputs}\n{data_digest}\n{digest}".encode()).hexdigest()


def _resolved_refs(problems: dict[str, Unresolved]) -> conditions.Cond:
    if not problems:
        return true(
            api.RESOLVED_REFS,
            api.REASON_RESOLVED_REFS,
            "every backend and its credentials resolved",
        )
    names = sorted(problems)
    first = problems[names[0]]
    return false(
        api.RESOLVED_REFS,
        first.reason,
        f"left out of the configuration: {_bounded([str(problems[n]) for n in names])}",
    )


MESSAGE_BUDGET = 4096
"""Characters of a condition message spent on listing problems: the CRD allows 32768, and a Route
may reference 2048 backends."""


def _bounded(items: list[str]) -> str:
    """``items`` joined, as many as fit in :data:`MESSAGE_BUDGET`, then how many more there are."""
    shown: list[str] = []
    used = 0
    for item in items:
        if shown and used + len(item) > MESSAGE_BUDGET:
            break
        shown.append(item[:MESSAGE_BUDGET])
        used += len(item) + 2
    more = len(items) - len(shown)
    return "; ".join(shown) + (f"; and {more} more" if more else "")
