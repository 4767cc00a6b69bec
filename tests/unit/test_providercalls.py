"""rotator.providercalls, the one fence around every call to AWS, GCP and Azure: a call that
outlasts its deadline is given up on but keeps its bulkhead slot until it really ends; a
non-idempotent call is waited for; limit+1 callers leave one refused; each call is observed
exactly once with its code; the engine's errors carry that code for all three providers; an
exception no classifier knows propagates unchanged."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any, NoReturn
from urllib.parse import urlsplit

import botocore.exceptions
import google.auth.exceptions
import pytest
from azure.core.exceptions import ClientAuthenticationError, ServiceRequestError
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from prometheus_client import CollectorRegistry

from controllers.reconcilers.metrics import CredentialMetrics
from rotator import errors
from rotator.bulkhead import Bulkhead
from rotator.providercalls import Failure, ProviderCalls, status_code
from rotator.providers import azure
from rotator.providers.aws.clients import Clients
from rotator.providers.gcp import adc, federation, keyfile
from rotator.providers.gcp import common as gcp_common
from tests.support.polling import wait_for

SECRET = "s3cr3t-never-shown-9d2c"
SLACK = 5.0  # scheduling on a loaded 2-core machine; far below the 30 s a blocked call waits


class Observed:
    """An observer that keeps what it was told."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []
        self.seconds: list[float] = []
        self._lock = threading.Lock()

    def provider_request(self, *, provider: str, call: str, code: str, seconds: float) -> None:
        with self._lock:
            self.calls.append((provider, call, code))
            self.seconds.append(seconds)

    def codes(self) -> list[str]:
        with self._lock:
            return [code for _, _, code in self.calls]


class JumpingClock:
    """A monotonic clock that moves ``step`` seconds at every read: the deadline has passed as
    soon as the caller looks at it again, without any real waiting."""

    def __init__(self, step: float) -> None:
        self.now = 0.0
        self.step = step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


class Boom(Exception):
    """An exception no classifier knows."""


def by_type_name(exc: Exception) -> Failure | None:
    """A classifier for these tests: LookupError is a refusal, OSError transient, else unknown."""
    if isinstance(exc, LookupError):
        return Failure("NotFound", transient=False)
    if isinstance(exc, OSError):
        return Failure(type(exc).__name__, transient=True)
    return None


def raising(exc: BaseException) -> Callable[[], NoReturn]:
    def call() -> NoReturn:
        raise exc

    return call


@pytest.fixture
def release() -> Iterator[threading.Event]:
    """Set at the end of every test, so no blocked call outlives it."""
    event = threading.Event()
    yield event
    event.set()


def blocking(started: threading.Event, release: threading.Event, value: str) -> Callable[[], str]:
    def call() -> str:
        started.set()
        release.wait(30)
        return value

    return call


def test_a_call_past_its_deadline_is_given_up_but_keeps_its_slot(
    release: threading.Event,
) -> None:
    """Mutations caught: no deadline (the caller waits for the call's 30 s), the slot released
    when the caller gives up (a second call gets in while the first still runs), the slot never
    released (the call after it ends is refused), the late end observed a second time."""
    observed = Observed()
    calls = ProviderCalls(
        "p", observer=observed, classify=by_type_name, concurrency=1, slot_wait=0, deadline=0.3
    )
    started = threading.Event()
    begun = time.monotonic()
    with pytest.raises(errors.ProviderUnavailable) as raised:
        calls.run("Slow", blocking(started, release, "late"))
    assert time.monotonic() - begun < 0.3 + SLACK
    assert raised.value.code == "DeadlineExceeded"
    assert str(raised.value) == "p Slow got no answer within 0.3 s"
    assert started.is_set()
    assert calls.bulkhead.in_flight == 1, "the abandoned call still holds its slot"
    with pytest.raises(errors.ProviderUnavailable) as refused:
        calls.run("Next", lambda: "never")
    assert refused.value.code == "BulkheadFull"

    release.set()
    wait_for(lambda: calls.bulkhead.in_flight == 0, timeout=10, what="the slot given back")
    assert calls.run("Next", lambda: "ok") == "ok"
    assert observed.calls == [("p", "Slow", "DeadlineExceeded"), ("p", "Next", "200")]


