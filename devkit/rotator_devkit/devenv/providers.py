"""The provider stand-ins as one set: moto (AWS, server mode) behind the STS and IAM proxies, the
OIDC issuer, Google's and Azure AD's token services, the controller's own identity (EKS Pod
Identity's container credentials, an Azure IMDS, a GCE metadata server) and the model APIs a
gateway sends traffic to (OpenAI, Bedrock runtime, Azure OpenAI, Vertex AI's OpenAI-compatible
endpoint: :mod:`.standins.upstreams`,
checking credentials against what these issuers issued) — started together,
made to trust a cluster's service-account issuer, told what policies name (:meth:`register`),
and described to the controller (:meth:`controller_env`).

Two users share it, so that what ``rotator dev`` runs and what a kind cluster runs are the same
code: :class:`~rotator_devkit.devenv.environment.DevEnvironment` (free loopback ports, beside a
local control plane) and :mod:`rotator_devkit.incluster` (a Pod: fixed ports on every address,
URLs that name its Service, TLS wherever the product insists on it). A :class:`Placement` is
the difference.
"""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import boto3
from moto.server import ThreadedMotoServer

from rotator.providers.gcp import federation
from rotator_devkit.controlplane import pki
from rotator_devkit.devenv.standins.azure import App, AzureStandIn, tls_context
from rotator_devkit.devenv.standins.azure_identity import ManagedIdentityStandIn
from rotator_devkit.devenv.standins.container import ContainerCredentials
from rotator_devkit.devenv.standins.gce_metadata import GCEMetadataServer
from rotator_devkit.devenv.standins.gcp import GCPStandIn
from rotator_devkit.devenv.standins.httpstub import Stub
from rotator_devkit.devenv.standins.iam import IAMProxy
from rotator_devkit.devenv.standins.oidc import OIDCIssuer
from rotator_devkit.devenv.standins.sts import STSProxy
from rotator_devkit.devenv.standins.upstreams import (
    AzureOpenAIStandIn,
    BedrockStandIn,
    ModelUpstream,
    OpenAIStandIn,
    VertexAIStandIn,
)

AUDIENCE = "sts.amazonaws.com"
CONTROLLER_ROLE = "arn:aws:iam::123456789012:role/rotator-controller"
"""The controller's own AWS identity here: EKS Pod Identity's container credentials endpoint
serves sessions of this role (``awsCredentials.controllerIdentity``)."""
DEFAULT_NAMESPACE = "default"
"""Where a policy without ``metadata.namespace`` lives (config/samples name none)."""

S = TypeVar("S", bound=Stub)

STAND_INS = (
    "moto",
    "sts",
    "iam",
    "oidc",
    "gcp",
    "azure",
    "pod-identity",
    "imds",
    "gce-metadata",
    "openai",
    "bedrock",
    "azure-openai",
    "vertex-ai",
)
"""Every server of the set, by the name :attr:`Placement.ports` and :meth:`calls` use (the
last four: model API stand-ins, :meth:`ProviderStandIns.upstreams`)."""


@dataclass(frozen=True)
class Placement:
    """Where the stand-ins listen and what their URLs say.

    The default is ``rotator dev``'s: free ports on 127.0.0.1, plain HTTP but for Azure AD
    (MSAL insists on https). In a cluster: ``bind`` ``0.0.0.0``, fixed ``ports``, a
    ``public_host`` (the Service's DNS name) that the certificate names, and ``tls`` for the
    OIDC issuer too (the shipped controller sends client secrets only over TLS) and for the
    container credentials endpoint (botocore allows plain http to loopback and the agents'
    link-local addresses only).
    """

    bind: str = "127.0.0.1"
    public_host: str = "127.0.0.1"
    ports: Mapping[str, int] = field(default_factory=dict)
    """Stand-in name (:data:`STAND_INS`) → port; a name not here gets a free one."""
    tls: frozenset[str] = frozenset({"azure"})
    dns_names: tuple[str, ...] = ()
    """More names the certificate carries (the Service's short forms)."""

    @property
    def placed(self) -> bool:
        """Whether the servers move off their free loopback ports."""
        return self.bind != "127.0.0.1" or self.public_host != "127.0.0.1" or bool(self.ports)


