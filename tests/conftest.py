"""Test-wide setup: the product's own structured logging, so tests see what operators see."""

from __future__ import annotations

from controllers import logs

logs.configure("json", "debug")