def test_each_call_is_observed_with_how_long_it_took(release: threading.Event) -> None:
    """The seconds observed with each code: a call's own time on the real clock, whatever the
    deadline's clock says; the deadline's wait for an abandoned one; a refused call (bulkhead
    full) not at all. Through CredentialMetrics, the histogram counts exactly the calls the
    counter does. Only lower bounds of real time (a loaded machine makes calls slower, never
    faster), and the JumpingClock's 31 s per read never seen. Mutations caught: the duration
    taken from the injected clock, observed only on success, or from before the slot."""
    observed = Observed()
    calls = ProviderCalls(
        "p", observer=observed, classify=by_type_name, concurrency=1, slot_wait=0, deadline=0.3
    )

    def slow(value: str) -> str:
        time.sleep(0.2)
        return value

    def slow_failure() -> NoReturn:
        time.sleep(0.2)
        raise LookupError("no such role")

    # the two that finish get a deadline far off: on a loaded machine a 0.2 s sleep can take
    # longer than the provider's 0.3 s (a CI run's did)
    far = time.monotonic() + 60
    assert calls.run("Ok", functools.partial(slow, "ok"), deadline=far) == "ok"
    with pytest.raises(errors.ProviderRejected):
        calls.run("Refused", slow_failure, deadline=far)
    with pytest.raises(errors.ProviderUnavailable):
        calls.run("Slow", blocking(threading.Event(), release, "late"))
    with pytest.raises(errors.ProviderUnavailable):  # the slot is still held: not observed
        calls.run("Full", lambda: "never")
    assert observed.codes() == ["200", "NotFound", "DeadlineExceeded"]
    assert [s >= 0.2 for s in observed.seconds] == [True, True, True]
    assert observed.seconds[2] >= 0.3 - 0.01, "the wait up to the deadline"
    release.set()

    jumping = Observed()
    fast = ProviderCalls("p", observer=jumping, classify=by_type_name, monotonic=JumpingClock(5))
    assert fast.run("Ok", lambda: "ok") == "ok"
    assert jumping.seconds[0] < 5, "measured on the real clock, not the deadline's"

    registry = CollectorRegistry()
    metrics = CredentialMetrics(registry)
    metered = ProviderCalls("aws-sts", observer=metrics, classify=by_type_name)
    metered.run("AssumeRole", functools.partial(slow, "ok"))
    with pytest.raises(errors.ProviderRejected):
        metered.run("AssumeRole", slow_failure)
    labels = {"provider": "aws-sts", "call": "AssumeRole"}
    count = registry.get_sample_value("rotator_provider_request_duration_seconds_count", labels)
    total = registry.get_sample_value("rotator_provider_request_duration_seconds_sum", labels)
    assert count == 2.0
    assert total is not None
    assert total >= 0.4
    fast_bucket = {**labels, "le": "0.1"}
    assert (
        registry.get_sample_value("rotator_provider_request_duration_seconds_bucket", fast_bucket)
        == 0.0
    )


def test_the_deadline_is_read_from_the_injected_clock(release: threading.Event) -> None:
    """A clock that says the deadline passed ends the wait at once, though 30 s of real time
    are left. Mutations caught: the deadline measured with the real clock."""
    observed = Observed()
    calls = ProviderCalls(
        "p", observer=observed, classify=by_type_name, monotonic=JumpingClock(31.0)
    )
    begun = time.monotonic()
    with pytest.raises(errors.ProviderUnavailable) as raised:
        calls.run("Slow", blocking(threading.Event(), release, "late"))
    assert time.monotonic() - begun < SLACK
    assert raised.value.code == "DeadlineExceeded"
    assert str(raised.value) == "p Slow got no answer within 30 s"
    assert observed.codes() == ["DeadlineExceeded"]


