"""The real LiteLLM proxy serves traffic with the credentials rotator mints, through three
rotations of 60 s credentials, with no failed request and no upstream request carrying an
expired credential.

One Route (``spec.output.format: LiteLLM``) sends ``gpt`` to an OpenAI-compatible stand-in (an
API key, rotated with an overlap as OpenAI allows), ``claude`` to a Bedrock runtime stand-in
(SigV4 with a 60 s STS session from a ServiceAccount token, checked against what moto/STS
issued), ``azure-gpt`` to an Azure OpenAI stand-in (a 60 s Entra ID token from the Azure
stand-in) and ``gemini-2.0-flash`` to Vertex AI's OpenAI-compatible endpoint (a 60 s federated
Google token from a ServiceAccount token, checked against what the Google stand-in minted). LiteLLM reads its configuration once, at start: the Route names a Deployment in
``rolloutRestartTargets``, and when rotator rolls it out (its pod template's
``config-hash.rotator.dev/llm`` changes) the test does what that Deployment's rolling update
would: a new proxy on the config Secret's configuration, traffic switched once it answers, the
old one stopped after its requests finished (rotator_devkit.devenv.gateway.RollingGateway).
"""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import pytest

from controllers.reconcilers import api as rapi
from controllers.reconcilers import restarts
from controllers.runtime import errors, objects
from rotator.providers.gcp import federation
from rotator_devkit.devenv import gateway
from rotator_devkit.devenv.standins.azure import App, AzureStandIn
from rotator_devkit.devenv.standins.gcp import GCPStandIn
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support import gatewayload as gl
from tests.support import leaks, required
from tests.support.chain import AWSChain
from tests.support.polling import wait_for


@pytest.fixture(autouse=True)
def litellm_installed() -> None:
    """make venv installs litellm[proxy] (the dev kit's gateway extra)."""
    if gateway.executable() is None:
        required.missing("litellm not installed")


AZURE_SECRET = "azure-app-secret-litellm-5678"
KEYS = ("sk-litellm-standin-key-0001", "sk-litellm-standin-key-0002")
MASTER_KEY = "sk-litellm-master-test-0001"
ROUTE = gl.ROUTE
ANNOTATION = gl.ANNOTATION
MODELS = gl.MODELS


def backend(chain: AWSChain, name: str, url: str) -> None:
    chain.create("backend", name, gl.backend_spec(name, "127.0.0.1", int(url.rsplit(":", 1)[1])))


def deployment(chain: AWSChain) -> None:
    """The proxy's Deployment, wanting no pod (envtest runs none): rotator's rollout of it is
    the signal to roll the local proxies."""
    body = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "litellm"},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": {"app": "litellm"}},
            "template": {
                "metadata": {"labels": {"app": "litellm"}, "annotations": {ANNOTATION: ""}},
                "spec": {"containers": [{"name": "litellm", "image": "litellm:test"}]},
            },
        },
    }
    chain.api.create(restarts.WORKLOADS["Deployment"], body, namespace=chain.ns)


def rolled_hash(chain: AWSChain) -> str:
    d = chain.api.get(restarts.WORKLOADS["Deployment"], "litellm", namespace=chain.ns)
    return str((d["spec"]["template"]["metadata"].get("annotations") or {}).get(ANNOTATION, ""))


def config_text(chain: AWSChain) -> str | None:
    try:
        secret = chain.api.get(
            objects.SECRETS, rapi.route_config_secret_name(ROUTE), namespace=chain.ns
        )
    except errors.NotFound:
        return None
    return gl.config_text(secret)


def through(proxies: gateway.RollingGateway) -> gl.Send:
    """A chat request through whichever proxy serves now (held while it runs, so that a roll
    stops that proxy only after the request)."""

    def send(model: str) -> tuple[int, str]:
        proxy = proxies.enter()
        if proxy is None:
            return 0, "no proxy"
        try:
            return proxy.chat(model)
        finally:
            proxies.leave(proxy)

    return send


