"""A small, generic controller runtime with controller-runtime's semantics.

One behaviour per module, each building on the one below it:

- ``clock``: the time source every timing decision reads (injected, faked in tests).
- ``ratelimiters``: per-item exponential backoff, a token bucket, and their maximum.
- ``queue`` → ``delaying`` → ``ratelimiting``: client-go's work queue, one capability per layer.
- ``timers``: the APScheduler-backed timers behind delayed adds (one job per key).
- ``errors`` / ``client``: a JSON REST client for the Kubernetes API with a classified error tree.
- ``objects``: typed views over raw Kubernetes bodies (plain decoded JSON).
- ``store`` / ``informer`` / ``cache``: list+watch informers feeding indexed stores.
- ``reconcile`` / ``sources`` / ``controller``: the reconcile contract and loop.
- ``builder``: a controller's sources declared beside its reconciler (``For``/``Owns``/``Watches``).
- ``leaderelection`` / ``events`` / ``metrics`` / ``health`` / ``manager``: running it all.
- ``tlsserving`` / ``metricsauth``: HTTPS metrics for callers RBAC allows (cached in
  ``rotator.expiring``, the one cache both layers share).

Nothing here knows about credentials, and nothing here imports ``rotator`` but
``rotator.expiring`` (standard library only; see its docstring).
"""
