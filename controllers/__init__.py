"""Everything Kubernetes: the generic controller runtime, the reconcilers and the CLI.

Layers, top to bottom (enforced by the import-linter contracts in ``pyproject.toml``):
``controllers.cli`` → ``controllers.reconcilers`` → ``controllers.runtime``. The runtime is generic
and knows nothing about credentials; the credential engine lives in the ``rotator`` package.
"""
