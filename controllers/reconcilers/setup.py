"""The chain assembled for the composition root (``controllers.cli``, which calls
:func:`register` once): its options, its credential sources, its informers, and the three
controllers, each wired beside its reconciler (``policy/wiring.py``,
``backend/wiring.py``, ``route/wiring.py``: what it is for, what it owns, what it watches).

One hop per event, every one an informer event (controller-runtime's ``Watches`` with
``EnqueueRequestsFromMapFunc``): it fires only once the cache holds the change, so the reconcile
it wakes cannot read a state older than the one that woke it. docs/design.md §4 lists every
source; tests/unit/test_event_path_table.py reads that table and the wiring :func:`register`
returns, and fails when they differ.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from controllers.reconcilers.backend import wiring as backend_wiring
from controllers.reconcilers.cache.chaincache import chain_cache
from controllers.reconcilers.credentialsources import CredentialSource
from controllers.reconcilers.credentialsources.apikey import APIKeySource
from controllers.reconcilers.credentialsources.aws import AWSCredentialsSource, lazy_clients
from controllers.reconcilers.credentialsources.azure import AzureCredentialsSource, lazy_azure
from controllers.reconcilers.credentialsources.gcp import (
    GCPCredentialsSource,
    lazy_application_default,
    lazy_transport,
)
from controllers.reconcilers.metrics import CredentialMetrics, RouteMetrics
from controllers.reconcilers.policy import wiring as policy_wiring
from controllers.reconcilers.route import formats as route_formats
from controllers.reconcilers.route import wiring as route_wiring
from controllers.reconcilers.tokens import ServiceAccountTokens
from controllers.runtime import clock as clocks
from controllers.runtime.builder import ControllerHost, ShardHost, Wiring
from rotator import oidc
from rotator.providers import azure_endpoints
from rotator.providers.gcp.endpoints import Endpoints as GCPEndpoints


@dataclass(frozen=True)
class ChainOptions:
    workers: int = 4
    """Concurrent reconciles per controller. Defaults to 4."""
    policy_workers: int = 16
    """Concurrent policy reconciles: they wait on providers, so more of them. Defaults to 16."""
    provider_concurrency: int = 4
    """Calls in flight to any one provider — for OIDC, to any one issuer host (a bulkhead: a
    hanging provider holds at most this many policy workers). Defaults to 4."""
    iam_key_grace_period: float = 300.0
    """Seconds a replaced IAM access key stays valid before rotator deletes it. Defaults to 300."""
    gcp_endpoints: GCPEndpoints = field(default_factory=GCPEndpoints)
    """Google STS, IAM credentials and OAuth token endpoints. Defaults to Google's."""
    azure_authority_host: str = azure_endpoints.DEFAULT_AUTHORITY
    """Azure AD authority host. Defaults to login.microsoftonline.com."""
    allow_insecure_oidc_issuers: bool = False
    """Accept ``http://`` OIDC issuers (client secrets in clear): local development only.
    Defaults to False (an http issuer fails its policies with reason InsecureIssuer)."""
    controller_identity_namespaces: frozenset[str] = frozenset()
    """Namespaces whose policies may use the controller's own cloud identity
    (``controllerIdentity``); ``*`` for all. Defaults to none
    (held to it by the policy reconciler: credentialsources.controller_identity_refusal)."""


def credential_sources(
    mgr: ControllerHost, metrics: CredentialMetrics, options: ChainOptions
) -> dict[str, CredentialSource]:
    """One source per policy type, with the provider clients they share — each cloud's built,
    and its SDK imported, when the first policy that calls that cloud is reconciled
    (rotator.lazy): never at start-up."""
    concurrency = options.provider_concurrency
    tokens = oidc.TokenSource(
        observer=metrics,
        concurrency=concurrency,
        allow_insecure=options.allow_insecure_oidc_issuers,
    )
    service_accounts = ServiceAccountTokens(mgr.api, metrics)
    return {
        "APIKey": APIKeySource(),
        "AWSCredentials": AWSCredentialsSource(
            clients=lazy_clients(metrics, concurrency=concurrency),
            tokens=tokens,
            service_accounts=service_accounts,
            iam_grace=options.iam_key_grace_period,
        ),
        "GCPCredentials": GCPCredentialsSource(
            transport=lazy_transport(metrics, concurrency=concurrency),
            endpoints=options.gcp_endpoints,
            tokens=tokens,
            service_accounts=service_accounts,
            application_default=lazy_application_default(metrics, concurrency=concurrency),
        ),
        "AzureCredentials": AzureCredentialsSource(
            azure=lazy_azure(
                metrics, authority_host=options.azure_authority_host, concurrency=concurrency
            ),
            tokens=tokens,
            service_accounts=service_accounts,
        ),
    }


def register(
    mgr: ControllerHost,
    *,
    options: ChainOptions | None = None,
    by_type: Mapping[str, CredentialSource] | None = None,
    clock: clocks.Clock | None = None,
    credential_metrics: CredentialMetrics | None = None,
    route_metrics: RouteMetrics | None = None,
) -> tuple[Wiring, ...]:
    """Builds the chain's controllers in ``mgr``; returns their wiring, in start order.

    A sharded replica calls it once per shard it takes (``mgr`` is then the shard), with the
    credential sources, ``credential_metrics`` and ``route_metrics`` it built once: the metric
    families are registered once per process (a second registration is an error), and the
    providers' clients and bulkheads are the replica's."""
    o = options or ChainOptions()
    clock = clock or clocks.RealClock()
    metrics = credential_metrics or CredentialMetrics(mgr.metrics.registry)
    by_type = by_type if by_type is not None else credential_sources(mgr, metrics, o)
    chain = chain_cache(mgr.cache, by_type)
    return (
        policy_wiring.setup_with_manager(
            mgr,
            chain,
            by_type=by_type,
            metrics=metrics,
            workers=o.policy_workers,
            controller_identity_namespaces=o.controller_identity_namespaces,
            clock=clock,
        ),
        backend_wiring.setup_with_manager(mgr, chain, workers=o.workers, clock=clock),
        route_wiring.setup_with_manager(
            mgr,
            chain,
            workers=o.workers,
            clock=clock,
            metrics=route_metrics
            or RouteMetrics(mgr.metrics.registry, formats=route_formats.FORMATS),
        ),
    )


def per_shard(
    mgr: ControllerHost, *, options: ChainOptions | None = None, clock: clocks.Clock | None = None
) -> Callable[[ShardHost], tuple[Wiring, ...]]:
    """For a sharded replica (``rotator run --shards N``): the credential sources and metrics
    built once in ``mgr``, and what builds the chain's controllers in each shard it takes."""
    o = options or ChainOptions()
    metrics = CredentialMetrics(mgr.metrics.registry)
    routes = RouteMetrics(mgr.metrics.registry, formats=route_formats.FORMATS)
    by_type = credential_sources(mgr, metrics, o)

    def build(shard: ShardHost) -> tuple[Wiring, ...]:
        wiring = register(
            shard,
            options=o,
            by_type=by_type,
            clock=clock,
            credential_metrics=metrics,
            route_metrics=routes,
        )
        # The shard given up: the series of its objects go (their new holder exports them).
        shard.on_close(lambda: metrics.forget_namespaces(shard.holds))
        shard.on_close(lambda: routes.forget_namespaces(shard.holds))
        return wiring

    return build