def test_a_call_that_must_not_be_abandoned_is_waited_for(release: threading.Event) -> None:
    """``abandon=False`` (IAM CreateAccessKey): the clock says the deadline passed long ago, and
    still the caller gets the call's result — the call ran on the caller's own thread, so it
    could not have been left behind. Mutations caught: ``abandon`` ignored (DeadlineExceeded)."""
    observed = Observed()
    calls = ProviderCalls(
        "p", observer=observed, classify=by_type_name, monotonic=JumpingClock(31.0)
    )
    started = threading.Event()
    ran_on: list[threading.Thread] = []
    outcome: list[object] = []

    def create() -> str:
        ran_on.append(threading.current_thread())
        return blocking(started, release, "AKIANEW")()

    def caller() -> None:
        try:
            outcome.append(calls.run("CreateAccessKey", create, abandon=False))
        except errors.CredentialError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=caller)
    thread.start()
    wait_for(started.is_set, timeout=10, what="the call started")
    assert calls.bulkhead.in_flight == 1
    release.set()
    thread.join(10)
    assert outcome == ["AKIANEW"]
    assert ran_on == [thread]
    assert calls.bulkhead.in_flight == 0
    assert observed.calls == [("p", "CreateAccessKey", "200")]


def test_limit_plus_one_callers_leave_one_refused(release: threading.Event) -> None:
    """Three callers on a bulkhead of two: two run, one is refused (BulkheadFull, not observed:
    it never reached the provider). Mutations caught: no bulkhead (none refused), the limit
    off by one."""
    observed = Observed()
    calls = ProviderCalls("p", observer=observed, classify=by_type_name, concurrency=2)
    started = threading.Event()
    lock = threading.Lock()
    results: list[str] = []
    refused: list[errors.ProviderUnavailable] = []

    def caller() -> None:
        try:
            value = calls.run("Call", blocking(started, release, "ok"))
        except errors.ProviderUnavailable as exc:
            with lock:
                refused.append(exc)
        else:
            with lock:
                results.append(value)

    threads = [threading.Thread(target=caller) for _ in range(3)]
    for t in threads:
        t.start()
    wait_for(lambda: len(refused) == 1, timeout=10, what="one caller refused")
    assert calls.bulkhead.in_flight == 2
    release.set()
    for t in threads:
        t.join(10)
    assert results == ["ok", "ok"]
    assert refused[0].code == "BulkheadFull"
    assert str(refused[0]) == "2 calls to p already in flight; it is slow or unreachable"
    assert observed.codes() == ["200", "200"]


@pytest.mark.parametrize("abandon", [True, False])
@pytest.mark.parametrize(
    ("fn", "kind", "code", "message"),
    [
        (lambda: "value", None, "200", None),
        (raising(KeyError("x")), errors.ProviderRejected, "NotFound", "p Call failed: NotFound"),
        (
            raising(ConnectionResetError()),
            errors.ProviderUnavailable,
            "ConnectionResetError",
            "p Call failed: ConnectionResetError",
        ),
    ],
)
def test_every_call_is_observed_once_with_its_code(
    fn: Callable[[], str],
    kind: type[errors.CredentialError] | None,
    code: str,
    message: str | None,
    abandon: bool,
) -> None:
    """Mutations caught: a code dropped from the error, an outcome observed twice or not at
    all, a refusal raised as transient or the other way round."""
    observed = Observed()
    calls = ProviderCalls("p", observer=observed, classify=by_type_name)
    if kind is None:
        assert calls.run("Call", fn, abandon=abandon) == "value"
    else:
        with pytest.raises(kind) as raised:
            calls.run("Call", fn, abandon=abandon)
        assert type(raised.value) is kind
        assert raised.value.code == code
        assert str(raised.value) == message
        assert raised.value.__cause__ is None, "no library exception chained to the error"
        assert raised.value.__suppress_context__
    assert observed.calls == [("p", "Call", code)]
    assert calls.bulkhead.in_flight == 0


