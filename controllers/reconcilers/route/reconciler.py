"""The Route reconcile, in one pass: gather → render → write → restarts → status.

1. **Gather** (:mod:`.resolve`): each referenced backend's chain — backend, its one policy, that
   policy's derived Secret — read from the caches once. A new Route whose chain is still arriving
   waits out its settling time. A backend that is missing, or whose credentials are not ready,
   conflicted, expired or not text (``InvalidCredentials``), is left out of the configuration
   (traffic goes to the others) and named in ``ResolvedRefs``: one bad input never holds back
   the others' fresh credentials.
2. **Render** (:mod:`.formats`): the format ``spec.output.format`` picks hashes the inputs; a
   config Secret already written from inputs of that hash (:mod:`.configsecret`, read once) is
   not rendered again, and only the format's gaps are computed; otherwise the format renders the
   text and its gaps, once.
3. **Write** (:mod:`.configsecret`): only when the content changes; ``Programmed`` says whether
   the configuration is in place.
4. **Restarts** (:mod:`.restarts`): ``spec.rolloutRestartTargets``, once the configuration is in
   place.
5. **Status** (:mod:`.report`): one status write; the reconcile asks to run again when the
   earliest inlined credential expires, so an expired credential never stays in a
   configuration.
"""

from __future__ import annotations

from typing import cast

from controllers.reconcilers import api, conditions, status
from controllers.reconcilers.cache import indexes, ownwrites
from controllers.reconcilers.metrics import RouteMetrics
from controllers.reconcilers.route import configsecret, formats, report, resolve
from controllers.reconcilers.route.restarts import RolloutRestarts
from controllers.runtime import apiclient, eventsink, objects
from controllers.runtime import clock as clocks
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store


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
        own_writes: ownwrites.OwnWrites,
        clock: clocks.Clock,
        restarts: RolloutRestarts | None = None,
        metrics: RouteMetrics | None = None,
    ) -> None:
        self._api = api_client
        self._routes = routes
        self._resolver = resolve.Resolver(
            backends=backends, policies=policies, managed_secrets=managed_secrets
        )
        self._config = configsecret.ConfigSecrets(
            api_client=api_client,
            managed_secrets=managed_secrets,
            own_writes=own_writes,
            metrics=metrics,
        )
        self._restarts = restarts or RolloutRestarts(api_client, recorder, clock, metrics=metrics)
        self._recorder = recorder
        self._clock = clock

    def reconcile(self, request: Request) -> Result:
        cached = self._routes.get(request.key)
        if cached is None or objects.is_being_deleted(cached):
            self._restarts.forget_route(request.namespace, request.name)
            return Result()  # the config Secret goes with its owner (garbage collector)
        route = cast(api.Route, cached)
        now = self._clock.now()
        # gather
        chains = {
            name: self._resolver.chain(request.namespace, name)
            for name in indexes.route_backend_names(route)
        }
        if (wait := resolve.settling(route, now)) > 0 and any(
            chain.arriving() for chain in chains.values()
        ):
            return Result(requeue_after=wait)  # a new route waits for what was applied with it
        resolution = resolve.resolve_all(chains, now)
        # render, unless the configuration in place was rendered from these very inputs
        fmt = formats.of(route)
        inputs_hash = fmt.inputs_hash(route, resolution.backends)
        secret = self._config.of(route)
        config_hash = secret.in_place(inputs_hash)
        if config_hash is not None:
            programmed = secret.programmed()
            gaps = fmt.gaps(route, resolution.backends)
        else:
            rendered = fmt.render(route, resolution.backends)
            gaps = rendered.gaps
            # write
            programmed, config_hash = secret.write(
                rendered.text, inputs_hash, rendered.files, fmt=fmt.name
            )
        # restarts: rolled out once the configuration is in place
        rollout = self._restarts.reconcile(route, config_hash)
        # status
        status.write(
            self._api,
            self._recorder,
            route,
            api.ROUTES,
            fields=rollout.fields,
            updates=[
                conditions.accepted(),
                report.resolved_refs(resolution.problems),
                programmed,
                *rollout.updates,
                *([report.translated(gaps, fmt.name)] if fmt.reports_gaps else []),
            ],
            now=now,
            event_types=(api.RESOLVED_REFS, api.PROGRAMMED, api.TRANSLATED),
            drop=[*rollout.drop, *([] if fmt.reports_gaps else [api.TRANSLATED])],
        )
        # counted from the clock as the reconcile ends: the queue counts the delay from the return
        expiries = resolution.expiries
        waits = [max(0.0, min(expiries) - self._clock.now()) + 0.001] if expiries else []
        if rollout.requeue_after is not None:
            waits.append(rollout.requeue_after)
        return Result(requeue_after=min(waits)) if waits else Result()
