"""What the gateway load tests share — tests/e2e/test_litellm.py (the proxy as processes
beside envtest), tests/kind/test_litellm.py (LiteLLM and Envoy as Deployments in kind) and
tests/e2e/test_envoy.py (Envoy reloading the files of its config Secret): the Route under test,
one model per credential type LiteLLM supports; the steady load through the gateway
(:class:`Load`); the rotations each policy made, read from its derived Secret; which of them
reached the upstream stand-in; and the figures printed. The policy helpers and the figures take
another gateway's names (``target``, ``models``, ``wanted``): the kind test runs Envoy beside
LiteLLM with policies of its own.

Credentials are named by :meth:`upstreams.ModelUpstream.label` (a hash prefix) or, for AWS, by
the access key id, never by their bytes: a label can be printed and compared across processes.
"""

from __future__ import annotations

import base64
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from controllers.reconcilers import api as rapi
from controllers.runtime import clock as clocks
from rotator_devkit.devenv.standins import upstreams
from tests.support import leaks
from tests.support.chain import AWSChain

ROUTE = "llm"
DEPLOYMENT = "litellm"
"""The proxy's Deployment, the Route's ``rolloutRestartTargets``."""
ANNOTATION = rapi.ROLLOUT_ANNOTATION_PREFIX + ROUTE
"""The pod-template annotation rotator rolls the proxy out by (its value: the config hash)."""
TENANT = "00000000-0000-0000-0000-0000000000aa"
CLAUDE = "anthropic.claude-3-haiku-20240307-v1:0"
MODELS = {
    "gpt": "APIKey",
    CLAUDE: "AWSCredentials",
    "azure-gpt": "AzureCredentials",
    "gemini-2.0-flash": "GCPCredentials",
}
"""Model name → the credential type of the backend serving it."""
POLICIES = {
    "APIKey": "openai",
    "AWSCredentials": "bedrock",
    "AzureCredentials": "azure",
    "GCPCredentials": "vertex",
}
"""Credential type → the policy (and ServiceBackend) of that name."""
SCHEMAS = {
    "openai": "OpenAI",
    "bedrock": "AWSBedrock",
    "azure": "AzureOpenAI",
    "vertex": "GCPVertexAI",
}
UPSTREAMS = {
    "APIKey": "openai",
    "AWSCredentials": "bedrock",
    "AzureCredentials": "azure-openai",
    "GCPCredentials": "vertex-ai",
}
"""Credential type → the model API stand-in serving it (ProviderStandIns.upstreams)."""
ROTATIONS = 3
WANTED = {
    "APIKey": 1,
    "AWSCredentials": ROTATIONS,
    "AzureCredentials": ROTATIONS,
    "GCPCredentials": ROTATIONS,
}
"""Rotations whose new credential must reach the upstream, per type (the API key is rotated
once, by hand: it does not expire)."""
RATE = 4.0
"""Requests per second through the gateway, over the three models in turn."""
EARLY = {"renewBeforePercentage": 67}
"""Renewed with two thirds of the lifetime left: a rollout (rotator's window, a new proxy's
start) must fit before the old credential expires."""

Rotations = dict[str, list[tuple[float, str]]]
"""Credential type → (issued at, label) of each credential its policy served, in order."""


def bedrock_spec(
    role_arn: str, service_account: str, *, target: str = POLICIES["AWSCredentials"]
) -> dict[str, Any]:
    return {
        "type": "AWSCredentials",
        "targetRefs": [{"name": target}],
        "awsCredentials": {
            "region": "us-east-1",
            "serviceAccountToken": {
                "serviceAccountName": service_account,
                "awsRoleArn": role_arn,
            },
        },
        "rotation": EARLY,
    }


def azure_spec(
    client_id: str, secret: str, *, target: str = POLICIES["AzureCredentials"]
) -> dict[str, Any]:
    return {
        "type": "AzureCredentials",
        "targetRefs": [{"name": target}],
        "azureCredentials": {
            "clientID": client_id,
            "tenantID": TENANT,
            "clientSecretRef": {"name": secret},
        },
        "rotation": EARLY,
    }


GCP_PROJECT = "llm-project"
GCP_PROJECT_NUMBER = "123456789"
GCP_REGION = "us-central1"
GCP_POOL, GCP_PROVIDER = "llm-pool", "llm-provider"


def vertex_spec(
    service_account: str, *, target: str = POLICIES["GCPCredentials"]
) -> dict[str, Any]:
    """Workload identity federation from a ServiceAccount token: a federated access token of
    STS (the stand-in's lifetime), used on Vertex AI directly."""
    return {
        "type": "GCPCredentials",
        "targetRefs": [{"name": target}],
        "gcpCredentials": {
            "projectName": GCP_PROJECT,
            "region": GCP_REGION,
            "workloadIdentityFederation": {
                "projectID": GCP_PROJECT_NUMBER,
                "workloadIdentityPoolName": GCP_POOL,
                "workloadIdentityProviderName": GCP_PROVIDER,
                "serviceAccountToken": {"serviceAccountName": service_account},
            },
        },
        "rotation": EARLY,
    }