@pytest.mark.parametrize("abandon", [True, False])
def test_an_exception_no_classifier_knows_propagates_unchanged(abandon: bool) -> None:
    """Mutations caught: unknown exceptions wrapped (as ProviderUnavailable or anything else),
    left unobserved, or their slot kept."""
    observed = Observed()
    calls = ProviderCalls("p", observer=observed, classify=by_type_name)
    boom = Boom("unexpected")
    with pytest.raises(Boom) as raised:
        calls.run("Call", raising(boom), abandon=abandon)
    assert raised.value is boom
    assert observed.calls == [("p", "Call", "Boom")]
    assert calls.bulkhead.in_flight == 0


def test_a_call_to_one_host_of_many_takes_its_hosts_slot_and_names_the_host(
    release: threading.Event,
) -> None:
    """``bulkhead``: a call holds a slot of the bulkhead it names, not the provider's (OIDC: a
    slow issuer fills its own host's slots). Mutations caught: the provider's bulkhead taken
    anyway, ``where`` left out of the message."""
    observed = Observed()
    calls = ProviderCalls("p", observer=observed, classify=by_type_name, label="P")
    host = Bulkhead("P host a", limit=1, wait=0)
    started = threading.Event()
    thread = threading.Thread(
        target=lambda: calls.run("Slow", blocking(started, release, "x"), bulkhead=host),
        daemon=True,
    )
    thread.start()
    wait_for(started.is_set, timeout=10, what="the call started")
    assert host.in_flight == 1
    assert calls.bulkhead.in_flight == 0
    with pytest.raises(errors.ProviderUnavailable, match="1 calls to P host a"):
        calls.run("Next", lambda: "never", bulkhead=host)
    assert calls.run("Other", lambda: "ok") == "ok", "other hosts are not affected"
    with pytest.raises(errors.ProviderRejected) as raised:
        calls.run("Get", raising(KeyError("x")), where="https://a/x")
    assert str(raised.value) == "P Get at https://a/x failed: NotFound"
    release.set()
    thread.join(10)


def test_calls_sharing_a_deadline_end_by_it_and_one_begun_past_it_is_not_made() -> None:
    """``deadline``: an absolute one, shared by a sequence of calls (OIDC discovery, then the
    token request). Mutations caught: the shared deadline ignored (each call its own), a call
    begun past it made anyway or left unobserved."""
    now = [100.0]
    observed = Observed()
    calls = ProviderCalls(
        "p", observer=observed, classify=by_type_name, deadline=10, monotonic=lambda: now[0]
    )
    made: list[str] = []

    def late() -> str:
        made.append("late")
        return "x"

    with pytest.raises(errors.ProviderUnavailable) as raised:
        calls.run("Late", late, deadline=99.0, where="h")
    assert made == []
    assert raised.value.code == "DeadlineExceeded"
    assert str(raised.value) == "p Late at h not attempted: the 10 s deadline passed"
    assert observed.calls == [("p", "Late", "DeadlineExceeded")]
    assert calls.run("InTime", lambda: "ok", deadline=101.0) == "ok"
    assert calls.bulkhead.in_flight == 0


def test_a_call_that_reports_its_own_deadline_reads_like_one_given_up_on() -> None:
    """A transport that cuts its socket at the deadline (OIDC's) reports DeadlineExceeded
    itself; the error is the one a caller that stopped waiting gets."""
    observed = Observed()

    def cut(exc: Exception) -> Failure | None:
        return (
            Failure("DeadlineExceeded", transient=True) if isinstance(exc, TimeoutError) else None
        )

    calls = ProviderCalls("p", observer=observed, classify=cut, deadline=2)
    with pytest.raises(errors.ProviderUnavailable) as raised:
        calls.run("Cut", raising(TimeoutError()))
    assert str(raised.value) == "p Cut got no answer within 2 s"
    assert raised.value.code == "DeadlineExceeded"
    assert observed.codes() == ["DeadlineExceeded"]


# --- the providers' classifiers, through the providers' own classes --------------------------


