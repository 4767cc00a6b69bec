"""The controller Pods' logs, kept by the suite: a Pod's logs vanish with it, and the faults
delete Pods, so each container's log is followed (``kubectl logs -f``) into a file from the time
it is first seen until it ends.

The logs are JSON lines (``controllers/logs.py``) with a ``timestamp``; at ``--log-level debug``
every reconcile logs ``reconcile.started`` and one of the end events with its ``reconcile_id``,
which is how the suite tells when each replica worked (tests/support/reconcilelog.py, shared with
``tests/e2e/test_leader_faults.py``).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.kind.cluster import PODS, Cluster


def pod_of_file(name: str) -> str:
    """The Pod a log file of :class:`ControllerLogs` belongs to (``<pod>.<restartCount>.log``)."""
    return name.rsplit(".", 2)[0]


class ControllerLogs:
    """Follows the logs of every controller container it is shown, one file per container
    incarnation (``<pod>.<restartCount>.log``)."""

    def __init__(self, cluster: Cluster, namespace: str, selector: str, folder: Path) -> None:
        self._cluster, self._ns, self._selector = cluster, namespace, selector
        self.folder = folder
        self._followers: dict[tuple[str, int], subprocess.Popen[bytes]] = {}

    def follow(self) -> list[str]:
        """Starts following every running controller container not followed yet; returns the
        names of the controller Pods now running."""
        running = []
        for pod in self._cluster.items(PODS, namespace=self._ns, label_selector=self._selector):
            name = pod["metadata"]["name"]
            for status in (pod.get("status") or {}).get("containerStatuses") or []:
                if status["name"] != "manager" or "running" not in (status.get("state") or {}):
                    continue
                running.append(name)
                key = (name, int(status.get("restartCount", 0)))
                if key in self._followers:
                    continue
                out = (self.folder / f"{name}.{key[1]}.log").open("wb")
                self._followers[key] = subprocess.Popen(
                    [
                        self._cluster.kubectl_path,
                        "--kubeconfig",
                        str(self._cluster.kubeconfig),
                        "logs",
                        "-f",
                        "-n",
                        self._ns,
                        name,
                        "-c",
                        "manager",
                    ],
                    stdout=out,
                    stderr=subprocess.DEVNULL,
                )
                out.close()
        return running

    def text(self, pod: str) -> str:
        """Everything a Pod's containers logged so far, oldest incarnation first."""
        files = sorted(
            self.folder.glob(f"{pod}.*.log"), key=lambda p: int(p.name.rsplit(".", 2)[1])
        )
        return "".join(p.read_text(errors="replace") for p in files)

    def all_text(self) -> dict[str, str]:
        return {p.name: p.read_text(errors="replace") for p in sorted(self.folder.glob("*.log"))}

    def ended_files(self) -> set[str]:
        """The files (:meth:`all_text`'s names) whose container incarnation has ended."""
        return {
            f"{name}.{restarts}.log"
            for (name, restarts), p in self._followers.items()
            if p.poll() is not None
        }

    def ended(self, pod: str) -> bool:
        """Every follower of the Pod has ended (its containers are gone)."""
        mine = [p for (name, _), p in self._followers.items() if name == pod]
        return bool(mine) and all(p.poll() is not None for p in mine)

    def stop(self) -> None:
        for process in self._followers.values():
            if process.poll() is None:
                process.terminate()
                process.wait(10)
