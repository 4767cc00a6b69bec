"""The reconcilers of the chain Secret → BackendSecurityPolicy → ServiceBackend → Route.

Thin: each translates between Kubernetes objects and the ``rotator`` credential engine, on top of
the generic ``controllers.runtime``. A folder per controller, each with its ``reconciler`` and
``wiring``: :mod:`.policy`, :mod:`.backend`, :mod:`.route`. Beside them what they share:
:mod:`.api` (names, reasons, types), :mod:`.cache` (the chain's informers, views, indexes and
own writes), :mod:`.credentialsources`, and :mod:`.setup`, which assembles the chain.
(``routeconfig``, ``litellmconfig`` and ``restarts`` re-export the route package's names under
their earlier paths.)
"""
