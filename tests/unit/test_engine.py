"""The credential engine's pure parts: copying providers, file formats, retry schedule."""

from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rotator import errors, formats, schedule
from rotator.credentials import Credential
from rotator.providers import apikey
from rotator.providers.aws import file as aws_file

SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def test_credential_repr_never_shows_data() -> None:
    c = Credential({"apiKey": SECRET.encode()}, expires_at=10.0)
    assert SECRET not in repr(c)
    assert SECRET not in str(c)
    assert "apiKey" in repr(c)


def test_content_hash_is_stable_and_sensitive() -> None:
    a = Credential({"k": b"1", "j": b"2"})
    assert a.content_hash == Credential({"j": b"2", "k": b"1"}).content_hash
    assert a.content_hash != Credential({"k": b"1", "j": b"3"}).content_hash


def test_api_key_is_trimmed_and_checked() -> None:
    assert apikey.mint({"apiKey": b" sk-1\n"}, key="apiKey", secret_name="s").data == {
        "apiKey": b"sk-1"
    }
    with pytest.raises(errors.MissingKey, match="Secret s has no key 'apiKey'"):
        apikey.mint({}, key="apiKey", secret_name="s")
    with pytest.raises(errors.InvalidInput, match="several lines"):
        apikey.mint({"apiKey": b"a\nb"}, key="apiKey", secret_name="s")


def test_aws_file_picks_the_profile_and_adds_the_region() -> None:
    text = f"[default]\naws_access_key_id=A\naws_secret_access_key=B\n[p]\naws_access_key_id = AK\naws_secret_access_key = {SECRET}\naws_session_token = T\n"
    c = aws_file.mint(
        {"credentials": text.encode()},
        key="credentials",
        profile="p",
        region="us-west-2",
        secret_name="s",
    )
    assert c.data["credentials"].decode() == (
        f"[default]\naws_access_key_id = AK\naws_secret_access_key = {SECRET}\naws_session_token = T\nregion = us-west-2\n"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (f"aws_secret_access_key = {SECRET}", "is not an AWS credentials file"),
        ("[default]\naws_access_key_id = A\n", "lacks aws_secret_access_key"),
        ("[other]\naws_access_key_id = A\naws_secret_access_key = B\n", "has no profile [default]"),
    ],
)
def test_malformed_aws_files_are_explained_without_their_content(text: str, message: str) -> None:
    with pytest.raises(errors.InvalidInput) as raised:
        formats.parse_aws_credentials(text, profile="default", where="Secret s key 'credentials'")
    assert message in str(raised.value)
    assert SECRET not in str(raised.value)


@given(attempts=st.integers(1, 40), left=st.one_of(st.none(), st.floats(0.5, 100_000)))
def test_retry_delay_grows_is_capped_and_lands_before_expiry(
    attempts: int, left: float | None
) -> None:
    now = 1_000_000.0
    expires = None if left is None else now + left
    delay = schedule.retry_delay(attempts, now=now, expires_at=expires, rng=random.Random(attempts))
    assert 0 < delay <= schedule.MAX_RETRY * 1.2
    if left is not None:
        bound = max(schedule.MIN_RETRY / 2, left / 2) + 1e-6  # float error of now + left - now
        assert delay <= bound, "a retry lands before expiry"


def test_retry_delay_after_expiry_stays_at_the_cap() -> None:
    d = schedule.retry_delay(40, now=100.0, expires_at=50.0, policy=schedule.RetryPolicy(jitter=0))
    assert d == schedule.MAX_RETRY
