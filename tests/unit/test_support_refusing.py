"""tests/support/refusing.py: the stand-in for what a test expects never to be used."""

from __future__ import annotations

import pytest

from rotator import oidc
from tests.support.refusing import Refused, refusing


def test_a_refusing_stand_in_raises_on_any_use_and_names_itself() -> None:
    tokens = refusing(oidc.TokenSource)
    with pytest.raises(Refused, match=r"TokenSource\.token used"):
        tokens.token  # noqa: B018 - the use under test
    with pytest.raises(Refused, match="AWS clients called"):
        refusing("AWS clients")()
    with pytest.raises(Refused, match="set"):
        tokens.x = 1  # type: ignore[attr-defined]
    assert repr(tokens) == "refusing(TokenSource)"
    assert tokens is not None, "unlike cast(T, None), it is something"
