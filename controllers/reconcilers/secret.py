"""The Secret controller: a change to a Secret that policies reference is sent to those
policies. It watches Secrets as metadata only — it learns *that* a Secret changed, never what it
holds — and keeps its queue free of Secrets no policy references."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from controllers.reconcilers import indexes
from controllers.runtime import channel, objects
from controllers.runtime.reconcile import Request, Result
from controllers.runtime.store import Store


class SecretReconciler:
    def __init__(self, *, policies: Store, to_policies: channel.Channel[Request]) -> None:
        self._policies = policies
        self._to_policies = to_policies

    def referenced(self, secret: Mapping[str, Any]) -> Iterable[Request]:
        """The Secret's own request, if any policy references it (the source's mapper)."""
        if self._policies.by_index(indexes.POLICY_BY_SECRET, objects.key_of(secret)):
            return (Request.for_object(secret),)
        return ()

    def reconcile(self, request: Request) -> Result:
        for policy in self._policies.by_index(indexes.POLICY_BY_SECRET, request.key):
            self._to_policies.send(Request.for_object(policy))
        return Result()
