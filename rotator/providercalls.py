"""One way to call a cloud provider's library: a bulkhead slot, one total deadline, exactly one
observation, and the library's exceptions mapped into the engine's error tree with their code.

Why it exists: AWS (botocore), GCP (google-auth) and Azure (azure-identity) each need the same
fence around a call, and three hand-written copies had drifted (two raised errors without a
code, none had a deadline). Only the *classifier* — which of a library's exceptions mean what —
is per provider; everything else is here.

Why a deadline on top of the libraries' timeouts: their timeouts bound each socket read, not
the call. A provider that trickles a byte every few seconds never trips a read timeout and
would hold a reconcile worker for ever. So a call runs on a thread of its own and its caller
waits at most what is left of the deadline, then fails with
:class:`~rotator.errors.ProviderUnavailable` (code ``DeadlineExceeded``, retried with backoff).
The abandoned call goes on until the library gives up; it keeps its bulkhead slot until then,
so a hung provider still holds at most ``concurrency`` calls (and threads), never more. Its
result, or its error, is dropped: it was already reported as ``DeadlineExceeded``.

A call that must not be abandoned (``abandon=False``) runs on the caller's own thread and is
waited for however long it takes, bounded only by the library's own connect/read timeouts (and
retries). IAM ``CreateAccessKey`` is one: it creates a key, and a caller that stopped waiting
would never learn the key's id. The key would live on, served by nobody, until the next
rotation's level-triggered convergence (:mod:`rotator.providers.aws.iam`) deleted it — and a
retry converging while the abandoned call was still in flight would not even see it. Waiting,
the caller learns of every key the library learns of (only a key created behind a library
timeout is left to the convergence).

One fence serves calls to many hosts too (OIDC: every tenant names its own issuer): a call may
take its slot of a bulkhead of its own (its host's, so a slow issuer fills only its own slots),
share one absolute deadline with the calls before it (discovery, then the token request), and
name where it went in its messages.

Threads are daemon threads, one per call (a call costs milliseconds to seconds of network; a
thread costs microseconds), not a ``ThreadPoolExecutor``: the interpreter joins an executor's
workers at exit, so one hung call would keep a stopping controller from exiting.
"""

from __future__ import annotations

import contextvars
import http
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import NoReturn, TypeVar

from rotator import errors
from rotator.bulkhead import Bulkhead
from rotator.observe import Observer

DEADLINE = 30.0
"""Seconds one provider call may take, waiting for a bulkhead slot included. Longer than the
libraries' own bounds for a call that answers (botocore: 5 s connect + 10 s read, two attempts),
so it cuts only a provider that never finishes answering."""
SLOT_WAIT = 1.0
"""Seconds a call waits for a slot of its provider's bulkhead (less if the deadline is nearer)."""
DEADLINE_EXCEEDED = "DeadlineExceeded"
"""The code of a call that got no complete answer within its deadline."""
UNKNOWN_STATUS = "UnknownStatus"
"""The code of an answer whose HTTP status is none that :class:`http.HTTPStatus` registers."""
_STATUSES = frozenset(int(s) for s in http.HTTPStatus)

T = TypeVar("T")


@dataclass(frozen=True)
class Failure:
    """What a library's exception means: ``code`` is observed and carried on the engine's error
    (the provider's error code, or the exception's type name when the provider never answered);
    ``transient`` picks :class:`~rotator.errors.ProviderUnavailable` (retried) over
    :class:`~rotator.errors.ProviderRejected` (permanent until the spec or a Secret changes).
    ``shown`` replaces the code in the message when the code would say less to a user."""

    code: str
    transient: bool
    shown: str | None = None


Classifier = Callable[[Exception], Failure | None]
"""A library's exception → its :class:`Failure`, or None: not the library's, propagate it.

A failure's ``code`` is the ``code`` label of ``rotator_provider_requests_total``: it must come
from a fixed set (a provider's documented codes, :func:`status_code`, exception type names),
never be copied from an answer a tenant's endpoint can write (an OIDC issuer, a GCP key's
``token_uri``): each new value would be a new metric series for ever."""


def status_code(status: int) -> str:
    """An HTTP status as a failure's code: its number when :class:`http.HTTPStatus` registers
    it (about sixty), else :data:`UNKNOWN_STATUS` — a server may send any three digits, and
    one that is a tenant's could otherwise make 900 series of each call."""
    return str(status) if status in _STATUSES else UNKNOWN_STATUS