def backend_spec(name: str, host: str, port: int) -> dict[str, Any]:
    endpoint = {"host": host, "port": port, "tls": {"enabled": False}}
    return {"schema": SCHEMAS[name], "endpoint": endpoint}


def route_spec() -> dict[str, Any]:
    by_type = {kind: model for model, kind in MODELS.items()}
    rules = [
        {"matches": [{"modelName": by_type[kind]}], "backendRefs": [{"name": policy}]}
        for kind, policy in POLICIES.items()
    ]
    return {
        "rules": rules,
        "output": {"format": "LiteLLM"},
        "rolloutRestartTargets": [{"kind": "Deployment", "name": DEPLOYMENT}],
    }


def complete(config: str | None) -> bool:
    """Whether a rendered configuration serves every model."""
    return config is not None and all(f"model_name: {m}" in config for m in MODELS)


def config_text(secret: Mapping[str, Any] | None) -> str | None:
    """The ``config.yaml`` of a route config Secret."""
    if secret is None:
        return None
    return base64.b64decode((secret.get("data") or {})[rapi.ROUTE_CONFIG_KEY]).decode()


def record(
    rotations: Rotations,
    kind: str,
    secret: Mapping[str, Any] | None,
    *,
    now: Callable[[], float] = time.time,
) -> str | None:
    """Notes the credential a policy's derived Secret holds, if new (issued at its
    ``issued-at`` annotation, or ``now()`` without one); returns its secret value for a leak
    scan's list (the API key or token; for AWS, whose label is the access key id, None)."""
    if secret is None:
        return None
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
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
        value = None
    else:
        value = (
            data.get("apiKey") or data.get("azureAccessToken") or data.get("gcpAccessToken")
        ) or None
        label = upstreams.ModelUpstream.label(value) if value else ""
    if not label:
        return None
    issued = (secret["metadata"].get("annotations") or {}).get(rapi.ISSUED_AT_ANNOTATION)
    at = clocks.parse_rfc3339(issued) if issued else now()
    if not rotations[kind] or rotations[kind][-1][1] != label:
        rotations[kind].append((at, label))
    return value


def seen_by(seen: Sequence[upstreams.Seen], label: str) -> float | None:
    """When an upstream first received a current request with the credential ``label``."""
    return next(
        (s.at for s in seen if s.credential == label and s.verdict == upstreams.CURRENT), None
    )


def lags(rotations: Sequence[tuple[float, str]], seen: Sequence[upstreams.Seen]) -> list[float]:
    """For each rotation (after the first credential) whose credential reached the upstream,
    the seconds from its issue to that first current request."""
    return [
        first - at for at, label in rotations[1:] if (first := seen_by(seen, label)) is not None
    ]


def served(rotations: Sequence[tuple[float, str]], seen: Sequence[upstreams.Seen]) -> int:
    """How many rotations (after the first credential) the gateway sent upstream."""
    return sum(1 for _, label in rotations[1:] if seen_by(seen, label) is not None)


def all_served(
    rotations: Rotations,
    seen: Mapping[str, Sequence[upstreams.Seen]],
    *,
    wanted: Mapping[str, int] = WANTED,
) -> bool:
    return all(served(rotations[kind], seen[kind]) >= n for kind, n in wanted.items())


def per_type(
    results: Sequence[tuple[str, float, int]],
    failures: Sequence[tuple[str, int, str]],
    rotations: Rotations,
    seen: Mapping[str, Sequence[upstreams.Seen]],
    *,
    models: Mapping[str, str] = MODELS,
) -> dict[str, dict[str, Any]]:
    """The figures by credential type: requests sent and failed, rotations, the longest time
    from a rotation to the first upstream request with the new credential (None when none
    reached it), the upstream's verdicts. ``models``: model → credential type, as sent."""
    figures: dict[str, dict[str, Any]] = {}
    for model, kind in models.items():
        waits = lags(rotations[kind], seen[kind])
        figures[kind] = {
            "sent": sum(1 for m, _, _ in results if m == model),
            "failed": sum(1 for m, _, _ in failures if m == model),
            "rotations": len(rotations[kind]) - 1,
            "longest_rotation_to_use_s": round(max(waits), 1) if waits else None,
            "verdicts": dict(Counter(s.verdict for s in seen[kind])),
        }
    return figures