def client_error(code: str, status: int) -> botocore.exceptions.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": f"not shown {SECRET}"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return botocore.exceptions.ClientError(response, "AssumeRoleWithWebIdentity")


@pytest.mark.parametrize(
    ("exc", "kind", "code"),
    [
        (client_error("AccessDenied", 403), errors.ProviderRejected, "AccessDenied"),
        (client_error("SlowDown", 503), errors.ProviderUnavailable, "SlowDown"),
        (client_error("Throttling", 400), errors.ProviderUnavailable, "Throttling"),
        (
            botocore.exceptions.ReadTimeoutError(endpoint_url="https://sts.invalid"),
            errors.ProviderUnavailable,
            "ReadTimeoutError",
        ),
    ],
)
def test_aws_errors_carry_their_code(
    exc: Exception, kind: type[errors.CredentialError], code: str
) -> None:
    observed = Observed()
    with pytest.raises(kind) as raised:
        Clients(observed).run("aws-sts", "AssumeRoleWithWebIdentity", raising(exc))
    assert raised.value.code == code
    assert str(raised.value) == f"aws-sts AssumeRoleWithWebIdentity failed: {code}"
    assert observed.calls == [("aws-sts", "AssumeRoleWithWebIdentity", code)]


class GoogleResponse:
    """What google-auth's transport returns (``google.auth.transport.Response``)."""

    def __init__(self, status: int, data: bytes) -> None:
        self.status = status
        self.headers = {"content-type": "application/json"}
        self.data = data


def gcp_mint(answer: Callable[..., GoogleResponse]) -> tuple[Observed, gcp_common.Transport]:
    observed = Observed()
    transport = gcp_common.Transport(observed)
    transport.request = answer  # type: ignore[assignment]
    return observed, transport


def exchange(transport: gcp_common.Transport) -> None:
    federation.mint(
        transport,
        subject_token=SECRET,
        audience=federation.audience("123", "pool", "provider"),
        impersonate=None,
        endpoints=gcp_common.Endpoints(sts_url="https://sts.invalid/v1/token"),
    )


@pytest.mark.parametrize(
    ("status", "body", "kind", "code"),
    [
        (
            400,
            b'{"error": "invalid_grant", "error_description": "token ' + SECRET.encode() + b'"}',
            errors.ProviderRejected,
            "invalid_grant",
        ),
        (
            503,
            b'{"error": {"code": 503, "message": "try later", "status": "UNAVAILABLE"}}',
            errors.ProviderUnavailable,
            "UNAVAILABLE",
        ),
        (
            400,
            b'{"error": "temporarily_unavailable"}',
            errors.ProviderUnavailable,
            "temporarily_unavailable",
        ),
    ],
    ids=["invalid_grant", "UNAVAILABLE", "temporarily_unavailable"],
)
def test_gcp_oauth_errors_carry_their_code(
    status: int, body: bytes, kind: type[errors.CredentialError], code: str
) -> None:
    """A token exchange refused by Google's STS, through google-auth's own parsing."""
    observed, transport = gcp_mint(lambda **_: GoogleResponse(status, body))
    with pytest.raises(kind) as raised:
        exchange(transport)
    assert raised.value.code == code
    assert str(raised.value) == f"GCP TokenExchange failed: {code}"
    assert observed.calls == [("gcp", "TokenExchange", code)]


def test_an_unreachable_gcp_is_transient() -> None:
    def unreachable(**_: Any) -> GoogleResponse:
        raise google.auth.exceptions.TransportError("connection refused")

    observed, transport = gcp_mint(unreachable)
    with pytest.raises(errors.ProviderUnavailable) as raised:
        exchange(transport)
    assert raised.value.code == "TransportError"
    assert str(raised.value) == "GCP TokenExchange failed: unreachable"
    assert observed.calls == [("gcp", "TokenExchange", "TransportError")]


