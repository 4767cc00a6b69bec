"""A LiteLLM proxy process on loopback, reading a route configuration rotator rendered
(``spec.output.format: LiteLLM``), for ``rotator dev`` and the tests.

LiteLLM's proxy reads its ``config.yaml`` once, when it starts (see
controllers/reconcilers/route/formats/litellm.py), so a new configuration means a new process:
:class:`RollingGateway` does for one machine what a Deployment's rolling update does for pods —
start a proxy on the new configuration, send new requests to it once it answers, then stop the
old one after its requests finished — so that some proxy always serves.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

MASTER_KEY_ENV = "LITELLM_MASTER_KEY"
OFFLINE = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
"""LiteLLM fetches its model price list from GitHub at import unless told to use its own copy:
nothing here may depend on the network."""


def executable() -> Path | None:
    """The ``litellm`` command beside this interpreter (the dev kit's venv), if installed."""
    path = Path(sys.executable).parent / "litellm"
    return path if path.exists() else None


ZYGOTE = """
import os, signal, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)  # a terminal's Ctrl-C: the dev kit stops us itself
import litellm.proxy.proxy_server  # the slow part (~12 s of CPU), done once
import uvicorn
signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
for line in sys.stdin:
    port, path = line.split(maxsplit=1)
    pid = os.fork()
    if pid == 0:
        os.dup2(2, 1)  # the child's output goes to the log, not to the pid channel
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.environ["CONFIG_FILE_PATH"] = path.strip()  # read by the app's startup, as --config
        uvicorn.run("litellm.proxy.proxy_server:app", host="127.0.0.1", port=int(port),
                    server_header=False)
        os._exit(0)
    print(pid, flush=True)
"""
"""LiteLLM's proxy app under uvicorn, as ``litellm --config`` runs it (its CLI hands the file to
the app's startup in ``CONFIG_FILE_PATH`` too), in a process forked from one that has imported
LiteLLM: each proxy is a new process that reads its configuration when it starts, and only
then, but costs ~2 s instead of the ~12 s of CPU (20-60 s on a loaded 2-core machine) that
importing LiteLLM's proxy takes — more than a 60 s credential can spend on each rollout. On a
cluster that import is part of every pod's start (docs/operations.md, "LiteLLM").

SIGINT is ignored in the zygote, and so in every proxy: a Ctrl-C in the terminal reaches the
whole foreground process group, and uvicorn, once it has shut down on a captured SIGINT, raises
it again under the handler it found — Python's default one, which wrote a KeyboardInterrupt
traceback into litellm.log. The dev kit stops its proxies with SIGTERM and the zygote by
closing its stdin."""


class Zygote:
    """The process that has imported LiteLLM and forks a proxy per configuration."""

    def __init__(self, *, master_key: str, log: Path, env: dict[str, str] | None = None) -> None:
        if executable() is None:
            raise RuntimeError("litellm is not installed (make venv installs litellm[proxy])")
        self._log = log.open("ab")
        self._lock = threading.Lock()
        self.popen = subprocess.Popen(
            [sys.executable, "-c", ZYGOTE],
            env={**os.environ, **OFFLINE, **(env or {}), MASTER_KEY_ENV: master_key},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
        )

    def fork(self, port: int, config: Path) -> int:
        """A proxy on ``port`` serving ``config``: its pid."""
        assert self.popen.stdin is not None
        assert self.popen.stdout is not None
        with self._lock:
            self.popen.stdin.write(f"{port} {config}\n")
            self.popen.stdin.flush()
            line = self.popen.stdout.readline()
        if not line.strip().isdigit():
            raise RuntimeError(f"the LiteLLM zygote exited with {self.popen.poll()}")
        return int(line)

    def stop(self) -> None:
        if self.popen.stdin is not None:
            self.popen.stdin.close()
        try:
            self.popen.wait(10)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()
        self._log.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LiteLLMProxy:
    """One LiteLLM proxy process on a free loopback port, forked by ``zygote`` to serve
    ``config``. ``master_key`` is what clients send as ``Authorization: Bearer`` (LiteLLM hashes
    it and checks every request)."""

    def __init__(
        self, zygote: Zygote, config: Path, *, master_key: str, config_text: str = ""
    ) -> None:
        self.port = _free_port()
        self.master_key = master_key
        self.config = config
        self.config_text = config_text
        """What it serves (the file is removed once read: it holds credentials)."""
        self.pid = zygote.fork(self.port, config)

    def running(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def ready(self) -> bool:
        """Whether it answers its liveness probe (``/health/liveliness``: the proxy's own)."""
        if not self.running():
            raise RuntimeError(f"litellm (pid {self.pid}) exited")
        try:
            with urllib.request.urlopen(f"{self.url}/health/liveliness", timeout=2):  # noqa: S310
                return True
        except (OSError, urllib.error.URLError):
            return False

    def wait_ready(self, timeout: float = 120.0, now: Callable[[], float] = time.monotonic) -> None:
        deadline = now() + timeout
        while not self.ready():
            if now() > deadline:
                raise TimeoutError(f"litellm on port {self.port} not ready in {timeout} s")
            time.sleep(0.2)  # polling a process's readiness, with a deadline

    def wait_completing(
        self,
        models: list[str],
        *,
        timeout: float = 120.0,
        cancel: threading.Event | None = None,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        """Waits until a chat completion of each of ``models`` through the proxy succeeds: its
        readiness. A proxy that answers its liveness probe may still take seconds over its
        first completions (1-4.8 s were seen), and a client sent to it meanwhile waits. The
        models are tried at once, each from a thread of its own: the time a new proxy takes to
        be ready is time the credentials it replaces must still be valid. ``cancel`` set ends
        the wait (RuntimeError)."""
        deadline = now() + timeout
        stop = cancel or threading.Event()
        problems: list[Exception] = []

        def one(model: str) -> None:
            while True:
                if not self.running():
                    problems.append(RuntimeError(f"litellm (pid {self.pid}) exited"))
                    return
                if stop.is_set():
                    problems.append(RuntimeError("the gateway is stopping"))
                    return
                if self.chat(model, timeout=max(1.0, deadline - now()))[0] == 200:
                    return
                if now() > deadline:
                    problems.append(
                        TimeoutError(
                            f"litellm on port {self.port}: no completion of {model} in {timeout} s"
                        )
                    )
                    return
                stop.wait(0.5)  # polling a process's readiness, with a deadline

        probes = [threading.Thread(target=one, args=(m,), daemon=True) for m in models]
        for probe in probes:
            probe.start()
        for probe in probes:
            probe.join()
        if problems:
            raise problems[0]

    def chat(self, model: str, *, timeout: float = 30.0) -> tuple[int, str]:
        """One chat completion through the proxy: its status and (bounded) body."""
        return chat(self.url, model, bearer=self.master_key, timeout=timeout)

    def curl(self, model: str) -> str:
        """A shell line that sends a chat request through this proxy."""
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
        return (
            f"curl -sS {self.url}/v1/chat/completions -H 'Authorization: Bearer "
            f"{self.master_key}' -H 'Content-Type: application/json' -d '{body}'"
        )

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM (uvicorn finishes the requests it holds), then SIGKILL after ``timeout``."""
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)
            deadline = time.monotonic() + wait
            while self.running() and time.monotonic() < deadline:
                time.sleep(0.1)  # waiting for the process to end, with a deadline
            if not self.running():
                return


def chat(url: str, model: str, *, bearer: str, timeout: float = 30.0) -> tuple[int, str]:
    """One OpenAI-style chat completion at ``url`` (any gateway speaking the OpenAI API, LiteLLM
    or Envoy), sent with ``Authorization: Bearer <bearer>`` as a client would: its status and
    (bounded) body; status 0 with the error's type when no answer came."""
    body = json.dumps({"model": model, "messages": [{"role": "user", "content": "hi"}]})
    request = urllib.request.Request(  # noqa: S310 - loopback
        f"{url}/v1/chat/completions",
        data=body.encode(),
        headers={"Authorization": f"Bearer {bearer}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            return response.status, response.read(2000).decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(2000).decode(errors="replace")
    except OSError as exc:
        return 0, type(exc).__name__


class RollingGateway:
    """The proxy serving now (:attr:`current`), replaced with no gap, as a Deployment's rolling
    update does: a proxy starts on the new configuration, takes the traffic once it answers,
    and the one it replaces stops once the requests it holds are answered (:meth:`enter` and
    :meth:`leave` count them). One proxy starts at a time, on the newest configuration given
    (:meth:`roll` while one is starting only replaces what starts next): a LiteLLM start costs
    seconds of CPU, and starting one per change at once starved them all on a small machine."""

    def __init__(
        self,
        folder: Path,
        *,
        master_key: str,
        env: dict[str, str] | None = None,
        ready_models: Callable[[str], list[str]] | None = None,
        on_switch: Callable[[LiteLLMProxy, LiteLLMProxy | None], None] | None = None,
        drain_timeout: float = 60.0,
        retry_delay: float = 2.0,
        retry_max: float = 60.0,
    ) -> None:
        """``ready_models``: the models (of a configuration's text) whose completions through a
        new proxy must succeed before it takes the traffic (without: it answers its liveness
        probe). ``on_switch(new, old)`` is called once a new proxy is current. A replaced proxy
        is stopped once its requests are answered, or after ``drain_timeout`` seconds. A start that
        fails (a model API failing: no completion in time) is tried again after ``retry_delay``
        seconds, doubled up to ``retry_max`` at each failure, unless a newer configuration came
        meanwhile (then that one starts): a Deployment's rollout finishes once its new pods
        become ready."""
        self.folder = folder
        self.master_key = master_key
        self.env = env or {}
        self.ready_models = ready_models
        self.on_switch = on_switch
        self.drain_timeout = drain_timeout
        self.retry_delay = retry_delay
        self.retry_max = retry_max
        self.current: LiteLLMProxy | None = None
        self.rolls = 0
        """Proxies started (the first included)."""
        self.errors: list[str] = []
        self.serving = 0
        """The start whose proxy alone serves (the one before it stopped); 0 before the first."""
        self._retiring = 0
        self._stopping = threading.Event()
        self._running: list[LiteLLMProxy] = []
        """Every proxy started and not yet stopped (the current one and those draining)."""
        self._retirements: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._in_flight: dict[LiteLLMProxy, int] = {}
        """Per proxy object, not per port: a stopped proxy's port may be a new one's."""
        self._pending: str | None = None
        self._starting = False
        """Whether a starter thread will still look at :attr:`_pending` (set and cleared under
        the lock: a thread that has found nothing pending may still be alive for a moment)."""
        self._starter: threading.Thread | None = None
        self._zygote: Zygote | None = None

    def roll(self, config_text: str, *, wait: bool = True) -> None:
        """Serves ``config_text`` next; with ``wait``, returns once it (or a newer one) serves."""
        with self._lock:
            self._pending = config_text
            if not self._starting:
                self._starting = True
                self._starter = threading.Thread(target=self._start_pending, name="litellm-roll")
                self._starter.start()
            starter = self._starter
        if wait and starter is not None:
            starter.join()

    def _start_pending(self) -> None:
        delay = self.retry_delay
        try:
            while True:
                with self._lock:
                    text, self._pending = self._pending, None
                    if text is None or self._stopping.is_set():
                        self._starting = False
                        return
                    self.rolls += 1
                    generation = self.rolls
                try:
                    started = self._start(text, generation)
                except (RuntimeError, OSError) as exc:  # the zygote: not started, or gone
                    self.errors.append(f"start {generation}: {exc}")
                    started = False
                if started:
                    delay = self.retry_delay
                    continue
                if self._again(text):
                    self._stopping.wait(delay)  # a failed start tried again, backing off
                    delay = min(delay * 2, self.retry_max)
        except BaseException:  # an error not foreseen: the next roll() starts a thread again
            with self._lock:
                self._starting = False
            raise

    def _again(self, config_text: str) -> bool:
        """Puts a configuration whose start failed back as the next, unless a newer one came
        meanwhile (that one starts now): whether it did."""
        with self._lock:
            if self._pending is not None:
                return False
            self._pending = config_text
            return True

    def _start(self, config_text: str, generation: int) -> bool:
        """Starts a proxy on ``config_text`` and switches to it once ready: whether it did."""
        path = self.folder / f"config-{generation}.yaml"
        path.write_text(config_text)
        path.chmod(0o600)
        try:
            if self._zygote is None:
                self._zygote = Zygote(
                    master_key=self.master_key, log=self.folder / "litellm.log", env=self.env
                )
            proxy = LiteLLMProxy(
                self._zygote, path, master_key=self.master_key, config_text=config_text
            )
            with self._lock:
                self._running.append(proxy)
            try:
                proxy.wait_ready()
                path.unlink()  # it holds credentials; the process has read it
                if self.ready_models is not None:
                    proxy.wait_completing(self.ready_models(config_text), cancel=self._stopping)
            except (RuntimeError, TimeoutError) as exc:
                self._stopped(proxy)
                self.errors.append(f"start {generation}: {exc}")
                return False
        finally:
            path.unlink(missing_ok=True)
        with self._lock:
            old, self.current = self.current, proxy
            self._retiring += old is not None
        if self.on_switch is not None:
            self.on_switch(proxy, old)
        if old is None:
            self.serving = generation
            return True
        # in the background: the next start must not wait for this one's requests to finish
        retire = threading.Thread(target=self._retire, args=(old, generation), daemon=True)
        self._retirements.append(retire)
        retire.start()
        return True

    def _stopped(self, proxy: LiteLLMProxy, timeout: float = 30.0) -> None:
        proxy.stop(timeout)
        with self._lock:
            if proxy in self._running:  # stop() and a retirement may both stop it
                self._running.remove(proxy)

    def running(self) -> list[LiteLLMProxy]:
        """Every proxy that may still serve a request: the current one and those draining."""
        with self._lock:
            return list(self._running)

    def _retire(self, old: LiteLLMProxy, generation: int) -> None:
        self._drain(old, self.drain_timeout)
        self._stopped(old)
        with self._lock:
            self._retiring -= 1
            self.serving = max(self.serving, generation)

    @property
    def draining(self) -> bool:
        """Whether a replaced proxy still runs (its requests finishing)."""
        with self._lock:
            return self._retiring > 0

    def enter(self) -> LiteLLMProxy | None:
        with self._lock:
            proxy = self.current
            if proxy is not None:
                self._in_flight[proxy] = self._in_flight.get(proxy, 0) + 1
            return proxy

    def leave(self, proxy: LiteLLMProxy) -> None:
        with self._lock:
            self._in_flight[proxy] -= 1
            if not self._in_flight[proxy]:
                del self._in_flight[proxy]

    def in_flight(self, proxy: LiteLLMProxy) -> int:
        """Requests taken for ``proxy`` (:meth:`enter`) and not yet answered (:meth:`leave`)."""
        with self._lock:
            return self._in_flight.get(proxy, 0)

    def _drain(self, proxy: LiteLLMProxy, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.in_flight(proxy):
                return
            time.sleep(0.05)  # waiting for requests in flight, with a deadline

    def stop(self, *, wait: float = 120.0) -> None:
        """Stops starting proxies, waits up to ``wait`` seconds for each replaced one to drain,
        then stops every proxy still running (SIGTERM, then SIGKILL): none is left behind."""
        self._stopping.set()
        with self._lock:
            self._pending = None
            starter = self._starter
        if starter is not None:
            starter.join(180)
        for retire in self._retirements:
            retire.join(wait)
        with self._lock:
            self.current = None
            zygote, self._zygote = self._zygote, None
            left = list(self._running)
        for proxy in left:  # the current one, and any still draining
            self._stopped(proxy, timeout=10.0)
        if zygote is not None:
            zygote.stop()

    def status(self) -> dict[str, Any]:
        return {"rolls": self.rolls, "port": self.current.port if self.current else None}
