"""The real LiteLLM proxy serves traffic with the credentials rotator mints, through three
rotations of 60 s credentials, with no failed request and no upstream request carrying an
expired credential.

One Route (``spec.output.format: LiteLLM``) sends ``gpt`` to an OpenAI-compatible stand-in (an
API key, rotated with an overlap as OpenAI allows), ``claude`` to a Bedrock runtime stand-in
(SigV4 with a 60 s STS session from a ServiceAccount token, checked against what moto/STS
issued) and ``azure-gpt`` to an Azure OpenAI stand-in (a 60 s Entra ID token from the Azure
stand-in). LiteLLM reads its configuration once, at start: the Route names a Deployment in
``rolloutRestartTargets``, and when rotator rolls it out (its pod template's
``config-hash.rotator.dev/llm`` changes) the test does what that Deployment's rolling update
would: a new proxy on the config Secret's configuration, traffic switched once it answers, the
old one stopped after its requests finished (rotator_devkit.devenv.gateway.RollingGateway).
"""

from __future__ import annotations

import base64
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from controllers.reconcilers import api as rapi
from controllers.reconcilers import restarts
from controllers.runtime import clock as clocks
from controllers.runtime import errors, objects
from rotator_devkit.devenv import gateway
from rotator_devkit.devenv.standins import upstreams
from rotator_devkit.devenv.standins.azure import App, AzureStandIn
from rotator_devkit.devenv.standins.sts import STSProxy
from tests.e2e.conftest import ROLE_ARN
from tests.support import leaks
from tests.support.chain import AWSChain
from tests.support.polling import wait_for

pytestmark = pytest.mark.skipif(gateway.executable() is None, reason="litellm not installed")

TENANT = "00000000-0000-0000-0000-0000000000aa"
AZURE_SECRET = "azure-app-secret-litellm-5678"
KEYS = ("sk-litellm-standin-key-0001", "sk-litellm-standin-key-0002")
MASTER_KEY = "sk-litellm-master-test-0001"
ROUTE = "llm"
ANNOTATION = rapi.ROLLOUT_ANNOTATION_PREFIX + ROUTE
CLAUDE = "anthropic.claude-3-haiku-20240307-v1:0"
MODELS = {"gpt": "APIKey", CLAUDE: "AWSCredentials", "azure-gpt": "AzureCredentials"}
"""Model name → the credential type of the backend serving it."""
POLICIES = {"APIKey": "openai", "AWSCredentials": "bedrock", "AzureCredentials": "azure"}
ROTATIONS = 3
RATE = 4.0
"""Requests per second through the gateway, over the three models in turn."""


def backend(chain: AWSChain, name: str, schema: str, url: str) -> None:
    port = int(url.rsplit(":", 1)[1])
    endpoint = {"host": "127.0.0.1", "port": port, "tls": {"enabled": False}}
    chain.create("backend", name, {"schema": schema, "endpoint": endpoint})


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
    return base64.b64decode(secret["data"][rapi.ROUTE_CONFIG_KEY]).decode()


class Load:
    """A steady load through the gateway: every request's model, start and outcome."""

    def __init__(self, proxies: gateway.RollingGateway) -> None:
        self.proxies = proxies
        self.results: list[tuple[str, float, int]] = []
        self.failures: list[tuple[str, int, str]] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads.append(threading.Thread(target=self._run, daemon=True))
        self._threads[0].start()

    def _run(self) -> None:
        models = list(MODELS)
        n = 0
        while not self._stop.wait(1 / RATE):
            model = models[n % len(models)]
            n += 1
            worker = threading.Thread(target=self._one, args=(model,), daemon=True)
            self._threads.append(worker)
            worker.start()

    def _one(self, model: str) -> None:
        proxy = self.proxies.enter()
        if proxy is None:
            self.failures.append((model, 0, "no proxy"))
            return
        try:
            started = time.time()
            status, body = proxy.chat(model)
        finally:
            self.proxies.leave(proxy)
        self.results.append((model, started, status))
        if status != 200:
            self.failures.append((model, status, body[:300]))

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(60)


