"""The chain's caches over the in-memory API server (tests/support/memapi.py), set up as the
controller sets up its own (controllers/reconcilers/cache/chaincache.py): each kind through the
view its informer applies (``crviews``, ``secretviews.managed``) and the chain's indexes
(``chaincache.index``). The route and backend reconcilers' worlds are built on it, so their
caches hold what production's hold and are indexed the same way."""

from __future__ import annotations

from collections.abc import Mapping

from controllers.reconcilers import api
from controllers.reconcilers.cache import chaincache, crviews, secretviews
from controllers.reconcilers.credentialsources import CredentialSource
from controllers.runtime import clock as clocks
from controllers.runtime import objects
from controllers.runtime.store import Store
from tests.support import memapi


class ChainWorld:
    """Routes, backends, policies and managed Secrets, fed by :attr:`api`."""

    def __init__(self, *, now: float, by_type: Mapping[str, CredentialSource] | None = None):
        self.api = memapi.MemAPI()
        self.recorder = memapi.RecordedEvents()
        self.clock = clocks.FakeClock(now)
        self.routes, self.backends, self.policies, self.managed = Store(), Store(), Store(), Store()
        chaincache.index(policies=self.policies, routes=self.routes, by_type=by_type)
        self.api.feed(api.ROUTES, self.routes, view=crviews.route)
        self.api.feed(api.BACKENDS, self.backends, view=crviews.backend)
        self.api.feed(api.POLICIES, self.policies, view=crviews.policy)
        self.api.feed(objects.SECRETS, self.managed, view=secretviews.managed)