def report(
    title: str,
    results: Sequence[tuple[str, float, int]],
    failures: Sequence[tuple[str, int, str]],
    rotations: Rotations,
    seen: Mapping[str, Sequence[upstreams.Seen]],
    *,
    models: Mapping[str, str] = MODELS,
    restarts: str = "restart needed: yes",
) -> str:
    """:func:`per_type`'s figures as lines under ``title``; ``restarts`` says what a rotation
    cost the gateway (LiteLLM: a new proxy each time; Envoy: none)."""
    lines = [f"\n{title}"]
    for kind, f in per_type(results, failures, rotations, seen, models=models).items():
        longest = f["longest_rotation_to_use_s"]
        lines.append(
            f"  {kind:17} sent {f['sent']:4} failed {f['failed']} rotations {f['rotations']} "
            f"longest rotation→first upstream use "
            f"{'-' if longest is None else f'{longest:.1f}'} s "
            f"{restarts}; upstream verdicts {f['verdicts']}"
        )
    return "\n".join(lines)


def check_upstreams(seen: Mapping[str, Sequence[upstreams.Seen]]) -> None:
    """No upstream received a credential past its end (for the API key: after its overlap),
    and each received current ones."""
    for kind, received in seen.items():
        verdicts = Counter(s.verdict for s in received)
        assert verdicts[upstreams.EXPIRED] == 0, (kind, verdicts)
        assert verdicts[upstreams.CURRENT] > 0, (kind, verdicts)


Send = Callable[[str], tuple[int, str]]
"""One chat completion of a model through the gateway: its status and (bounded) body."""


class Load:
    """A steady load through a gateway, from threads of the test's process (one per request, so
    a slow answer delays no other): ``rate`` requests per second over ``models`` in turn, each
    request's model, start and outcome. Whatever a request raises is its outcome (a failure with
    status 0: ``http.client.IncompleteRead`` from a proxy stopped mid-reply is no OSError), and
    :attr:`started` counts the requests begun, so a request that recorded nothing, or still ran
    when the load stopped, shows as missing."""

    def __init__(self, send: Send, *, models: Sequence[str] = tuple(MODELS), rate: float = RATE):
        self.send = send
        self.models = list(models)
        self.rate = rate
        self.results: list[tuple[str, float, int]] = []
        self.failures: list[tuple[str, int, str]] = []
        self.started = 0
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self._threads.append(threading.Thread(target=self._run, daemon=True))
        self._threads[0].start()

    def _run(self) -> None:
        """Request ``n`` starts ``n / rate`` seconds after the first, so the rate holds however
        long starting a thread takes (a wait of ``1 / rate`` after each would fall behind)."""
        n = 0
        began = time.monotonic()
        while not self._stop.wait(max(0.0, began + (n + 1) / self.rate - time.monotonic())):
            model = self.models[n % len(self.models)]
            n += 1
            worker = threading.Thread(target=self._one, args=(model,), daemon=True)
            self._threads.append(worker)
            self.started += 1
            worker.start()

    def _one(self, model: str) -> None:
        started = time.time()
        status, body = 0, "no outcome"
        try:
            status, body = self.send(model)
        except BaseException as exc:
            body = f"{type(exc).__name__}: {str(exc)[:200]}"
        finally:
            self.results.append((model, started, status))
            if status != 200:
                self.failures.append((model, status, body[:300]))

    def stop(self) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(60)


def record_rotations(chain: AWSChain, rotations: Rotations) -> None:
    """Each new credential of each policy: when it was issued and its upstream label (the
    values remembered for the chain's leak scan)."""
    for kind, policy in POLICIES.items():
        value = record(rotations, kind, chain.get("secret", rapi.derived_secret_name(policy)))
        if value is not None:
            chain.remember(value)
        elif kind == "AWSCredentials":
            chain.aws_keys(policy)  # remembers the secret key and session token


def seen(ups: Mapping[str, upstreams.ModelUpstream]) -> dict[str, list[upstreams.Seen]]:
    """What each model API stand-in received so far, by credential type."""
    return {kind: up.seen_snapshot() for kind, up in ups.items()}


class ModelUpstreams:
    """The four model API stand-ins a gateway test sends through, started, each registered with
    the leak scan: by credential type (:attr:`by_type`) and by name."""

    def __init__(self, keyring: Any, azure: Any, gcp: Any) -> None:
        """``keyring``: the STS proxy's; ``azure``, ``gcp``: the identity stand-ins whose tokens
        the Azure OpenAI and Vertex AI stand-ins accept."""
        self.openai = upstreams.OpenAIStandIn().start()
        self.bedrock = upstreams.BedrockStandIn(keyring).start()
        self.azure = upstreams.AzureOpenAIStandIn(azure).start()
        self.vertex = upstreams.VertexAIStandIn(gcp, locations={(GCP_PROJECT, GCP_REGION)}).start()
        self.by_type: dict[str, upstreams.ModelUpstream] = {
            "APIKey": self.openai,
            "AWSCredentials": self.bedrock,
            "AzureCredentials": self.azure,
            "GCPCredentials": self.vertex,
        }
        for name, up in self.by_type.items():
            leaks.MINTED.add_source(f"the {name} model stand-in", up.issued_values)
