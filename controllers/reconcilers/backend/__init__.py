"""The ServiceBackend controller: which policy authenticates a backend (:mod:`.reconciler`),
and what wakes it (:mod:`.wiring`).

``SETTLE_SECONDS``, ``settling`` and ``policies_for`` are :mod:`..route.resolve`'s, named here
as before.
"""

from controllers.reconcilers.backend.reconciler import BackendReconciler
from controllers.reconcilers.route.resolve import SETTLE_SECONDS, policies_for, settling

__all__ = ["SETTLE_SECONDS", "BackendReconciler", "policies_for", "settling"]
