"""The kubelet's Secret-volume writer for tests: :mod:`rotator_devkit.devenv.secretvolume`, where
``rotator dev`` uses it too."""

from __future__ import annotations

from rotator_devkit.devenv.secretvolume import AtomicWriter, validate_key

__all__ = ["AtomicWriter", "validate_key"]
