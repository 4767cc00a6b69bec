"""The BackendSecurityPolicy reconciler: credentials into the derived Secret, and status.

Level-triggered. Copied credentials (API keys, static AWS files) are re-derived from their
Secrets on every reconcile. Minted credentials (STS sessions, IAM keys…) are refreshed only
when needed — the served one is missing or edited, the credential part of the spec changed, a
rotation was requested (``rotator.dev/rotate-requested-at``), the controller's own identity is
no longer allowed in the policy's namespace, or its renewal time came — and everything that
decision needs is read back from the derived Secret, so a restarted controller reuses a valid
credential without calling the provider. The reconcile then returns
``Result(requeue_after=renewal - now)``: the one timer per policy. The backends a policy targets
hear of it from the policy informer's own events (``controllers.reconcilers.setup``), not from
the reconciler.

A failed refresh leaves the served credential in place: ``Ready`` stays True (reason
``RotationFailed``, the failure in the message) while it is valid, and turns False with reason
``Expired`` when it lapses. Retries follow ``rotator.schedule.retry_delay``: exponential,
capped, denser as expiry nears — never a hot loop.

One job per module, as cert-manager splits its certificates controller:

- :mod:`.decide` — why a credential is replaced now (:class:`~.decide.RefreshReason`), the one
  place a reason is decided;
- :mod:`.issue` — mint or copy, write the derived Secret, undo a mint that cannot be served;
- :mod:`.report` — status, conditions, Events, metrics and the requeue, the one place a reason
  is reported;
- :mod:`.release` — finalizers, the Secrets a release needs, and the release of a deleted
  policy's external credentials;
- :mod:`.reconciler` — the reconcile that runs them in order.
"""

from controllers.reconcilers.policy.reconciler import PolicyReconciler

__all__ = ["PolicyReconciler"]
