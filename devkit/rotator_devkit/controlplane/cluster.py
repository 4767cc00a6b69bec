"""The local control plane: start, wait until ready, hand out a kubeconfig, stop clean.

Each control plane lives in its own temporary folder (PKI, etcd data, logs, kubeconfig), with an
``owner.pid`` file; folders whose owner died without cleaning up (SIGKILL) are swept on the next
start. Call :meth:`LocalControlPlane.start` from a long-lived thread (the main thread): the
children's parent-death signal fires when the starting *thread* exits.
"""

from __future__ import annotations

import atexit
import base64
import os
import shutil
import socket
import ssl
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from rotator_devkit.controlplane import pki
from rotator_devkit.controlplane.processes import Child

_PREFIX = "rotator-controlplane-"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"
KCM_CONTROLLERS = (
    "deployment-controller,garbage-collector-controller,namespace-controller,"
    "serviceaccount-controller"
)
"""The deployment controller turns a changed pod template into a new ReplicaSet (no pods run
here: there is no scheduler or kubelet), which tests/e2e/test_rollout_restart.py counts."""


class ControlPlaneError(Exception):
    """A component failed to start or become ready; the message ends with its log."""


@dataclass(frozen=True)
class ControlPlaneOptions:
    start_timeout: float = 120.0
    """Seconds each component gets to become ready. Defaults to 120."""
    stop_grace: float = 10.0
    """Seconds between SIGTERM and SIGKILL on stop. Defaults to 10."""
    extra_apiserver_flags: tuple[str, ...] = ()
    """kube-apiserver flags after the launcher's own, e.g. a feature gate
    (``--feature-gates=ShardedListAndWatch=true``: tests/e2e/test_shards.py, ``rotator dev
    --apiserver-flag``). Defaults to none."""
    audit_policy: dict[str, Any] | None = None
    """An audit ``Policy`` (audit.k8s.io/v1); when set, the API server writes a JSON audit log to
    :attr:`LocalControlPlane.audit_log`. Defaults to no auditing."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


AUDIT_LOG_MAX_MB = 1 << 20
"""The audit log's size before the API server rotates it, in MB (a TiB: never, in a run)."""

UNOWNED_GRACE = 300.0
"""Seconds a folder without a readable ``owner.pid`` is left alone: another process may have
just made it and not yet written the file (two pytest workers start their control planes at
once, and each sweeps first: a CI run lost one worker's folder that way)."""


