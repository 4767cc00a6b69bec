"""Test-wide setup: the product's own structured logging, so tests see what operators see, and
Hypothesis without its per-example deadline.

Hypothesis fails an example that takes over 200 ms of wall-clock time. That is a timing goal, and
timing goals live in benchmarks: on 2 cores with the kind stage's builds beside make test
(.ci/run) a property test of the retry schedule took 262 ms once and failed as "flaky". What the
properties assert is unchanged."""

from __future__ import annotations

from hypothesis import settings

from controllers import logs

logs.configure("json", "debug")

settings.register_profile("rotator", deadline=None)
settings.load_profile("rotator")
