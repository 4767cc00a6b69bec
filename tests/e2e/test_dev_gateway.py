"""`rotator dev`'s gateways as a user meets them: printed addresses that stay true for the whole
run, carrying all four credential types through their rotations, with no failed request — the
LiteLLM gateway (a proxy restarted behind one address for each rotation) and, beside it, the
Envoy gateway (one Envoy for the whole run, reloading each credential file the dev kit lays out
as the kubelet would: the same PID from start to end).

A client in a process of its own (tests/support/devclient.py) sends 4 requests a second
through the printed address, over the four models of config/samples/litellm.yaml, while the
Bedrock (STS session), Azure OpenAI (Entra ID token) and Vertex AI (Google token) credentials
rotate at least three times each. The sample API key is rotated by hand with an overlap: the
lines of docs/operations.md's hand rotation, run as written. Every request must succeed, and
every request a model API stand-in received must carry a credential it accepts. Then a Ctrl-C
to the whole process group, as a terminal sends it: exit 0, and no process, folder or port left
behind, and no traceback in LiteLLM's log.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import errors, objects, restconfig
from rotator_devkit.devenv import gateway
from rotator_devkit.devenv.standins import upstreams
from tests.support import gatewayload as gl
from tests.support import leaks, required
from tests.support.polling import Timeout, wait_for
from tests.support.proc import REPO

pytestmark = pytest.mark.local_control_plane


@pytest.fixture(autouse=True)
def litellm_installed() -> None:
    """make venv installs litellm[proxy] (the dev kit's gateway extra)."""
    if gateway.executable() is None:
        required.missing("litellm not installed")


LIFETIME = 90
"""Seconds the stand-ins' credentials live: the samples renew them with 36-45 s left, the time
a new LiteLLM proxy has to start and be ready on a loaded 2-core machine (up to 35 s was
seen with 60 s credentials)."""
RATE = 4.0
MODELS = {
    "gpt-4o-mini": "APIKey",
    gl.CLAUDE: "AWSCredentials",
    "gpt-4.1-mini": "AzureCredentials",
    "gemini-2.0-flash": "GCPCredentials",
}
"""config/samples/litellm.yaml's models → the credential type of the backend serving each."""
ENVOY_MODELS = {
    "gpt-4o-mini": "APIKey",
    gl.CLAUDE: "AWSCredentials",
    "gpt-4.1-mini": "AzureCredentials",
    "google/gemini-2.0-flash": "GCPCredentials",
}
"""config/samples/envoy.yaml's models (Vertex AI's named with its publisher: Envoy sends the body
as it is)."""
POLICIES = {
    "APIKey": "openai",
    "AWSCredentials": "bedrock-web-identity",
    "AzureCredentials": "azure-openai",
    "GCPCredentials": "vertex",
}
WANTED = {"APIKey": 1, "AWSCredentials": 3, "AzureCredentials": 3, "GCPCredentials": 3}
"""Rotations each type must carry through the gateway (the API key: the hand rotation)."""
OPERATIONS = REPO / "docs" / "operations.md"
OBSERVED_LATE = 2.0
"""How much earlier than its recorded time a credential may have been laid out for Envoy: an API
key's rotation is recorded when this test's 0.5 s loop sees the derived Secret (it has no
issued-at), and the dev kit's 0.5 s loop may lay it out first. Far below the time between two
rotations of one type (tens of seconds), so it never reaches back to the previous one."""


def hand_rotation_steps() -> list[str]:
    """The command lines of docs/operations.md's hand rotation, as written there."""
    text = OPERATIONS.read_text()
    block = next(
        b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "rotator standins accept-key" in b
    )
    return [line for line in block.splitlines() if line and not line.startswith("export ")]


def processes() -> dict[int, tuple[int, int]]:
    """Every live process: pid → (parent, session)."""
    found = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":  # state, ppid, pgrp, session
            found[int(proc.name)] = (int(fields[1]), int(fields[3]))
    return found


def tree(root: int) -> set[int]:
    """``root``'s live descendants and the live members of its session (the control plane's
    processes run in sessions of their own, the LiteLLM proxies under the zygote)."""
    table = processes()
    found = {pid for pid, (_, sid) in table.items() if sid == root}
    grew = True
    while grew:
        more = {pid for pid, (ppid, _) in table.items() if ppid in found | {root}} - found
        found |= more
        grew = bool(more)
    return found - {root}


def free(port: int) -> bool:
    """Whether nothing listens on ``port`` of 127.0.0.1: it can be bound as a server binds it
    (SO_REUSEADDR: the connections closed at the end wait out TIME_WAIT there, which is no
    listener), and a connection to it is refused."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.loads(response.read())


def test_dev_gateway_one_address_every_type_through_rotations_no_failed_request(
    tmp_path: Path,
) -> None:
    began = time.monotonic()
    log = tmp_path / "dev.log"
    with log.open("ab") as sink:
        dev = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "controllers.cli",
                "dev",
                "--lifetime",
                str(LIFETIME),
                "--gateway-port",
                "0",
                "--envoy-port",
                "0",
                "--admin-port",
                "0",
                "--metrics-bind-address",
                "127.0.0.1:0",
                "--health-probe-bind-address",
                "127.0.0.1:0",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            cwd=REPO,
            start_new_session=True,  # its own process group, which a Ctrl-C reaches as a whole
        )
    client: subprocess.Popen[bytes] | None = None
    envoy_client: subprocess.Popen[bytes] | None = None
    hand: subprocess.Popen[str] | None = None
    litellm_log = None
    try:

        def text() -> str:
            return log.read_text(errors="replace")

        kubeconfig, kubectl, admin = wait_for(
            lambda: (
                (k := re.search(r"look around: (\S+) --kubeconfig (\S+) get", text()))
                and (a := re.search(r"stand-ins admin: (http://127\.0\.0\.1:\d+)", text()))
                and (k.group(2), k.group(1), a.group(1))
            ),
            timeout=180,
            what="kubeconfig and admin endpoint printed",
        )
        folder = str(Path(kubeconfig).parent)
        address, key = wait_for(
            lambda: (
                (g := re.search(r"gateway for Route default/litellm \(LiteLLM\): (\S+),", text()))
                and (c := re.search(r"^  curl .*Bearer (\S+)'", text(), re.M))
                and (g.group(1), c.group(1))
            ),
            timeout=240,
            interval=0.5,
            what="the gateway's address and curl",
        )
        envoy_address = wait_for(
            lambda: (
                (g := re.search(r"gateway for Route default/envoy \(Envoy\): (\S+),", text()))
                and g.group(1)
            ),
            timeout=120,
            interval=0.5,
            what="the Envoy gateway's address",
        )
        gateway_port = int(address.rsplit(":", 1)[1])
        envoy_port = int(envoy_address.rsplit(":", 1)[1])
        admin_port = int(admin.rsplit(":", 1)[1])

        minted: set[str] = set()

        def issued() -> set[str]:
            """What the stand-ins issued so far, kept for the leak scans after the run."""
            minted.update(get_json(f"{admin}/issued")["values"])
            return minted

        leaks.MINTED.add_source("rotator dev's stand-ins", lambda: minted)
        litellm_log = (Path(folder) / "gateways" / "litellm" / "litellm.log").open("rb")
        litellm_head = litellm_log.read()  # kept open: the file outlives its folder for us

        results = tmp_path / "requests.jsonl"
        client = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.devclient",
                address,
                str(results),
                str(RATE),
                *MODELS,
            ],
            env={**os.environ, "PYTHONPATH": str(REPO), "DEV_GATEWAY_KEY": key},
            cwd=REPO,
            start_new_session=True,
        )
        envoy_results = tmp_path / "envoy-requests.jsonl"
        envoy_client = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.support.devclient",
                envoy_address,
                str(envoy_results),
                str(RATE),
                *ENVOY_MODELS,
            ],
            # a key Envoy must remove: a backend gets only what rotator minted for it
            env={**os.environ, "PYTHONPATH": str(REPO), "DEV_GATEWAY_KEY": key},
            cwd=REPO,
            start_new_session=True,
        )
        envoy_pid = get_json(f"{admin}/status")["gateways"][envoy_address]["pid"]
        api = clients.Client(restconfig.load(kubeconfig))
        rotations: gl.Rotations = {kind: [] for kind in MODELS.values()}
        switches: dict[str, set[float]] = {model: set() for model in MODELS}
        envoy_switches: dict[str, set[float]] = {model: set() for model in ENVOY_MODELS}
        secrets: set[str] = set()
        steps = hand_rotation_steps()
        shell_env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "KUBECONFIG": kubeconfig,
            "ROTATOR_DEV_ADMIN": admin,
        }
        prelude = (
            f'set -e; rotator() {{ {sys.executable} -m controllers.cli "$@"; }}; '
            f'kubectl() {{ {kubectl} "$@"; }}; '
        )

        def requests_so_far(out: Path = results) -> list[dict[str, Any]]:
            """A client's lines written so far (the last one may be half written)."""
            found = []
            for line in out.read_text().splitlines() if out.exists() else []:
                try:
                    found.append(json.loads(line))
                except ValueError:
                    continue
            return found

        def observe() -> bool:
            """Records rotations and gateway switches; starts the hand rotation once each
            cloud type has rotated once; True once every type carried what it must."""
            nonlocal hand
            for kind, policy in POLICIES.items():
                try:
                    derived = api.get(
                        objects.SECRETS, rapi.derived_secret_name(policy), namespace="default"
                    )
                except errors.NotFound:
                    continue
                value = gl.record(rotations, kind, derived)
                if value:
                    secrets.add(value)
            gateways = get_json(f"{admin}/status")["gateways"]
            for model, row in gateways[address]["models"].items():
                switches[model].update(row.get("rotationsAt") or [])
            for model, row in gateways[envoy_address]["models"].items():
                envoy_switches[model].update(row.get("rotationsAt") or [])
            if hand is None and all(len(rotations[k]) >= 2 for k in WANTED if k != "APIKey"):
                hand = subprocess.Popen(
                    ["bash", "-c", prelude + "\n".join(steps)],
                    env=shell_env,
                    cwd=REPO,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.STDOUT,
                    text=True,
                    start_new_session=True,  # its commands are stopped with it on a failure
                )
            if hand is None or hand.poll() is None:
                return False
            seen = upstream_seen(admin)
            if not all(gl.served(rotations[k], seen[k]) >= n for k, n in WANTED.items()):
                return False
            lines = requests_so_far()
            envoy_lines = requests_so_far(envoy_results)
            return all(
                len(first_client_uses(lines, rotations, seen, switches, model, kind))
                >= WANTED[kind]
                for model, kind in MODELS.items()
            ) and all(
                len(
                    first_client_uses(
                        envoy_lines, rotations, seen, envoy_switches, model, kind, laid_out=True
                    )
                )
                >= WANTED[kind]
                for model, kind in ENVOY_MODELS.items()
            )

        def wait_served() -> None:
            """Every type's rotations served; else a failure with what was, per gateway."""
            try:
                wait_for(observe, timeout=420, interval=0.5, what="every type's rotations served")
            except Timeout:
                seen = upstream_seen(admin)
                envoy_status = get_json(f"{admin}/status")["gateways"][envoy_address]
                partial = report(requests_so_far(), rotations, seen, switches, "(not finished)")
                partial += "\n" + report_envoy(
                    requests_so_far(envoy_results), rotations, seen, envoy_switches, envoy_status
                )
                raise AssertionError(f"hand rotation: {hand and hand.poll()}\n{partial}") from None

        wait_served()
        assert hand is not None
        hand_output = hand.communicate(timeout=10)[0]
        assert hand.returncode == 0, hand_output
        for c in (client, envoy_client):
            c.send_signal(signal.SIGTERM)
        assert client.wait(120) == 0
        assert envoy_client.wait(120) == 0
        seen = upstream_seen(admin)
        lines = [json.loads(x) for x in results.read_text().splitlines()]
        envoy_lines = [json.loads(x) for x in envoy_results.read_text().splitlines()]
        envoy_status = get_json(f"{admin}/status")["gateways"][envoy_address]
        printed = report(lines, rotations, seen, switches, hand_output)
        printed += "\n" + report_envoy(envoy_lines, rotations, seen, envoy_switches, envoy_status)
        print(printed)
        print(f"dev gateway test: {time.monotonic() - began:.0f} s so far")
        secrets |= issued()
        scanner = leaks.Scanner({**leaks.MINTED.values(), "test": secrets})
        assert scanner.leaks({"test output": printed, "dev log": text()}) == []
        failed = [x for x in lines + envoy_lines if x["status"] != 200]
        assert failed == [], Counter((x["model"], x["status"], x.get("body")) for x in failed)
        assert len(envoy_lines) >= RATE * 60, "at least a minute of traffic through Envoy"
        # one Envoy from start to end: never restarted, its credentials reloaded in place
        assert (envoy_status["pid"], envoy_status["starts"]) == (envoy_pid, 1), envoy_status
        assert envoy_status["serving"] is True
        assert len(lines) >= RATE * 60, "at least a minute of traffic at the rate"
        # every request each stand-in received carried a credential it accepts: none expired
        # (the old API key after step 4 included), unknown or missing. ``refused``: a current
        # credential on a path the stand-in does not serve (LiteLLM's own calls at a proxy's
        # start, listed in the report), which no client request is
        for kind, received in seen.items():
            verdicts = {s.verdict for s in received}
            assert verdicts <= {upstreams.CURRENT, upstreams.REFUSED}, (kind, printed)
            assert upstreams.CURRENT in verdicts, (kind, printed)
        for model, kind in MODELS.items():
            ok = sum(1 for x in lines if x["model"] == model)
            assert len(seen[kind]) >= ok, (kind, "fewer upstream requests than answers")
        for kind, n in WANTED.items():
            assert gl.served(rotations[kind], seen[kind]) >= n, (kind, printed)
        # ... and client requests used each new credential, not only the new proxy's readiness
        # completions: a request started after the switch to the proxy carrying it
        for model, kind in MODELS.items():
            uses = first_client_uses(lines, rotations, seen, switches, model, kind)
            assert len(uses) >= WANTED[kind], (kind, printed)
        for model, kind in ENVOY_MODELS.items():
            uses = first_client_uses(
                envoy_lines, rotations, seen, envoy_switches, model, kind, laid_out=True
            )
            assert len(uses) >= WANTED[kind], ("Envoy", kind, printed)
        status = get_json(f"{admin}/status")
        label = upstreams.ModelUpstream.label
        assert label("sk-dev-second-key") in status["openaiKeys"]
        assert label("sk-replace-me") not in status["openaiKeys"], "the old key is retired"

        # Ctrl-C, as a terminal sends it: to the whole foreground process group
        started = tree(dev.pid)
        assert len(started) >= 5, "control plane, zygote and proxies run under the dev run"
        os.killpg(dev.pid, signal.SIGINT)
        assert dev.wait(120) == 0
        wait_for(
            lambda: not (started & set(processes())) and not tree(dev.pid),
            timeout=30,
            what="no process left",
        )
        assert not Path(folder).exists(), "no temporary folder left"
        assert free(gateway_port), "the gateway's port is free"
        assert free(envoy_port), "the Envoy gateway's port is free"
        assert free(admin_port), "the admin port is free"
        tail = litellm_log.read().decode(errors="replace")
        assert "Traceback" not in tail, tail[-3000:]
        litellm_text = litellm_head.decode(errors="replace") + tail
        assert scanner.leaks({"litellm.log": litellm_text}) == []
        assert "Traceback" not in text(), text()[-3000:]
        print(f"dev gateway test: {time.monotonic() - began:.0f} s in all")
    finally:
        for p in (hand, client, envoy_client):
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        if dev.poll() is None:  # a Ctrl-C first: it stops the control plane, removes its folder
            os.killpg(dev.pid, signal.SIGINT)
            try:
                dev.wait(120)
            except subprocess.TimeoutExpired:
                os.killpg(dev.pid, signal.SIGKILL)
                dev.wait()
        if litellm_log is not None:
            litellm_log.close()


def upstream_seen(admin: str) -> dict[str, list[upstreams.Seen]]:
    """What each model API stand-in received, by credential type."""
    rows = get_json(f"{admin}/upstreams")
    return {
        kind: [upstreams.Seen(*row) for row in rows[name]] for kind, name in gl.UPSTREAMS.items()
    }


def report(
    lines: list[dict[str, Any]],
    rotations: gl.Rotations,
    seen: dict[str, list[upstreams.Seen]],
    switches: dict[str, set[float]],
    hand_output: str,
) -> str:
    """Per type: requests sent and failed, rotations, the longest time from a rotation (its
    issued-at) to its first upstream use (a new proxy's readiness probe, before it takes the
    traffic), and to the first client request that the gateway sent to a proxy carrying it:
    the first one started after the switch to it (the first switch seen that changed the
    model's credential after that first use)."""
    out = ["\nrotator dev gateway: one address, a client in its own process at 4 req/s"]
    for model, kind in MODELS.items():
        mine = [x for x in lines if x["model"] == model]
        to_upstream = gl.lags(rotations[kind], seen[kind])
        to_client = first_client_uses(lines, rotations, seen, switches, model, kind)
        out.append(
            f"  {kind:17} sent {len(mine):4} failed {sum(x['status'] != 200 for x in mine)} "
            f"rotations {len(rotations[kind]) - 1} "
            f"longest rotation→first upstream use {_s(to_upstream)} "
            f"→first client request through the gateway {_s(to_client)} "
            f"upstream verdicts {dict(Counter(s.verdict for s in seen[kind]))}"
        )
        refused = Counter(s.path for s in seen[kind] if s.verdict != upstreams.CURRENT)
        if refused:
            out.append(f"    not served (a current credential on another path): {dict(refused)}")
    out.append("  hand rotation (docs/operations.md, as written): exit 0")
    out.append("    " + hand_output.replace("\n", "\n    ").strip()[:800])
    return "\n".join(out)


def report_envoy(
    lines: list[dict[str, Any]],
    rotations: gl.Rotations,
    seen: dict[str, list[upstreams.Seen]],
    switches: dict[str, set[float]],
    status: dict[str, Any],
) -> str:
    """Per type through the Envoy gateway: requests sent and failed, rotations, and the longest
    time from a rotation to the first client request started after the dev kit laid the new
    credential file out; and Envoy's PID and starts (one: never restarted)."""
    out = [
        f"rotator dev Envoy gateway: one Envoy, pid {status['pid']}, started "
        f"{status['starts']} time(s), a client in its own process at 4 req/s"
    ]
    for model, kind in ENVOY_MODELS.items():
        mine = [x for x in lines if x["model"] == model]
        to_client = first_client_uses(lines, rotations, seen, switches, model, kind, laid_out=True)
        out.append(
            f"  {kind:17} sent {len(mine):4} failed {sum(x['status'] != 200 for x in mine)} "
            f"rotations through Envoy {len(to_client)} "
            f"longest rotation→first client request through Envoy {_s(to_client)}"
        )
    return "\n".join(out)


def first_client_uses(
    lines: list[dict[str, Any]],
    rotations: gl.Rotations,
    seen: dict[str, list[upstreams.Seen]],
    switches: dict[str, set[float]],
    model: str,
    kind: str,
    *,
    laid_out: bool = False,
) -> list[float]:
    """Per rotation of ``model``'s credential that reached its stand-in, and whose new
    credential a client request then used, the time from the rotation to that request: the
    first one started after the first switch seen, after that first upstream use, that changed
    the model's credential. ``laid_out``: the switches are the Envoy gateway's, the times the
    dev kit laid a changed credential file out, which Envoy uses at once, so the first switch
    after the rotation itself (a LiteLLM proxy's readiness uses the credential before its switch).
    """
    starts = sorted(x["start"] for x in lines if x["model"] == model)
    found = []
    for at, label in rotations[kind][1:]:
        if (first := gl.seen_by(seen[kind], label)) is None:
            continue
        since = at - OBSERVED_LATE if laid_out else first
        switch = min((s for s in switches[model] if s >= since), default=None)
        if switch is None:
            continue
        after = [t for t in starts if t >= switch]
        if after:
            found.append(after[0] - at)
    return found


def _s(values: list[float]) -> str:
    return f"{max(values):.1f} s" if values else "-"