@pytest.mark.e2e
def test_litellm_serves_every_credential_type_across_rotations_with_no_failed_request(
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
    chain.remember(MASTER_KEY, *KEYS)
    proxies = gateway.RollingGateway(tmp_path, master_key=MASTER_KEY)
    load = gl.Load(through(proxies))
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
        backend(chain, "openai", openai_up.url)
        backend(chain, "bedrock", bedrock_up.url)
        backend(chain, "azure", azure_up.url)
        backend(chain, "vertex", vertex_up.url)
        deployment(chain)
        chain.create("route", ROUTE, gl.route_spec())
        translated = chain.wait_condition("route", ROUTE, rapi.TRANSLATED, "True", timeout=90)
        assert translated is not None

        def complete() -> str | None:
            text = config_text(chain)
            return text if gl.complete(text) else None

        first = wait_for(complete, timeout=90, what="a configuration with every backend")
        proxies.roll(first)
        load.start()

        rotations: gl.Rotations = {t: [] for t in MODELS.values()}
        watch_until = time.monotonic() + 180
        seen_hash = rolled_hash(chain)
        rotated_key = retired = False
        key_rolled_at: int | None = None
        """Starts so far when a configuration with the new key was first handed over: every
        later start has it (a pending configuration is only ever replaced by a newer one)."""
        while time.monotonic() < watch_until:
            gl.record_rotations(chain, rotations)
            if not rotated_key and len(rotations["AWSCredentials"]) >= 2:
                # the API key's rotation, as OpenAI allows it: both keys valid, then the old one
                # retired once the gateway sends only the new one
                openai_up.accept(*KEYS)
                chain.secret("openai-key", apiKey=KEYS[1])
                rotated_key = True
            if (
                key_rolled_at is not None
                and proxies.serving > key_rolled_at
                and not proxies.draining
            ):
                openai_up.accept(KEYS[1])  # every proxy still running started with the new key
                retired = True
            if rolled_hash(chain) != seen_hash:
                seen_hash = rolled_hash(chain)
                text = config_text(chain)
                if text is not None:
                    if key_rolled_at is None and KEYS[1] in text:
                        key_rolled_at = proxies.rolls
                    proxies.roll(text, wait=False)
            if retired and gl.all_served(rotations, gl.seen(ups)):
                break
            time.sleep(0.5)  # polling the control plane, bounded by watch_until
        load.stop()
        gl.record_rotations(chain, rotations)
        title = f"LiteLLM load test: {proxies.rolls} proxy starts (LiteLLM reads config.yaml once)"
        printed = gl.report(title, load.results, load.failures, rotations, gl.seen(ups))
        print(printed)
        # what the gateway wrote (its log: LiteLLM's and its launcher's; the configurations it
        # read are removed once read) holds no credential it carried; the controller's logs,
        # metrics, the namespace's Events and the statuses are the chain fixture's scan
        # (tests/e2e/conftest.py), with every value the stand-ins here minted or accepted
        scanner = leaks.Scanner({**leaks.MINTED.values(), "test": chain.secret_values})
        gateway_files = written_by_the_gateway(tmp_path)
        assert "litellm.log" in gateway_files, "the gateway's log is scanned (positive control)"
        assert scanner.leaks(gateway_files) == []
        assert proxies.errors == []
        assert len(load.results) == load.started > 0, (
            f"{load.started} requests started, {len(load.results)} with an outcome"
        )
        assert load.failures == [], Counter((m, st, b[:160]) for m, st, b in load.failures)
        # EXPIRED for the OpenAI stand-in: the old key sent after its overlap (accept(KEYS[1]))
        gl.check_upstreams(gl.seen(ups))
        assert retired, "the old API key was never retired"
        for kind, n in gl.WANTED.items():
            assert gl.served(rotations[kind], gl.seen(ups)[kind]) >= n, (kind, printed)
    finally:
        load.stop()
        proxies.stop()
        for up in ups.values():
            up.stop()


def written_by_the_gateway(folder: Path) -> dict[str, str]:
    """Every file the gateway left in its folder, by name (its log; a configuration it did
    not remove would be found too)."""
    return {
        str(path.relative_to(folder)): path.read_text(errors="replace")
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }
