"""The credential engine: providers, credential values and the rotation schedule.

Nothing in this package imports Kubernetes: it is driven by ``controllers.reconcilers``.
"""

__version__ = "0.1.0"