class ProviderCalls:
    """The calls to one provider (``aws-sts``, ``gcp``…): see the module docstring.

    Messages read ``"<label> <call> failed: <code>"`` (``label`` defaults to the provider
    name); they are shown to users in conditions and Events, so classifiers put in a code
    only, never a response body or a byte of a secret."""

    def __init__(
        self,
        provider: str,
        *,
        observer: Observer,
        classify: Classifier,
        label: str | None = None,
        concurrency: int = 4,
        slot_wait: float = SLOT_WAIT,
        deadline: float = DEADLINE,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.bulkhead = Bulkhead(provider, limit=concurrency, wait=slot_wait)
        self._observer = observer
        self._classify = classify
        self._label = label or provider
        self._deadline = deadline
        self._monotonic = monotonic

    @property
    def deadline(self) -> float:
        """Seconds one call may take (one :meth:`run`, or calls sharing a ``deadline``)."""
        return self._deadline

    def run(
        self,
        call: str,
        fn: Callable[[], T],
        *,
        abandon: bool = True,
        bulkhead: Bulkhead | None = None,
        deadline: float | None = None,
        where: str = "",
    ) -> T:
        """``fn()`` within a bulkhead slot and the deadline; its value, or the engine's error.

        Observes exactly one code for a call that got a slot: ``200``, the failure's code, the
        type name of an exception the classifier does not know (re-raised unchanged), or
        ``DeadlineExceeded``; with the seconds from the slot to that outcome (0 for a call begun
        past a shared deadline, not made). A call the bulkhead refuses never reached the
        provider: it raises ProviderUnavailable (code ``BulkheadFull``) and is not observed.
        ``abandon=False``: wait for ``fn`` however long it takes (a non-idempotent call; see the
        module docstring).

        ``bulkhead`` replaces the provider's (a host's, of a provider with many); ``deadline``
        (on ``monotonic``) replaces now plus the provider's deadline, for calls that share one
        (a call begun past it is observed as ``DeadlineExceeded`` and not made); ``where``
        names the host called in messages (``"<label> <call> at <where> failed: …"``).
        """
        slots = bulkhead or self.bulkhead
        what = f"{self._label} {call}" + (f" at {where}" if where else "")
        if deadline is None:
            at, remaining = self._monotonic() + self._deadline, self._deadline
        else:
            at, remaining = deadline, deadline - self._monotonic()
        if remaining <= 0:
            self._observe(call, DEADLINE_EXCEEDED, None)
            raise errors.ProviderUnavailable(
                f"{what} not attempted: the {self._deadline:g} s deadline passed",
                code=DEADLINE_EXCEEDED,
            )
        slots.acquire(wait=min(slots.wait, remaining))
        began = time.perf_counter()  # the call's duration, from its slot (the deadline's clock
        # is the injected one; this is a measurement, always the real clock)
        if not abandon:
            try:
                value = fn()
            except BaseException as exc:
                self._failed(call, what, exc, began)
            finally:
                slots.release()
            self._observe(call, "200", began)
            return value
        future = start(fn, release=slots.release, name=f"{self.provider} {call}")
        while not future.done():
            remaining = at - self._monotonic()
            if remaining <= 0 and not future.done():
                self._observe(call, DEADLINE_EXCEEDED, began)
                raise self._too_late(what)
            wait([future], timeout=max(0.0, remaining))
        raised = future.exception()
        if raised is not None:
            self._failed(call, what, raised, began)
        self._observe(call, "200", began)
        return future.result()

    def _failed(self, call: str, what: str, exc: BaseException, began: float) -> NoReturn:
        failure = self._classify(exc) if isinstance(exc, Exception) else None
        if failure is None:
            self._observe(call, type(exc).__name__, began)
            raise exc
        self._observe(call, failure.code, began)
        if failure.code == DEADLINE_EXCEEDED:  # a transport that cut itself off at the deadline
            raise self._too_late(what) from None
        kind = errors.ProviderUnavailable if failure.transient else errors.ProviderRejected
        message = f"{what} failed: {failure.shown or failure.code}"
        raise kind(message, code=failure.code) from None

    def _too_late(self, what: str) -> errors.ProviderUnavailable:
        return errors.ProviderUnavailable(
            f"{what} got no answer within {self._deadline:g} s", code=DEADLINE_EXCEEDED
        )

    def _observe(self, call: str, code: str, began: float | None) -> None:
        """One observation: ``code``, and the seconds since ``began`` (:func:`time.perf_counter`
        when the call got its slot; None: not made, 0 s)."""
        seconds = 0.0 if began is None else time.perf_counter() - began
        self._observer.provider_request(
            provider=self.provider, call=call, code=code, seconds=seconds
        )


def start(fn: Callable[[], T], *, release: Callable[[], None], name: str) -> Future[T]:
    """Runs ``fn`` on a daemon thread that calls ``release`` (gives a bulkhead slot back) when
    ``fn`` ends — before its outcome is handed over, so a caller that got the outcome finds the
    slot free. Whoever waits for the future may stop waiting; the call still holds its slot."""
    future: Future[T] = Future()
    future.set_running_or_notify_cancel()
    context = contextvars.copy_context()

    def body() -> None:
        try:
            value = context.run(fn)
        except BaseException as exc:
            release()
            future.set_exception(exc)
        else:
            release()
            future.set_result(value)

    thread = threading.Thread(target=body, name=name, daemon=True)
    try:
        thread.start()
    except BaseException:
        release()
        raise
    return future