@pytest.mark.e2e
def test_litellm_serves_every_credential_type_across_rotations_with_no_failed_request(
    chain: AWSChain, sts: STSProxy, azure: AzureStandIn, tmp_path: Path
) -> None:
    openai_up = upstreams.OpenAIStandIn().start()
    bedrock_up = upstreams.BedrockStandIn(sts.keyring).start()
    azure_up = upstreams.AzureOpenAIStandIn(azure).start()
    ups = {"APIKey": openai_up, "AWSCredentials": bedrock_up, "AzureCredentials": azure_up}
    for name, up in ups.items():
        leaks.MINTED.add_source(f"the {name} model stand-in", up.issued_values)
    chain.remember(MASTER_KEY, *KEYS)
    proxies = gateway.RollingGateway(tmp_path, master_key=MASTER_KEY)
    load = Load(proxies)
    try:
        openai_up.accept(KEYS[0])
        chain.secret("openai-key", apiKey=KEYS[0])
        chain.api_key_policy("openai", secret="openai-key", targets=["openai"])
        # renewed with 40 s left: rotator's rollout window (10 s) and a proxy's start (forked
        # from a process that has imported LiteLLM: 1-3 s) must fit before the old one expires
        early = {"renewBeforePercentage": 67}
        chain.create(
            "policy",
            "bedrock",
            {
                "type": "AWSCredentials",
                "targetRefs": [{"name": "bedrock"}],
                "awsCredentials": {
                    "region": "us-east-1",
                    "serviceAccountToken": {
                        "serviceAccountName": "default",
                        "awsRoleArn": ROLE_ARN,
                    },
                },
                "rotation": early,
            },
        )
        azure.apps[f"llm-{chain.ns}"] = App(TENANT, secret=AZURE_SECRET)
        chain.secret("azure-app", **{"client-secret": AZURE_SECRET})
        chain.create(
            "policy",
            "azure",
            {
                "type": "AzureCredentials",
                "targetRefs": [{"name": "azure"}],
                "azureCredentials": {
                    "clientID": f"llm-{chain.ns}",
                    "tenantID": TENANT,
                    "clientSecretRef": {"name": "azure-app"},
                },
                "rotation": early,
            },
        )
        backend(chain, "openai", "OpenAI", openai_up.url)
        backend(chain, "bedrock", "AWSBedrock", bedrock_up.url)
        backend(chain, "azure", "AzureOpenAI", azure_up.url)
        deployment(chain)
        rules = [
            {"matches": [{"modelName": "gpt"}], "backendRefs": [{"name": "openai"}]},
            {
                "matches": [{"modelName": CLAUDE}],
                "backendRefs": [{"name": "bedrock"}],
            },
            {"matches": [{"modelName": "azure-gpt"}], "backendRefs": [{"name": "azure"}]},
        ]
        chain.create(
            "route",
            ROUTE,
            {
                "rules": rules,
                "output": {"format": "LiteLLM"},
                "rolloutRestartTargets": [{"kind": "Deployment", "name": "litellm"}],
            },
        )
        translated = chain.wait_condition("route", ROUTE, rapi.TRANSLATED, "True", timeout=90)
        assert translated is not None

        def complete() -> str | None:
            text = config_text(chain)
            return text if text and all(f"model_name: {m}" in text for m in MODELS) else None

        first = wait_for(complete, timeout=90, what="a configuration with every backend")
        proxies.roll(first)
        load.start()

        rotations: dict[str, list[tuple[float, str]]] = {t: [] for t in MODELS.values()}
        watch_until = time.monotonic() + 180
        seen_hash = rolled_hash(chain)
        rotated_key = retired = False
        key_rolled_at: int | None = None
        """Starts so far when a configuration with the new key was first handed over: every
        later start has it (a pending configuration is only ever replaced by a newer one)."""
        while time.monotonic() < watch_until:
            record_rotations(chain, rotations, ups)
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
            if retired and all(served(rotations[t], ups[t]) >= n for t, n in WANTED.items()):
                break
            time.sleep(0.5)  # polling the control plane, bounded by watch_until
        load.stop()
        record_rotations(chain, rotations, ups)
        printed = report(load, rotations, ups, proxies)
        print(printed)
        # the figures and failures this test prints hold no credential the gateway carried
        scanner = leaks.Scanner({**leaks.MINTED.values(), "test": chain.secret_values})
        assert scanner.leaks({"test output": printed + repr(load.failures)}) == []
        assert proxies.errors == []
        assert load.failures == [], Counter((m, st, b[:160]) for m, st, b in load.failures)
        for kind, up in ups.items():
            verdicts = Counter(s.verdict for s in up.seen_snapshot())
            # EXPIRED for the OpenAI stand-in: the old key sent after its overlap (accept(KEYS[1]))
            assert verdicts[upstreams.EXPIRED] == 0, (kind, verdicts)
            assert verdicts[upstreams.CURRENT] > 0, (kind, verdicts)
        assert retired, "the old API key was never retired"
        for kind, n in WANTED.items():
            assert served(rotations[kind], ups[kind]) >= n, (kind, printed)
    finally:
        load.stop()
        proxies.stop()
        for up in ups.values():
            up.stop()


