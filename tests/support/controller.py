"""The controller under test, as its own process, authenticated as its ServiceAccount and bound
only by the RBAC in config/rbac — so a missing permission fails a test."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from controllers.runtime import client as clients
from controllers.runtime import objects
from rotator_devkit.controlplane.cluster import LocalControlPlane, free_port, write_kubeconfig
from rotator_devkit.devenv import manifests
from tests.support.polling import wait_for
from tests.support.proc import Proc

SERVICE_ACCOUNT = manifests.NAME_PREFIX + "controller-manager"


def install_crds(api: clients.Client) -> None:
    manifests.install_crds(api)


def install_rbac(api: clients.Client) -> None:
    manifests.apply(
        api, [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": manifests.NAMESPACE}}]
    )
    docs = manifests.kustomize(
        manifests.load(manifests.CONFIG / "rbac"),
        namespace=manifests.NAMESPACE,
        prefix=manifests.NAME_PREFIX,
    )
    manifests.apply(api, docs)


def service_account_token(api: clients.Client) -> str:
    """A token of the controller's ServiceAccount, valid for a day."""
    return str(
        api.create(
            objects.SERVICEACCOUNTS,
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 24 * 3600},
            },
            namespace=manifests.NAMESPACE,
            name=SERVICE_ACCOUNT,
            subresource="token",
        )["status"]["token"]
    )


def service_account_kubeconfig(
    control_plane: LocalControlPlane,
    api: clients.Client,
    path: Path,
    *,
    server: str | None = None,
    ca_file: Path | None = None,
) -> Path:
    """A kubeconfig with a token of the controller's ServiceAccount; ``server`` and ``ca_file``
    point it elsewhere than the API server (a proxy in front of it)."""
    write_kubeconfig(
        path,
        server=server or control_plane.server,
        ca_file=ca_file or control_plane.ca_file,
        user=SERVICE_ACCOUNT,
        credentials={"token": service_account_token(api)},
    )
    return path