@functools.cache
def private_key_pem() -> str:
    """A throwaway RSA key for service-account key files (made once; never printed)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    return pem.decode()


def key_file(token_uri: str) -> str:
    """A service-account key whose ``token_uri`` a tenant chose."""
    return json.dumps(
        {
            "type": "service_account",
            "client_email": "sa@p.iam.gserviceaccount.com",
            "private_key": private_key_pem(),
            "private_key_id": "k1",
            "token_uri": token_uri,
        }
    )


def provider_series(registry: CollectorRegistry) -> set[tuple[str, str, str]]:
    """The (provider, call, code) series of ``rotator_provider_requests_total``."""
    return {
        (sample.labels["provider"], sample.labels["call"], sample.labels["code"])
        for metric in registry.collect()
        if metric.name == "rotator_provider_requests"
        for sample in metric.samples
        if sample.name == "rotator_provider_requests_total"
    }


def hostile_answer(i: int) -> tuple[int, dict[str, object]]:
    """The ``i``-th answer of a tenant's token endpoint, each with an error code of its own:
    OAuth errors, Google-style statuses and numbers, long and non-ASCII ones."""
    statuses = (400, 401, 403, 404, 418, 452, 499)
    shapes: list[dict[str, object]] = [
        {"error": f"made_up_{i}_" + "x" * 100, "error_description": SECRET},
        {"error": {"status": f"EVIL_{i}", "code": 400 + i, "message": SECRET}},
        {"error": {"code": 7000 + i}},
        {"error": {"code": 590 + i % 10}},
        {"error": f"ошибка_{i}"},
        {"error": f"Invalid_Grant{i}"},
    ]
    return statuses[i % len(statuses)], shapes[i % len(shapes)]


def test_a_tenants_token_uri_cannot_grow_the_provider_metrics_series() -> None:
    """A service-account key's ``token_uri`` is the tenant's: its endpoint (a new host each
    time here) may answer any error code. Through the real key-file mint, google-auth's parsing
    and the metric itself, the series stop growing once the fixed set is reached; each message
    still names the endpoint's own code, cut to a bounded ASCII word, never its description.
    Mutations caught: the raw OAuth error, Google status or number as the code again, the
    word's ASCII filter or cut dropped."""
    registry = CollectorRegistry()
    metrics = CredentialMetrics(registry)
    transport = gcp_common.Transport(metrics)
    hosts: list[str] = []

    def answer(url: str, **_: Any) -> GoogleResponse:
        hosts.append(url)
        status, body = hostile_answer(len(hosts) - 1)
        return GoogleResponse(status, json.dumps(body).encode())

    transport.request = answer  # type: ignore[assignment]

    def mint(i: int) -> errors.CredentialError:
        with pytest.raises(errors.ProviderRejected) as refused:
            keyfile.mint(
                transport,
                key_json=key_file(f"https://tenant-{i}.evil.example/token"),
                where="Secret k key 'key.json'",
                endpoints=gcp_common.Endpoints(),
            )
        return refused.value

    first = [mint(i) for i in range(12)]
    series = provider_series(registry)
    later = [mint(i) for i in range(12, 40)]
    assert len(hosts) == 40
    assert len({urlsplit(url).hostname for url in hosts}) == 40
    assert provider_series(registry) == series == {("gcp", "ServiceAccountToken", "Unrecognized")}
    for refused in first + later:
        assert refused.code == gcp_common.UNRECOGNIZED
        said = str(refused).removeprefix("GCP ServiceAccountToken failed: ")
        word = said.removesuffix(" (not an error code Google uses)")
        assert said != word, str(refused)
        assert 0 < len(word) <= 64
        assert word.isascii()
        assert SECRET not in str(refused)


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"error": "invalid_grant"}, "invalid_grant"),
        ({"error": {"status": "PERMISSION_DENIED", "code": 403}}, "PERMISSION_DENIED"),
        ({"error": {"code": 404}}, "404"),
        ({"error": {"code": 599}}, "Unrecognized"),
        ({"error": {"code": "0404"}}, "Unrecognized"),
        ({"error": "INVALID_GRANT"}, "Unrecognized"),
    ],
)
def test_google_error_codes_are_kept_and_no_other(body: dict[str, object], code: str) -> None:
    """The codes Google's token endpoints use stay the code (exact case), an HTTP status only
    if one is registered. Mutations caught: a known code turned Unrecognized, a case-folded
    match (every casing of a code would be a series of its own)."""
    observed, transport = gcp_mint(lambda **_: GoogleResponse(400, json.dumps(body).encode()))
    with pytest.raises(errors.ProviderRejected) as refused:
        exchange(transport)
    assert refused.value.code == code
    assert observed.calls == [("gcp", "TokenExchange", code)]