def record_rotations(
    chain: AWSChain, rotations: dict[str, list[tuple[float, str]]], ups: dict[str, Any]
) -> None:
    """Each new credential of each policy: when it was issued and its upstream label."""
    for kind, policy in POLICIES.items():
        secret = chain.get("secret", rapi.derived_secret_name(policy))
        if secret is None:
            continue
        data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
        issued = (secret["metadata"].get("annotations") or {}).get(rapi.ISSUED_AT_ANNOTATION)
        if kind == "AWSCredentials":
            line = next(
                (
                    x
                    for x in data.get("credentials", "").splitlines()
                    if x.startswith("aws_access_key_id")
                ),
                "",
            )
            label = line.partition("=")[2].strip()
            keys = chain.aws_keys(policy)
            assert keys is not None
        else:
            value = data.get("apiKey") or data.get("azureAccessToken") or ""
            chain.remember(value)
            label = ups[kind].label(value)
        at = clocks.parse_rfc3339(issued) if issued else time.time()
        if not rotations[kind] or rotations[kind][-1][1] != label:
            rotations[kind].append((at, label))


WANTED = {"APIKey": 1, "AWSCredentials": ROTATIONS, "AzureCredentials": ROTATIONS}
"""Rotations whose new credential must reach the upstream, per type (the API key is rotated
once, by hand: it does not expire)."""


def served(rotations: list[tuple[float, str]], up: upstreams.ModelUpstream) -> int:
    """How many rotations (after the first credential) the gateway sent upstream."""
    return sum(1 for _, label in rotations[1:] if seen_by(up, label) is not None)


def seen_by(up: upstreams.ModelUpstream, label: str) -> float | None:
    """When ``up`` first received a current request with the credential ``label``."""
    return next(
        (
            s.at
            for s in up.seen_snapshot()
            if s.credential == label and s.verdict == upstreams.CURRENT
        ),
        None,
    )


def report(
    load: Load,
    rotations: dict[str, list[tuple[float, str]]],
    ups: dict[str, upstreams.ModelUpstream],
    proxies: gateway.RollingGateway,
) -> str:
    lines = [f"\nLiteLLM load test: {proxies.rolls} proxy starts (LiteLLM reads config.yaml once)"]
    for model, kind in MODELS.items():
        sent = sum(1 for m, _, _ in load.results if m == model)
        failed = sum(1 for m, _, _ in load.failures if m == model)
        lags = [
            first - at
            for at, label in rotations[kind][1:]
            if (first := seen_by(ups[kind], label)) is not None
        ]
        verdicts = Counter(s.verdict for s in ups[kind].seen_snapshot())
        lines.append(
            f"  {kind:17} sent {sent:4} failed {failed} rotations {len(rotations[kind]) - 1} "
            f"longest rotation→first upstream use {max(lags, default=float('nan')):.1f} s "
            f"restart needed: yes; upstream verdicts {dict(verdicts)}"
        )
    return "\n".join(lines)
