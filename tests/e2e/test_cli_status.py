"""``rotator status`` and ``rotator renew`` against the real control plane and the shared
controller, run as a user runs them: a process of their own, its output and exit code checked
(and once through kubectl's plugin mechanism, ``kubectl rotator``)."""

from __future__ import annotations

import base64
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import yaml

from controllers.reconcilers import api as rapi
from controllers.runtime import client as clients
from controllers.runtime import clock as clocks
from controllers.runtime import errors, leaderelection, objects, sharding, shards
from rotator_devkit.controlplane.cluster import LocalControlPlane
from rotator_devkit.devenv import manifests
from rotator_devkit.devenv.standins.oidc import OIDCIssuer
from tests.e2e.test_aws import CLIENT_SECRET, oidc_source, sa_source
from tests.support import kube, leaks, required
from tests.support.chain import AWSChain
from tests.support.controller import ControllerProcess
from tests.support.polling import wait_for
from tests.support.reconcilelog import entries

CLI_TIMEOUT = 180.0
"""Seconds a command may take as a whole on a loaded machine (a safety net, never asserted)."""
ROW = r"\s+"


def rotator(
    cp: LocalControlPlane,
    namespace: str,
    *args: str,
    env: dict[str, str] | None = None,
    kubeconfig: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``rotator ARGS -n NAMESPACE`` as a user runs it, with the admin kubeconfig unless
    another is given."""
    command = [sys.executable, "-m", "controllers.cli", *args, "-n", namespace]
    command += ["--kubeconfig", str(kubeconfig or cp.kubeconfig)]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=CLI_TIMEOUT, env=env, check=False
    )
    print(f"\n$ rotator {' '.join(args)}\n{done.stdout}{done.stderr}(exit {done.returncode})")
    return done


def field(out: str, label: str) -> str:
    """The value of ``label:`` in ``rotator status``'s output; "" when there is none."""
    found = re.search(rf"^{label}:{ROW}(.*)$", out, re.M)
    return found[1] if found else ""


def served_by(cp: LocalControlPlane, namespace: str, *flags: str) -> tuple[str, str]:
    """``rotator status bsp/openai FLAGS``, which must succeed: its ``Served by`` and all it
    printed."""
    done = rotator(cp, namespace, "status", "bsp/openai", *flags)
    assert done.returncode == 0, done.stderr
    return field(done.stdout, "Served by"), done.stdout


def no_secret_in(chain: AWSChain, text: str, *derived: str) -> list[str]:
    """Where any secret value of the run, of the chain, or of the derived Secrets (their data
    and each decoded value) appears in ``text``."""
    values = set(chain.secret_values)
    for name in derived:
        secret = chain.get("secret", name) or {}
        for encoded in (secret.get("data") or {}).values():
            values |= {encoded, base64.b64decode(encoded).decode()}
    scanner = leaks.Scanner({**leaks.MINTED.values(), "the test": values})
    return scanner.leaks({"command output": text})


def minted_chain(chain: AWSChain) -> None:
    """A ServiceAccount-token AWS policy for backend ``bedrock``, routed by ``claude``; and a
    route ``other`` that does not embed it."""
    chain.aws_policy("sa", ["bedrock"], sa_source("default"))
    chain.backend("bedrock", schema="AWSBedrock", host="bedrock-runtime.us-east-1.amazonaws.com")
    chain.backend("openai")
    chain.route("claude", ["bedrock"], model="claude")
    chain.route("other", ["openai"])
    chain.wait_condition("policy", "sa", "Ready", "True", "CredentialsReady", timeout=60)
    chain.wait_condition("route", "claude", "Programmed", "True", timeout=60)
    wait_for(lambda: "CredentialsReady" in chain.event_reasons("sa"), what="the Ready event")
    chain.aws_keys("sa")  # its secret key and session token: looked for in the output


def test_status_shows_conditions_times_secret_routes_and_events_and_no_secret(
    chain: AWSChain, control_plane: LocalControlPlane
) -> None:
    minted_chain(chain)
    done = rotator(control_plane, chain.ns, "status", "bsp/sa")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert re.search(rf"^Type:{ROW}AWSCredentials \(serviceAccountToken, minted\)$", out, re.M)
    assert re.search(
        rf"^  Ready{ROW}True{ROW}CredentialsReady{ROW}\S+Z \(.+\){ROW}credentials are in Secret rotator-bsp-sa",
        out,
        re.M,
    )
    assert re.search(rf"^  Accepted{ROW}True{ROW}Accepted", out, re.M)
    assert re.search(rf"^  Secret:{ROW}rotator-bsp-sa \(keys: credentials\)$", out, re.M)
    assert re.search(rf"^  Expires:{ROW}\S+Z \(in \d+s\)$", out, re.M), "60 s sessions"
    assert re.search(rf"^  Issued:{ROW}\S+Z \((\d+s ago|now)\)$", out, re.M)
    assert re.search(rf"^  Next renewal:{ROW}\S+Z \((in \d+s|now|\d+s ago)\)$", out, re.M)
    assert re.search(rf"^  Failed attempts:{ROW}0$", out, re.M)
    assert re.search(rf"^Targets:{ROW}ServiceBackend bedrock \(ResolvedRefs=True\)$", out, re.M)
    routes = out.split("Routes:\n")[1].split("Events:\n")
    assert re.search(rf"^  claude{ROW}True{ROW}True{ROW}rotator-route-claude$", routes[0], re.M)
    assert "other" not in routes[0], "a route that does not embed the policy is not listed"
    assert re.search(rf"^  .+?{ROW}Normal{ROW}CredentialsReady{ROW}rotator{ROW}", routes[1], re.M)
    assert not no_secret_in(chain, out + done.stderr, "rotator-bsp-sa", "rotator-route-claude")


def test_renew_wait_returns_once_the_new_credential_is_served(
    chain: AWSChain, control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    minted_chain(chain)
    before = chain.get("secret", "rotator-bsp-sa") or {}
    started = time.monotonic()
    done = rotator(control_plane, chain.ns, "renew", "bsp/sa", "--wait", "--timeout", "60s")
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    requested = re.search(rf"{rapi.ROTATE_REQUESTED_ANNOTATION}=(\S+)\)$", done.stdout, re.M)
    assert requested is not None, done.stdout
    renewed = re.search(
        r"^renewed in (\d+\.\d) s: .* in Secret rotator-bsp-sa, issued ", done.stdout, re.M
    )
    assert renewed is not None, done.stdout
    assert float(renewed.group(1)) < took, "the time measured is the wait's, within the run"
    after = chain.get("secret", "rotator-bsp-sa") or {}
    annotations = after["metadata"]["annotations"]
    assert annotations[rapi.ANSWERED_REQUEST_ANNOTATION] == requested.group(1)
    assert after["data"] != before["data"], "a new credential is served"
    assert chain.aws_keys("sa") is not None  # the new keys: looked for in the outputs below
    assert not no_secret_in(chain, done.stdout + done.stderr, "rotator-bsp-sa")

    # the same status, through kubectl's plugin mechanism and the kubeconfig's namespace
    kubectl = control_plane.assets / "kubectl"
    if not os.access(kubectl, os.X_OK):
        kubectl = Path(shutil.which("kubectl") or "/nonexistent")
    if not os.access(kubectl, os.X_OK):
        required.missing("no kubectl beside the control-plane binaries or on PATH")
    plugin = plugin_on_path(tmp_path / "bin")
    kubeconfig = kubeconfig_in_namespace(control_plane.kubeconfig, chain.ns, tmp_path / "kc")
    env = {
        **os.environ,
        "PATH": f"{plugin}{os.pathsep}{os.environ['PATH']}",
        "KUBECONFIG": str(kubeconfig),
    }
    wait_for(lambda: "CredentialsRotated" in chain.event_reasons("sa"), what="the rotated event")
    shown = subprocess.run(
        [str(kubectl), "rotator", "status", "bsp/sa"],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        env=env,
        check=False,
    )
    print(f"\n$ kubectl rotator status bsp/sa\n{shown.stdout}{shown.stderr}")
    assert shown.returncode == 0, shown.stderr
    assert re.search(rf"^Namespace:{ROW}{chain.ns}$", shown.stdout, re.M)
    assert re.search(
        rf"^  Rotation request:{ROW}{re.escape(requested.group(1))} \(answered\)$",
        shown.stdout,
        re.M,
    )
    assert re.search(
        rf"^  .+?{ROW}Normal{ROW}CredentialsRotated{ROW}rotator{ROW}new credentials in Secret rotator-bsp-sa$",
        shown.stdout,
        re.M,
    )
    assert not no_secret_in(chain, shown.stdout + shown.stderr, "rotator-bsp-sa")


def plugin_on_path(folder: Path) -> Path:
    """A ``kubectl-rotator`` as pip's console script for ``[project.scripts]`` writes it."""
    folder.mkdir()
    script = folder / "kubectl-rotator"
    script.write_text(
        f"#!{sys.executable}\nimport sys\nfrom controllers.cli import kubectl_plugin\n"
        "sys.exit(kubectl_plugin())\n"
    )
    script.chmod(0o755)
    return folder


def kubeconfig_in_namespace(admin: Path, namespace: str, path: Path) -> Path:
    config = yaml.safe_load(admin.read_text())
    for context in config["contexts"]:
        if context["name"] == config["current-context"]:
            context["context"]["namespace"] = namespace
    path.write_text(yaml.safe_dump(config))
    return path


def test_renew_wait_fails_at_once_when_the_policy_cannot_mint(
    chain: AWSChain, control_plane: LocalControlPlane
) -> None:
    """The ServiceAccount has not opted in: ``Ready=False``, a reason no retry gets past — the
    wait ends with the failure, not at the timeout."""
    chain.create(
        "policy",
        "denied",
        {
            "type": "AWSCredentials",
            "awsCredentials": {"region": "us-east-1", **sa_source("default")},
        },
        opt_in=False,
    )
    chain.wait_condition("policy", "denied", "Ready", "False", timeout=60)
    started = time.monotonic()
    done = rotator(control_plane, chain.ns, "renew", "bsp/denied", "--wait", "--timeout", "90s")
    took = time.monotonic() - started
    assert done.returncode == 1
    assert re.search(
        r"^rotator: renewal of backendsecuritypolicy/denied in namespace \S+ failed: "
        r"Ready=False ServiceAccountNot(Permitted|Found): ",
        done.stderr,
        re.M,
    ), done.stderr
    assert took < 60, f"returned after {took:.1f} s: it waited for the timeout"


def test_renew_wait_times_out_when_the_source_secret_is_gone(
    chain: AWSChain, control_plane: LocalControlPlane, oidc_issuer: OIDCIssuer
) -> None:
    """The OIDC client secret is deleted: the served session stays valid (``Ready=True``
    ``RotationFailed``), rotator keeps retrying, and ``--wait`` gives up at its timeout, naming
    the failure."""
    client = f"client-{chain.ns}"
    oidc_issuer.register(client, CLIENT_SECRET)
    chain.secret("oidc-client", **{"client-secret": CLIENT_SECRET})
    chain.aws_policy("oidc", ["b"], oidc_source(oidc_issuer, client))
    chain.wait_condition("policy", "oidc", "Ready", "True", "CredentialsReady", timeout=60)
    chain.delete("secret", "oidc-client")
    started = time.monotonic()
    done = rotator(control_plane, chain.ns, "renew", "bsp/oidc", "--wait", "--timeout", "5s")
    took = time.monotonic() - started
    assert done.returncode == 1
    assert "rotator: timed out after 5.0 s waiting for backendsecuritypolicy/oidc" in done.stderr
    assert "; last failure: Ready=True RotationFailed: " in done.stderr
    assert "Secret oidc-client not found" in done.stderr
    assert took >= 5


def test_a_copied_credential_shows_but_does_not_renew(
    chain: AWSChain, control_plane: LocalControlPlane
) -> None:
    chain.secret("openai-key", apiKey="sk-cli-status-do-not-print-1234")
    chain.api_key_policy("openai", secret="openai-key", targets=["openai"])
    chain.backend("openai")
    chain.wait_condition("policy", "openai", "Ready", "True", "CredentialsReady")
    done = rotator(control_plane, chain.ns, "status", "backendsecuritypolicy/openai")
    assert done.returncode == 0, done.stderr
    assert re.search(rf"^Type:{ROW}APIKey \(copied\)$", done.stdout, re.M)
    assert re.search(rf"^  Secret:{ROW}rotator-bsp-openai \(keys: apiKey\)$", done.stdout, re.M)
    assert re.search(rf"^  Expires:{ROW}never$", done.stdout, re.M)
    assert not no_secret_in(chain, done.stdout, "rotator-bsp-openai")
    refused = rotator(control_plane, chain.ns, "renew", "backendsecuritypolicies/openai", "--wait")
    assert refused.returncode == 1
    assert (
        "copies its credential from a Secret (APIKey): there is nothing to renew" in refused.stderr
    )
    policy = chain.get("policy", "openai") or {}
    assert rapi.ROTATE_REQUESTED_ANNOTATION not in (policy["metadata"].get("annotations") or {})


def test_status_of_a_missing_policy_exits_1(
    control_plane: LocalControlPlane, installed: None, namespace: str
) -> None:
    done = rotator(control_plane, namespace, "status", "bsp/nope")
    assert done.returncode == 1
    assert (
        done.stderr
        == f'rotator: backendsecuritypolicy "nope" not found in namespace "{namespace}"\n'
    )
    assert done.stdout == ""


# --- who serves it: the Leases ------------------------------------------------------------------


def test_status_names_the_leader_and_with_shards_the_shard_and_its_holder(
    chain: AWSChain,
    control_plane: LocalControlPlane,
    api: clients.Client,
    controller: ControllerProcess,
) -> None:
    """Unsharded: the session's controller holds ``rotator-leader-election`` in rotator-system
    (a real holder, found without flags). Sharded: three Leases of another id, taken by the
    shard elector's own code (``ShardOptions.election``), as three replicas of ``--shards 3``
    would (tests/e2e/test_shards.py runs real ones); then the policy's one expires."""
    chain.secret("openai-key", apiKey="sk-cli-status-served-by-5678")
    chain.api_key_policy("openai", secret="openai-key", targets=["openai"])
    chain.wait_condition("policy", "openai", "Ready", "True", "CredentialsReady")
    leader = api.get(objects.LEASES, leaderelection.DEFAULT_ID, namespace=manifests.NAMESPACE)
    started = {
        e.get("identity")
        for _, e in entries(controller.logs())
        if e.get("event") == "rotator.starting"
    }
    assert leader["spec"]["holderIdentity"] in started, "the session's controller holds it"
    served, out = served_by(control_plane, chain.ns)
    assert re.fullmatch(
        rf"leader {re.escape(leader['spec']['holderIdentity'])} "
        rf"\(Lease {leaderelection.DEFAULT_ID}\), renewed (\d+s ago|now)",
        served,
    ), out
    assert "Shard:" not in out

    lease_id = f"{chain.ns}-status"
    options = [
        shards.ShardOptions(
            id=lease_id,
            namespace=manifests.NAMESPACE,
            identity=f"replica-{i}_0000000{i}",
            shards=3,
            lease_duration=60.0,  # live for the whole test, however slow the machine
        )
        for i in range(3)
    ]
    try:
        for i, o in enumerate(options):
            elector = leaderelection.LeaderElector(
                api,
                o.election(o.shard_lease(i)),
                on_started=lambda: None,
                on_lost=lambda: None,
            )
            assert elector.try_acquire()
        mine = sharding.shard_of(chain.ns, 3)
        name = shards.shard_lease_name(lease_id, mine, 3)
        served, out = served_by(control_plane, chain.ns, "--leader-election-id", lease_id)
        assert re.fullmatch(
            rf"shard {mine} of 3 \(Lease {name}\), held by replica-{mine}_0000000{mine}, "
            r"renewed (\d+s ago|now)",
            served,
        ), out
        shard = sharding.ranges(3)[mine]
        assert field(out, "Shard") == (
            f"{mine} of 3: hashes [{sharding.hex64(shard.start)}, {sharding.hex64(shard.end)}); "
            f"FNV-1a of {chain.ns} is {sharding.hex64(sharding.fnv1a64(chain.ns))}"
        )

        long_ago = clocks.rfc3339(time.time() - 600)
        api.patch(
            objects.LEASES,
            name,
            {"spec": {"renewTime": long_ago.replace("Z", ".000000Z")}},
            namespace=manifests.NAMESPACE,
        )
        served, out = served_by(control_plane, chain.ns, "--leader-election-id", lease_id)
        assert re.fullmatch(
            rf"no one: shard {mine} of 3 \(Lease {name}\), held by replica-{mine}_0000000{mine}, "
            r"expired \d+m(\d+s)? ago \(renewed \d+m(\d+s)? ago, for 60s\)",
            served,
        ), out
    finally:
        for i in range(3):
            with contextlib.suppress(errors.NotFound):
                api.delete(
                    objects.LEASES,
                    shards.shard_lease_name(lease_id, i, 3),
                    namespace=manifests.NAMESPACE,
                )


def test_a_tenant_who_cannot_read_the_leases_is_told_so(
    chain: AWSChain, control_plane: LocalControlPlane, api: clients.Client, tmp_path: Path
) -> None:
    """A user who may read their policy and nothing else (no Leases in rotator-system): the
    status still prints, ``Served by`` says why it does not know, and the exit code is 0."""
    chain.secret("openai-key", apiKey="sk-cli-status-tenant-9012")
    chain.api_key_policy("openai", secret="openai-key", targets=["openai"])
    kubeconfig = tmp_path / "reader.kubeconfig"
    rules = [
        {"apiGroups": [rapi.GROUP], "resources": ["backendsecuritypolicies"], "verbs": ["get"]}
    ]
    token = kube.namespaced_user(control_plane, api, chain.ns, "reader", rules, kubeconfig)
    done = rotator(control_plane, chain.ns, "status", "bsp/openai", kubeconfig=kubeconfig)
    assert done.returncode == 0, done.stderr
    assert re.search(rf"^Name:{ROW}openai$", done.stdout, re.M), done.stdout
    assert field(done.stdout, "Served by") == (
        f"unknown (cannot list Leases in {manifests.NAMESPACE}: forbidden)"
    ), done.stdout
    assert "<cannot read events: " in done.stdout, "the reader is as minimal as it says"
    assert token not in done.stdout + done.stderr