@pytest.mark.parametrize(
    ("status", "code"),
    [(404, "404"), (429, "429"), (503, "503"), (452, "UnknownStatus"), (999, "UnknownStatus")],
)
def test_an_http_status_is_a_code_only_when_it_is_a_registered_one(status: int, code: str) -> None:
    """The one rule for every provider's status codes (OIDC, Azure AD, the GCP metadata
    server): any three digits a server sends would otherwise be a series each."""
    assert status_code(status) == code
    failure = azure.classify(ClientAuthenticationError(message="x", response=AzureResponse(status)))
    assert failure is not None
    assert failure.code == code
    metadata = google.auth.exceptions.TransportError(f"Failed: Status: {status}")
    failure = adc.classify_adc(metadata)
    assert failure is not None
    assert failure.code == code


class AzureResponse:
    """Enough of an azure-core HTTP response for ``HttpResponseError``."""

    def __init__(self, status_code: int) -> None:
        self.status_code = status_code
        self.reason = "Service Unavailable"
        self.request: Any = None

    def text(self) -> str:
        return ""


@pytest.mark.parametrize(
    ("exc", "kind", "code"),
    [
        (
            ClientAuthenticationError(
                message="Authentication failed: AADSTS7000215: Invalid client secret provided. "
                f"Ensure the secret being sent ({SECRET}) is the value."
            ),
            errors.ProviderRejected,
            "AADSTS7000215",
        ),
        (
            ClientAuthenticationError(message="unavailable", response=AzureResponse(503)),
            errors.ProviderUnavailable,
            "503",
        ),
        (
            ServiceRequestError("connection refused"),
            errors.ProviderUnavailable,
            "ServiceRequestError",
        ),
    ],
    ids=["AADSTS7000215", "503", "ServiceRequestError"],
)
def test_azure_errors_carry_their_code(
    monkeypatch: pytest.MonkeyPatch,
    exc: Exception,
    kind: type[errors.CredentialError],
    code: str,
) -> None:
    class Refusing:
        def __init__(self, *args: object, **kwargs: object) -> None:
            pass

        def get_token(self, *scopes: str) -> NoReturn:
            raise exc

    monkeypatch.setattr(azure, "ClientSecretCredential", Refusing)
    observed = Observed()
    with pytest.raises(kind) as raised:
        azure.Azure(observed).with_secret(
            tenant_id="t", client_id="c", client_secret=SECRET, scope="api://x/.default"
        )
    assert raised.value.code == code
    assert str(raised.value) == f"Azure AD ClientSecret failed: {code}"
    assert SECRET not in str(raised.value)
    assert observed.calls == [("azure-ad", "ClientSecret", code)]


@pytest.mark.parametrize(
    "email",
    ["a/../b@x", "a@x/..", "a%2F@x", "a@x?y", "a@x#y", "a\\b@x", "no-at-sign", "a@x\x00", ""],
)
def test_an_impersonated_email_that_could_leave_its_path_segment_is_refused(email: str) -> None:
    """The email becomes a path segment of the IAM URL: refused in code, whatever admission let
    through. Mutation caught: building the URL without the check."""
    with pytest.raises(errors.InvalidInput, match="must be an email"):
        gcp_common.impersonation_url(gcp_common.Endpoints(), email)
    ok = gcp_common.impersonation_url(gcp_common.Endpoints(), "sa@p.iam.gserviceaccount.com")
    assert ok.endswith("/serviceAccounts/sa@p.iam.gserviceaccount.com:generateAccessToken")
