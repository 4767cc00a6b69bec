"""The four reconcilers of the chain Secret → BackendSecurityPolicy → ServiceBackend → Route.

Thin: each translates between Kubernetes objects and the ``rotator`` credential engine, on top of
the generic ``controllers.runtime``.
"""
