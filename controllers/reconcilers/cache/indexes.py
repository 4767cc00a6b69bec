"""Cache indexes that turn "what references X" into a lookup instead of a scan.

Index values are ``namespace/name`` keys of the referenced object.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from controllers.reconcilers import api
from controllers.reconcilers.credentialsources import CredentialSource
from controllers.runtime import objects

POLICY_BY_SECRET = "policy-by-secret"  # noqa: S105 - an index name
POLICY_BY_BACKEND = "policy-by-backend"
ROUTE_BY_BACKEND = "route-by-backend"


def policy_secrets(
    sources: Mapping[str, CredentialSource],
) -> Callable[[Mapping[str, Any]], Iterable[str]]:
    """BackendSecurityPolicy → the Secrets it references."""

    def index(policy: Mapping[str, Any]) -> Iterable[str]:
        spec = policy.get("spec") or {}
        source = sources.get(spec.get("type", ""))
        if source is None:
            return []
        namespace = objects.namespace(policy)
        refs = source.secret_refs(cast(api.PolicySpec, spec))
        return {objects.make_key(namespace, ref["name"]) for ref in refs}

    return index


def target_names(policy: Mapping[str, Any]) -> list[str]:
    """The ServiceBackends a policy names in ``targetRefs``, each once, in spec order: the one
    reading of ``targetRefs`` (this index, and what wakes a backend)."""
    refs = (policy.get("spec") or {}).get("targetRefs") or []
    return list(dict.fromkeys(ref["name"] for ref in refs))


def policy_backends(policy: Mapping[str, Any]) -> Iterable[str]:
    """BackendSecurityPolicy → the ServiceBackends it targets."""
    namespace = objects.namespace(policy)
    return {objects.make_key(namespace, name) for name in target_names(policy)}


def route_backend_names(route: Mapping[str, Any]) -> list[str]:
    """The ServiceBackends a Route's rules reference, each once, in spec order: the one reading
    of ``backendRefs`` (this index, and what the Route reconcile resolves)."""
    rules = (route.get("spec") or {}).get("rules") or []
    return list(
        dict.fromkeys(ref["name"] for rule in rules for ref in rule.get("backendRefs") or [])
    )


def route_backends(route: Mapping[str, Any]) -> Iterable[str]:
    """Route → the ServiceBackends its rules reference."""
    namespace = objects.namespace(route)
    return {objects.make_key(namespace, name) for name in route_backend_names(route)}
