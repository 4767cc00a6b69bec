"""Skips that only a broken setup should reach: where the run says its setup is complete
(:data:`COMPLETE`, which ``make test``, ``make e2e``, ``make e2e-kind`` and so ``.ci/run`` set),
a test that finds a part missing fails instead of skipping, so a setup that lost a part (a
shallow clone, litellm not installed, no image A) cannot turn the test into a quiet pass.

Run by hand (``pytest tests/e2e/test_upgrade.py`` in a shallow clone) the same test still skips,
saying why.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest

COMPLETE = "ROTATOR_TESTS_COMPLETE"
"""``1``: every part a test may need was installed or built by the run's own setup."""


def complete() -> bool:
    return os.environ.get(COMPLETE) == "1"


def missing(reason: str) -> NoReturn:
    """A part this test needs is missing: a skip saying ``reason``, or a failure where the
    setup is complete."""
    if complete():
        pytest.fail(f"{reason} ({COMPLETE}=1: this run's setup provides it, so it is broken)")
    pytest.skip(reason)