def sweep_stale(tmp_root: Path | None = None, *, now: float | None = None) -> list[Path]:
    """Removes folders of control planes whose owner process is gone, or that never named one
    and are older than :data:`UNOWNED_GRACE`; returns them."""
    removed = []
    at = time.time() if now is None else now
    for folder in Path(tmp_root or tempfile.gettempdir()).glob(f"{_PREFIX}*"):
        try:
            owner = int((folder / "owner.pid").read_text())
        except (OSError, ValueError):
            owner = 0
        if owner and _alive(owner):
            continue
        if not owner:
            try:
                made = folder.stat().st_mtime
            except OSError:
                continue
            if at - made < UNOWNED_GRACE:
                continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class LocalControlPlane:
    """etcd + kube-apiserver + kube-controller-manager on loopback; a context manager."""

    def __init__(self, assets: Path, options: ControlPlaneOptions | None = None) -> None:
        self.assets = assets
        self.options = options or ControlPlaneOptions()
        self.dir = Path()
        self.etcd_port = 0
        self.apiserver_port = 0
        self._children: dict[str, Child] = {}
        self._stopped = True

    # --- public ------------------------------------------------------------------------------

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def kubeconfig(self) -> Path:
        """An admin (``system:masters``) kubeconfig."""
        return self.dir / "admin.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.dir / "audit.log"

    @property
    def ca_file(self) -> Path:
        return self.dir / "pki" / "ca.crt"

    def child(self, name: str) -> Child:
        return self._children[name]

    def rss_bytes(self) -> dict[str, int]:
        return {name: child.rss_bytes() for name, child in self._children.items()}

    def start(self) -> LocalControlPlane:
        sweep_stale()
        self.dir = Path(tempfile.mkdtemp(prefix=_PREFIX))
        owner = self.dir / "owner.pid.tmp"  # renamed whole: a sweep never reads it half written
        owner.write_text(str(os.getpid()))
        owner.replace(self.dir / "owner.pid")
        self._stopped = False
        atexit.register(self.stop)
        try:
            self._write_pki()
            self.etcd_port = free_port()
            self.apiserver_port = free_port()
            self._start_etcd()
            self.start_apiserver()
            self._write_kubeconfig("admin", self.kubeconfig)
            self._write_kubeconfig("kube-controller-manager", self.dir / "kcm.kubeconfig")
            self._start_controller_manager()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stops every component (newest first) and removes the folder; idempotent."""
        if self._stopped:
            return
        self._stopped = True
        for name in reversed(list(self._children)):
            self._children[name].stop(self.options.stop_grace)
        self._children.clear()
        shutil.rmtree(self.dir, ignore_errors=True)
        atexit.unregister(self.stop)

    def stop_apiserver(self) -> None:
        self._children.pop("kube-apiserver").stop(self.options.stop_grace)

    def start_apiserver(self) -> None:
        d = self.dir
        argv = [
            str(self.assets / "kube-apiserver"),
            f"--etcd-servers={self.etcd_url}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={d / 'apiserver-certs'}",
            f"--tls-cert-file={d / 'pki' / 'apiserver.crt'}",
            f"--tls-private-key-file={d / 'pki' / 'apiserver.key'}",
            f"--client-ca-file={self.ca_file}",
            "--authorization-mode=RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={d / 'pki' / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'pki' / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--profiling=false",
            *self._audit_flags(),
            *self.options.extra_apiserver_flags,
        ]
        child = self._spawn("kube-apiserver", argv)
        self._wait_https(child, f"{self.server}/readyz")

    def _audit_flags(self) -> list[str]:
        if self.options.audit_policy is None:
            return []
        policy_file = self.dir / "audit-policy.yaml"
        policy_file.write_text(yaml.safe_dump(self.options.audit_policy))
        return [
            f"--audit-policy-file={policy_file}",
            f"--audit-log-path={self.audit_log}",
            "--audit-log-format=json",
            "--audit-log-mode=blocking",
            # never rotated: readers hold byte offsets into it (tests/support/audit.py), and the
            # API server's writer rotates at 100 MB by default (0 means that default), which
            # the scale benchmark's 5,000 propagation samples crossed
            f"--audit-log-maxsize={AUDIT_LOG_MAX_MB}",
        ]

    # --- components --------------------------------------------------------------------------

    def _write_pki(self) -> None:
        folder = self.dir / "pki"
        folder.mkdir()
        ca = pki.CertificateAuthority()
        issued = {
            "apiserver": ca.issue(
                "kube-apiserver",
                dns_names=[
                    "localhost",
                    "kubernetes",
                    "kubernetes.default",
                    "kubernetes.default.svc",
                    "kubernetes.default.svc.cluster.local",
                ],
                ip_addresses=["127.0.0.1", "10.0.0.1"],
                server=True,
            ),
            "admin": ca.issue("admin", organizations=["system:masters"], client=True),
            # system:masters: the test control plane's controllers run with their own
            # credentials rather than one service account each.
            "kube-controller-manager": ca.issue(
                "system:kube-controller-manager", organizations=["system:masters"], client=True
            ),
        }
        (folder / "ca.crt").write_bytes(ca.cert_pem)
        for name, pem in issued.items():
            (folder / f"{name}.crt").write_bytes(pem.cert)
            _write_private(folder / f"{name}.key", pem.key)
        private, public = pki.service_account_signing_key()
        _write_private(folder / "sa.key", private)
        (folder / "sa.pub").write_bytes(public)

    def _write_kubeconfig(self, user: str, path: Path) -> None:
        folder = self.dir / "pki"
        write_kubeconfig(
            path,
            server=self.server,
            ca_file=self.ca_file,
            user=user,
            credentials={
                "client-certificate-data": _b64(folder / f"{user}.crt"),
                "client-key-data": _b64(folder / f"{user}.key"),
            },
        )

    def _start_etcd(self) -> None:
        peer = free_port()
        argv = [
            str(self.assets / "etcd"),
            "--name=default",
            f"--data-dir={self.dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
            f"--initial-cluster=default=http://127.0.0.1:{peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]
        child = self._spawn("etcd", argv)
        self._wait(child, lambda: _http_ok(f"{self.etcd_url}/health"))

    def _start_controller_manager(self) -> None:
        kubeconfig = self.dir / "kcm.kubeconfig"
        argv = [
            str(self.assets / "kube-controller-manager"),
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--controllers={KCM_CONTROLLERS}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={(port := free_port())}",
            f"--cert-dir={self.dir / 'kcm-certs'}",
            "--use-service-account-credentials=false",
            "--profiling=false",
        ]
        child = self._spawn("kube-controller-manager", argv)
        self._wait_https(child, f"https://127.0.0.1:{port}/healthz", verify=False)

    # --- helpers -----------------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str]) -> Child:
        logs = self.dir / "logs"
        logs.mkdir(exist_ok=True)
        child = Child(name, argv, log_path=logs / f"{name}.log")
        self._children[name] = child
        return child

    def _wait_https(self, child: Child, url: str, *, verify: bool = True) -> None:
        context = ssl.create_default_context(cafile=str(self.ca_file))
        if verify:
            context.load_cert_chain(self.dir / "pki" / "admin.crt", self.dir / "pki" / "admin.key")
        else:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        self._wait(child, lambda: _http_ok(url, context))

    def _wait(self, child: Child, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.options.start_timeout
        while time.monotonic() < deadline:
            if not child.alive():
                raise ControlPlaneError(
                    f"{child.name} exited with code {child.returncode()}:\n{child.tail()}"
                )
            if ready():
                return
            time.sleep(0.1)  # polling a child process for readiness; nothing to wait on
        raise ControlPlaneError(
            f"{child.name} not ready after {self.options.start_timeout}s:\n{child.tail()}"
        )

    def __enter__(self) -> LocalControlPlane:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def _write_private(path: Path, data: bytes) -> None:
    path.write_bytes(data)
    path.chmod(0o600)


def _http_ok(url: str, context: ssl.SSLContext | None = None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=context) as response:  # noqa: S310
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ssl.SSLError):
        return False


def _b64(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def write_kubeconfig(
    path: Path, *, server: str, ca_file: Path, user: str, credentials: dict[str, str]
) -> None:
    """A kubeconfig (mode 0600) for one user of a cluster: ``credentials`` is its ``user``
    entry, client certificate data or a bearer token."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": server, "certificate-authority-data": _b64(ca_file)},
            }
        ],
        "users": [{"name": user, "user": credentials}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": user}}],
        "current-context": "local",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