def in_cluster_environment(
    control_plane: LocalControlPlane,
    api: clients.Client,
    folder: Path,
    *,
    server: str | None = None,
    ca_file: Path | None = None,
) -> dict[str, str]:
    """What a Pod of the controller reads to reach the API server, and no kubeconfig: the files
    the kubelet projects (token, ca.crt, namespace) in ``folder`` and ``KUBERNETES_SERVICE_*``;
    the environment of a controller process started without ``--kubeconfig``. The loading is
    the Pod's (``restconfig``'s in-cluster branch, which imports no kubeconfig loader);
    ``server`` and ``ca_file`` as in :func:`service_account_kubeconfig`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(service_account_token(api))
    (folder / "ca.crt").write_bytes((ca_file or control_plane.ca_file).read_bytes())
    (folder / "namespace").write_text(manifests.NAMESPACE)
    url = urlsplit(server or control_plane.server)
    return {
        "KUBERNETES_SERVICE_HOST": url.hostname or "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(url.port or 443),
        "ROTATOR_IN_CLUSTER_DIR": str(folder),
        "KUBECONFIG": "",  # the runner's own, if set, would come first (restconfig's order)
    }


class ControllerProcess:
    """``rotator run`` against the test control plane; start, stop, restart, inspect. With no
    ``kubeconfig``, the controller finds the API server as a Pod does (``env`` from
    :func:`in_cluster_environment`)."""

    def __init__(
        self,
        kubeconfig: Path | None,
        workdir: Path,
        *,
        env: dict[str, str] | None = None,
        args: tuple[str, ...] = (),
        lease: str = "rotator-leader-election",
        module: str = "controllers.cli",
    ) -> None:
        self.kubeconfig = kubeconfig
        self.lease = lease
        self.module = module  # what `python -m` runs: the CLI, or a test wrapper with fault hooks
        self.workdir = workdir
        self.env = env or {}
        self.args = args
        self.proc: Proc | None = None
        self.runs = 0

    def start(
        self,
        *extra: str,
        leader_elect: bool = True,
        wait_leading: bool = True,
        on_spawn: Callable[[int], None] | None = None,
        ready_timeout: float = 60,
    ) -> ControllerProcess:
        """Starts ``rotator run`` and waits until it is ready and (``wait_leading``) leads.
        ``on_spawn`` is called with the process id as soon as it exists (a profiler attaches).
        ``ready_timeout``: a sharded replica is ready only once its shards' caches synced, which
        at scale takes longer than the default minute."""
        self.runs += 1
        metrics, probes = free_port(), free_port()
        argv = [
            "-m", self.module, "run",
            *(("--kubeconfig", str(self.kubeconfig)) if self.kubeconfig is not None else ()),
            "--metrics-bind-address", f"127.0.0.1:{metrics}",
            # plain HTTP, for metric() and idle(); a later --metrics-secure in args or extra
            # wins (tests/e2e/test_metrics_auth.py reads the secure endpoint itself)
            "--metrics-secure=false",
            "--health-probe-bind-address", f"127.0.0.1:{probes}",
            "--log-level", "debug",
            *self.args,
            *extra,
        ]  # fmt: skip
        if leader_elect:
            argv += ["--leader-elect", "--leader-election-namespace", manifests.NAMESPACE]
            argv += ["--leader-election-id", self.lease]
        self.proc = Proc(
            argv,
            self._log_path(),
            metrics_port=metrics,
            probe_port=probes,
            env=self.env,
        )
        if on_spawn is not None:
            on_spawn(self.proc.popen.pid)
        wait_for(
            lambda: self.proc is not None and self.proc.http(probes, "/readyz")[0] == 200,
            timeout=ready_timeout,
            what="controller ready",
        )
        if leader_elect and wait_leading:
            wait_for(
                lambda: self.metric("leader_election_master_status", name=self.lease) == 1,
                timeout=60,
                what="controller leading",
            )
        return self

    def stop(self) -> int:
        """SIGTERM and its exit code; a process still running after the wait is killed, so that
        no stopped controller keeps the Lease (the wait's TimeoutExpired is raised after)."""
        assert self.proc is not None
        try:
            code = self.proc.terminate()
        finally:
            self.proc.close()
            self.proc = None
        return code

    def restart(self, *extra: str, leader_elect: bool = True) -> ControllerProcess:
        self.stop()
        return self.start(*extra, leader_elect=leader_elect)

    def run_log(self) -> str:
        """The log of the current run, or of the last one once stopped (each start logs to a
        file of its own)."""
        return self._log_path().read_text(errors="replace")

    def _log_path(self) -> Path:
        return self.workdir / f"controller-{self.runs}.log"

    def metric(self, metric_name: str, **labels: str) -> float | None:
        assert self.proc is not None
        return self.proc.metric(metric_name, **labels)

    def series(self, metric_name: str) -> list[dict[str, str]]:
        assert self.proc is not None
        return self.proc.series(metric_name)

    def total(self, metric_name: str, **labels: str) -> float:
        assert self.proc is not None
        return self.proc.total(metric_name, **labels)

    def _busy(self) -> bool:
        assert self.proc is not None
        names = ("workqueue_depth", "controller_runtime_active_workers")
        text = self.proc.metrics(*names)
        gauges = tuple(f"{name}{{" for name in names)
        return any(
            line.startswith(gauges) and not line.endswith(" 0.0") for line in text.splitlines()
        )

    def idle(self) -> bool:
        """No queued or running work, twice in a row 0.2 s apart (a key whose watch event is
        still on its way to a queue is briefly in neither)."""
        if self._busy():
            return False
        time.sleep(0.2)  # the second look of a two-sample check, not synchronisation
        return not self._busy()

    def logs(self) -> str:
        """Every controller log in the workdir (also those of another process that ran there
        before this one), oldest run first: by run number, where a name sort put run 10 before
        run 2."""
        paths = self.workdir.glob("controller-*.log")
        return "\n".join(
            p.read_text(errors="replace")
            for p in sorted(paths, key=lambda p: int(p.stem.rpartition("-")[2]))
        )