class ProviderStandIns:
    def __init__(
        self, folder: Path, *, lifetime: int = 180, placement: Placement | None = None
    ) -> None:
        """``folder`` holds the TLS files (the CA the controller is told to trust)."""
        self.folder = folder
        self.lifetime = lifetime
        self.placement = placement or Placement()
        self.moto = ThreadedMotoServer(
            ip_address=self.placement.bind,
            port=self.placement.ports.get("moto", 0),
            verbose=False,
        )
        self.moto_url = ""
        """moto's own URL, as this process reaches it (loopback)."""
        self.oidc = OIDCIssuer(token_lifetime=max(2 * lifetime, 300))
        self.sts: STSProxy | None = None
        self.iam: IAMProxy | None = None
        self.gcp = GCPStandIn(lifetime=lifetime)
        self.azure: AzureStandIn | None = None
        self.pod_identity: ContainerCredentials | None = None
        # The controller's own identity: a managed identity (IMDS) and a GKE metadata server.
        self.imds = ManagedIdentityStandIn(lifetime=lifetime)
        self.metadata = GCEMetadataServer(self.gcp, lifetime=lifetime)
        self.openai = OpenAIStandIn()
        self.bedrock: BedrockStandIn | None = None
        self.azure_openai: AzureOpenAIStandIn | None = None
        self.vertex_ai = VertexAIStandIn(self.gcp)
        self.ca_file: Path | None = None
        self.cluster_issuer: str | None = None
        self._tls: ssl.SSLContext | None = None
        self._started: list[Any] = []

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> ProviderStandIns:
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        self.moto.start()
        self._started.append(self.moto)
        _, port = self.moto.get_host_and_port()
        self.moto_url = f"http://127.0.0.1:{port}"
        self._tls, self.ca_file = self._tls_context()
        self._started.append(self._placed("oidc", self.oidc).start())
        self.sts = self._placed("sts", STSProxy(self.moto_url, lifetime=self.lifetime)).start()
        self._started.append(self.sts)
        self.iam = self._placed("iam", IAMProxy(self.moto_url, self.sts.keyring)).start()
        self._started.append(self.iam)
        self.pod_identity = self._placed(
            "pod-identity",
            ContainerCredentials(
                self.moto_url,
                role_arn=CONTROLLER_ROLE,
                keyring=self.sts.keyring,
                lifetime=self.lifetime,
            ),
        ).start()
        self._started.append(self.pod_identity)
        self.sts.trust(self.oidc.issuer, self.oidc.jwks(), AUDIENCE)
        self._started.append(self._placed("gcp", self.gcp).start())
        self.gcp.trust.add(self.oidc.issuer, self.oidc.jwks())
        self._started.append(self._placed("gce-metadata", self.metadata).start())
        self._started.append(self._placed("imds", self.imds).start())
        azure = AzureStandIn(self._tls, self.ca_file, lifetime=self.lifetime)
        self.azure = self._placed("azure", azure).start()
        self._started.append(self.azure)
        self.azure.trust.add(self.oidc.issuer, self.oidc.jwks())
        # the model APIs, plain HTTP (a gateway's backend may say tls.enabled: false)
        self._started.append(self._placed("openai", self.openai).start())
        self.bedrock = self._placed("bedrock", BedrockStandIn(self.sts.keyring)).start()
        self._started.append(self.bedrock)
        self.azure_openai = self._placed("azure-openai", AzureOpenAIStandIn(self.azure)).start()
        self._started.append(self.azure_openai)
        self._started.append(self._placed("vertex-ai", self.vertex_ai).start())

    def set_lifetime(self, seconds: int) -> None:
        """The lifetime of what the issuers mint from now on (STS sessions, Azure AD and Google
        tokens, the controller's own identity); what they minted keeps its end."""
        assert seconds > 0
        assert self.sts is not None
        assert self.azure is not None
        assert self.pod_identity is not None
        self.lifetime = seconds
        self.sts.lifetime = self.azure.lifetime = self.pod_identity.lifetime = seconds
        self.gcp.lifetime = self.imds.lifetime = self.metadata.lifetime = seconds

    def stop(self) -> None:
        """Stops every server at once (each takes up to its poll interval, half a second)."""
        threads = [threading.Thread(target=_stop_quietly, args=(p,)) for p in self._started]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self._started.clear()

    def _tls_context(self) -> tuple[ssl.SSLContext, Path]:
        """The servers' certificate and the CA file that trusts it: for 127.0.0.1 (and
        localhost) on loopback, for the public host and :attr:`Placement.dns_names` when
        placed."""
        if not self.placement.placed:
            return tls_context(self.folder)
        names = [self.placement.public_host, *self.placement.dns_names, "localhost"]
        ca = pki.CertificateAuthority("rotator-test-standins-ca")
        issued = ca.issue(
            "rotator-standins",
            dns_names=list(dict.fromkeys(names)),
            ip_addresses=["127.0.0.1"],
            server=True,
        )
        (self.folder / "ca.crt").write_bytes(ca.cert_pem)
        (self.folder / "server.crt").write_bytes(issued.cert)
        (self.folder / "server.key").write_bytes(issued.key)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.folder / "server.crt", self.folder / "server.key")
        return context, self.folder / "ca.crt"

    def _placed(self, name: str, stub: S) -> S:
        """``stub`` moved where the placement says (nothing changes on loopback, but TLS)."""
        placement = self.placement
        if not placement.placed:
            return stub
        tls = self._tls if name in placement.tls else None
        address = (placement.bind, placement.ports.get(name, 0))
        return stub.place(address, placement.public_host, tls=tls)

    # --- trust and registration --------------------------------------------------------------

    def trust_cluster(self, issuer: str, jwks: dict[str, Any]) -> None:
        """Accepts the ServiceAccount tokens of a cluster: its issuer (what its discovery
        document names) signing with its JWKS, at AWS STS, Google STS and Azure AD."""
        assert self.sts is not None
        assert self.azure is not None
        self.cluster_issuer = issuer
        self.sts.trust(issuer, jwks, AUDIENCE)
        self.gcp.trust.add(issuer, jwks)
        self.azure.trust.add(issuer, jwks)

    def register_documents(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Registers what the BackendSecurityPolicies among ``docs`` name, reading the Secrets
        among them; returns ``docs``, changed in place where a policy or Secret must say what
        exists here (the OIDC issuer's URL, a service-account key this GCP trusts)."""
        secrets: dict[tuple[str, str], dict[str, Any]] = {
            (_namespace(d), d["metadata"]["name"]): d for d in docs if d["kind"] == "Secret"
        }
        for doc in docs:
            if doc["kind"] == "BackendSecurityPolicy":
                namespace = _namespace(doc)
                mine = {name: s for (ns, name), s in secrets.items() if ns == namespace}
                self.register(doc["spec"], mine, namespace=namespace)
        return docs

    def register(
        self,
        spec: dict[str, Any],
        secrets: dict[str, dict[str, Any]],
        *,
        namespace: str = DEFAULT_NAMESPACE,
    ) -> None:
        """Makes the identities one policy spec names exist here; ``secrets`` (by name, of the
        policy's namespace) are read for client secrets and written for generated keys."""
        if aws := spec.get("awsCredentials"):
            self._register_aws(aws, secrets)
        if gcp := spec.get("gcpCredentials"):
            self._register_gcp(gcp, secrets)
        if azure := spec.get("azureCredentials"):
            self._register_azure(azure, secrets, namespace)

    def _register_aws(self, aws: dict[str, Any], secrets: dict[str, dict[str, Any]]) -> None:
        assert self.sts is not None
        for source in ("oidcExchangeToken", "serviceAccountToken"):
            if source in aws:
                self.sts.roles.add(aws[source]["awsRoleArn"])
        if chained := aws.get("assumeRole"):  # the role trusts the source's identity
            base = CONTROLLER_ROLE if "controllerIdentity" in aws else None
            for source in ("oidcExchangeToken", "serviceAccountToken"):
                base = aws[source]["awsRoleArn"] if source in aws else base
            if base is not None:
                self.sts.allow_assume(
                    chained["roleArn"], base, external_id=chained.get("externalID")
                )
        if exchange := aws.get("oidcExchangeToken"):
            self._oidc_client(exchange["oidc"], secrets)
        if key := aws.get("iamAccessKey"):
            iam = boto3.client(
                "iam",
                region_name=aws["region"],
                endpoint_url=self.moto_url,
                aws_access_key_id="AKIADEV",
                aws_secret_access_key="dev",  # noqa: S106 - moto accepts any keys
            )
            with contextlib.suppress(iam.exceptions.EntityAlreadyExistsException):
                iam.create_user(UserName=key["userName"])

    def _register_gcp(self, gcp: dict[str, Any], secrets: dict[str, dict[str, Any]]) -> None:
        if gcp.get("projectName") and gcp.get("region"):
            self.vertex_ai.locations.add((gcp["projectName"], gcp["region"]))
        if account := (gcp.get("controllerIdentity") or {}).get("serviceAccount"):
            self.gcp.service_accounts.add(account)
        if wif := gcp.get("workloadIdentityFederation"):
            audience = federation.audience(
                wif["projectID"],
                wif["workloadIdentityPoolName"],
                wif["workloadIdentityProviderName"],
            )
            self.gcp.add_provider(audience, {"https:" + audience})
            if impersonation := wif.get("serviceAccountImpersonation"):
                self.gcp.service_accounts.add(impersonation["serviceAccountName"])
            if exchange := wif.get("oidcExchangeToken"):
                exchange["oidc"].setdefault("audience", "https:" + audience)
                self._oidc_client(exchange["oidc"], secrets)
        if file := gcp.get("credentialsFile"):
            ref = file["secretRef"]
            project = gcp["projectName"]
            key = self.gcp.service_account_key(
                f"{ref['name']}@{project}.iam.gserviceaccount.com", project
            )
            data = secrets[ref["name"]].setdefault("stringData", {})
            data[ref.get("key", "service_account.json")] = json.dumps(key)

    def _register_azure(
        self, azure: dict[str, Any], secrets: dict[str, dict[str, Any]], namespace: str
    ) -> None:
        assert self.azure is not None
        if (identity := azure.get("controllerIdentity")) is not None:
            if client := identity.get("clientID"):
                self.imds.user_assigned.add(client)
            return
        app = self.azure.apps.setdefault(azure["clientID"], App(azure["tenantID"]))
        if ref := azure.get("clientSecretRef"):
            app.secret = _secret_value(secrets[ref["name"]], ref.get("key", "client-secret"))
        if sa := azure.get("serviceAccountToken"):
            assert self.cluster_issuer is not None, "trust_cluster() before registering"
            subject = f"system:serviceaccount:{namespace}:{sa['serviceAccountName']}"
            app.federated.add((self.cluster_issuer, subject))
        if exchange := azure.get("oidcExchangeToken"):
            client = self._oidc_client(exchange["oidc"], secrets)
            app.federated.add((self.oidc.issuer, client))

    def _oidc_client(self, oidc: dict[str, Any], secrets: dict[str, dict[str, Any]]) -> str:
        """Points the policy at this issuer and registers its client here."""
        oidc["issuer"] = self.oidc.issuer
        ref = oidc["clientSecretRef"]
        self.oidc.register(
            oidc["clientID"], _secret_value(secrets[ref["name"]], ref.get("key", "client-secret"))
        )
        return str(oidc["clientID"])

    # --- what the controller and the tests are told ------------------------------------------

    def controller_env(self, *, token_file: Path, ca_file: Path | None = None) -> dict[str, str]:
        """Where the controller finds the providers (boto3 reads the AWS ones itself), as it
        will see the files: ``token_file`` holds :attr:`pod_identity_token`, ``ca_file`` the
        CA (default: this process's copy)."""
        assert self.sts is not None
        assert self.iam is not None
        assert self.azure is not None
        assert self.pod_identity is not None
        return {
            "AWS_ENDPOINT_URL_STS": self.sts.url,
            "AWS_ENDPOINT_URL_IAM": self.iam.url,  # records the keys it creates, for STS
            "AWS_EC2_METADATA_DISABLED": "true",
            "ROTATOR_GCP_STS_ENDPOINT": self.gcp.sts_url,
            "ROTATOR_GCP_IAM_CREDENTIALS_ENDPOINT": self.gcp.url,
            # a URL, not host:port: azure-identity reads "name.svc:5005" as a URL of scheme
            # "name.svc" and refuses it (an IP address and port happens to pass)
            "ROTATOR_AZURE_AUTHORITY_HOST": self.azure.url,
            "REQUESTS_CA_BUNDLE": str(ca_file or self.azure.ca_file),
            # the controller's own identity, where botocore, azure-identity and google-auth look
            **self.pod_identity.environment(token_file),
            "AZURE_POD_IDENTITY_AUTHORITY_HOST": self.imds.authority_host,
            "GCE_METADATA_HOST": self.metadata.host,
            "GCE_METADATA_IP": self.metadata.host,
        }

    @property
    def pod_identity_token(self) -> str:
        """What the controller must send the container credentials endpoint (its token file)."""
        assert self.pod_identity is not None
        return self.pod_identity.token

    def stubs(self) -> dict[str, Stub]:
        """The HTTP stand-ins by name (all of :data:`STAND_INS` but moto)."""
        assert self.sts is not None
        assert self.iam is not None
        assert self.azure is not None
        assert self.pod_identity is not None
        return {
            "sts": self.sts,
            "iam": self.iam,
            "oidc": self.oidc,
            "gcp": self.gcp,
            "azure": self.azure,
            "pod-identity": self.pod_identity,
            "imds": self.imds,
            "gce-metadata": self.metadata,
            **self.upstreams(),
        }

    def upstreams(self) -> dict[str, ModelUpstream]:
        """The model API stand-ins by name (``openai``, ``bedrock``, ``azure-openai``,
        ``vertex-ai``)."""
        assert self.bedrock is not None
        assert self.azure_openai is not None
        return {
            "openai": self.openai,
            "bedrock": self.bedrock,
            "azure-openai": self.azure_openai,
            "vertex-ai": self.vertex_ai,
        }

    def calls(self) -> dict[str, int]:
        """Every counter of every stand-in, as ``<stand-in>.<what>``: the provider actions
        (``sts.AssumeRoleWithWebIdentity``, ``iam.CreateAccessKey``, ``gcp.exchange``,
        ``azure.token``, ``pod-identity.served``…), refusals and ``received``."""
        return {
            f"{name}.{what}": count
            for name, stub in self.stubs().items()
            for what, count in stub.counts_snapshot().items()
        }

    def issued(self) -> frozenset[str]:
        """Every secret value any stand-in minted or was given (for leak scans)."""
        found: frozenset[str] = frozenset()
        for stub in self.stubs().values():
            found |= stub.issued_values()
        return found


def _stop_quietly(part: Any) -> None:
    with contextlib.suppress(Exception):
        part.stop()


def _namespace(doc: dict[str, Any]) -> str:
    return str(doc["metadata"].get("namespace") or DEFAULT_NAMESPACE)


def _secret_value(secret: dict[str, Any], key: str) -> str:
    """A Secret manifest's value, from ``stringData`` or (base64) ``data``."""
    if key in (secret.get("stringData") or {}):
        return str(secret["stringData"][key])
    return base64.b64decode(secret["data"][key]).decode()
