"""The Route controller: the route configuration a gateway loads, rendered from a Route, its
backends and their credentials into the config Secret ``rotator-route-<name>``, and the
workloads that read it only at start rolled out.

One job per module, as :mod:`controllers.reconcilers.policy`:

- :mod:`.resolve` — backend → policy → credential, read once: the one-policy rule, the Ready
  rule and the expiry, shared with the ServiceBackend reconciler;
- :mod:`.formats` — the configuration formats behind one interface (inputs hash; render → text
  plus gaps): rotator's own and LiteLLM's;
- :mod:`.configsecret` — the config Secret: one cache read, "already written?", the write;
- :mod:`.restarts` — ``spec.rolloutRestartTargets``;
- :mod:`.report` — ``ResolvedRefs`` and ``Translated``;
- :mod:`.reconciler` — the reconcile that runs them in order;
- :mod:`.wiring` — what wakes the controller.
"""

from controllers.reconcilers.route.reconciler import RouteReconciler

__all__ = ["RouteReconciler"]
