"""The credential engine's pure parts: copying providers, file formats, retry schedule, the
bulkhead that caps calls in flight to a provider. The retry bounds are the documented ones
(tests/support/backoff.py), not read from ``rotator.schedule``, so a drifted constant fails."""

from __future__ import annotations

import random
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rotator import errors, formats, schedule
from rotator.bulkhead import Bulkhead
from rotator.credentials import Credential
from rotator.providers import apikey
from rotator.providers.aws import file as aws_file
from tests.support import backoff
from tests.support.polling import wait_for

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
    assert apikey.copy_key({"apiKey": b" sk-1\n"}, key="apiKey", secret_name="s").data == {
        "apiKey": b"sk-1"
    }
    with pytest.raises(errors.MissingKey, match="Secret s has no key 'apiKey'"):
        apikey.copy_key({}, key="apiKey", secret_name="s")
    with pytest.raises(errors.InvalidInput, match="several lines"):
        apikey.copy_key({"apiKey": b"a\nb"}, key="apiKey", secret_name="s")


def test_aws_file_picks_the_profile_and_adds_the_region() -> None:
    text = f"[default]\naws_access_key_id=A\naws_secret_access_key=B\n[p]\naws_access_key_id = AK\naws_secret_access_key = {SECRET}\naws_session_token = T\n"
    c = aws_file.copy_profile(
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


@given(
    attempts=st.integers(1, 40),
    left=st.one_of(st.none(), st.floats(0.5, 100_000)),
    seed=st.integers(0, 2**32),
)
def test_retry_delay_grows_is_capped_and_lands_before_expiry(
    attempts: int, left: float | None, seed: int
) -> None:
    """1 s doubling, at most 1 min, ±20 %; while a credential is valid, no more than half the
    time it has left (and never under half a second: no hot loop at the very end).

    Mutations caught: a constant 1 s delay, no cap, the half-the-remaining-validity bound
    dropped, a zero delay."""
    now = 1_000_000.0
    expires = None if left is None else now + left
    delay = schedule.retry_delay(attempts, now=now, expires_at=expires, rng=random.Random(seed))
    shortest, longest = backoff.shortest_gap(attempts), backoff.longest_gap(attempts)
    assert delay <= longest + 1e-9
    if left is None:
        assert delay >= shortest - 1e-9
    else:
        half = max(backoff.FIRST / 2, left / 2)
        assert delay <= half + 1e-6, "a retry lands before expiry"  # 1e-6: now + left - now
        assert delay >= min(shortest, half) - 1e-6, "as late as the schedule and expiry allow"


def test_retry_delay_after_expiry_stays_at_the_cap() -> None:
    """Mutations caught: no cap."""
    d = schedule.retry_delay(40, now=100.0, expires_at=50.0, policy=schedule.RetryPolicy(jitter=0))
    assert d == backoff.CAP


def test_a_bulkhead_lets_limit_calls_in_and_fails_the_rest_fast() -> None:
    """Twelve callers at once on a bulkhead of 4: exactly four get in and hold their slots;
    the other eight give up after the wait with ProviderUnavailable (retried with backoff)
    instead of waiting on the provider; a freed slot is taken again.

    Mutations caught: the limit raised (more than four inside at once), the bulkhead removed
    (all twelve inside, none refused), slots never released (the last call is refused)."""
    bulkhead = Bulkhead("provider", limit=4, wait=0.2)
    release = threading.Event()
    lock = threading.Lock()
    inside, most, refused = 0, 0, []

    def call() -> None:
        nonlocal inside, most
        try:
            with bulkhead.slot():
                with lock:
                    inside += 1
                    most = max(most, inside)
                release.wait(30)
                with lock:
                    inside -= 1
        except errors.ProviderUnavailable as exc:
            with lock:
                refused.append(str(exc))

    threads = [threading.Thread(target=call) for _ in range(12)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(refused) == 8, timeout=10, what="eight callers refused")
        assert bulkhead.in_flight == 4
        with lock:
            assert (inside, most) == (4, 4), "four in flight, never more"
    finally:
        release.set()
        for t in threads:
            t.join()
    assert refused[0] == "4 calls to provider already in flight; it is slow or unreachable"
    assert bulkhead.in_flight == 0
    with bulkhead.slot():  # the slots came back
        pass
