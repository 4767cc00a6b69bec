"""Everything ``rotator dev`` runs besides the controller: a local control plane, moto (AWS),
the stand-ins (OIDC issuer, STS and IAM proxies that check signatures with what they issued,
Google and Azure AD token services, an Azure IMDS and a GCE metadata server for the
controller's own identity), the CRDs, and the samples — one chain per credential source, made
runnable here by registering in the stand-ins what each sample names (its OIDC client, IAM user,
pool and provider, Azure application, managed identity, service account to impersonate).

Credentials minted here live ``lifetime`` seconds (3 minutes by default), so rotations happen
while you watch.
"""

from __future__ import annotations

import contextlib
import json
import logging
from pathlib import Path
from typing import Any

import boto3
from moto.server import ThreadedMotoServer

from controllers.runtime import client as clients
from controllers.runtime import errors, objects, restconfig
from rotator.providers.gcp import federation
from rotator_devkit.controlplane.cluster import SERVICE_ACCOUNT_ISSUER, LocalControlPlane
from rotator_devkit.devenv import manifests
from rotator_devkit.devenv.standins.azure import App, AzureStandIn, tls_context
from rotator_devkit.devenv.standins.azure_identity import ManagedIdentityStandIn
from rotator_devkit.devenv.standins.container import ContainerCredentials
from rotator_devkit.devenv.standins.gce_metadata import GCEMetadataServer
from rotator_devkit.devenv.standins.gcp import GCPStandIn
from rotator_devkit.devenv.standins.iam import IAMProxy
from rotator_devkit.devenv.standins.oidc import OIDCIssuer
from rotator_devkit.devenv.standins.sts import STSProxy

NAMESPACE = "default"
AUDIENCE = "sts.amazonaws.com"
CONTROLLER_ROLE = "arn:aws:iam::123456789012:role/rotator-controller"
"""The controller's own AWS identity here: EKS Pod Identity's container credentials endpoint
serves sessions of this role (``awsCredentials.controllerIdentity``)."""


class DevEnvironment:
    def __init__(self, assets: Path, *, config: Path, lifetime: int = 180) -> None:
        self.config = config
        self.lifetime = lifetime
        self.control_plane = LocalControlPlane(assets)
        self.moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self.moto_url = ""
        self.oidc = OIDCIssuer(token_lifetime=max(2 * lifetime, 300))
        self.sts: STSProxy | None = None
        self.iam: IAMProxy | None = None
        self.gcp = GCPStandIn(lifetime=lifetime)
        self.azure: AzureStandIn | None = None
        self.pod_identity: ContainerCredentials | None = None
        # The controller's own identity: a managed identity (IMDS) and a GKE metadata server.
        self.imds = ManagedIdentityStandIn(lifetime=lifetime)
        self.metadata = GCEMetadataServer(self.gcp, lifetime=lifetime)
        self._started: list[Any] = []

    def start(self) -> DevEnvironment:
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        try:
            self._started.append(self.control_plane.start())
            api = clients.Client(restconfig.load(str(self.control_plane.kubeconfig)))
            self.moto.start()
            self._started.append(self.moto)
            host, port = self.moto.get_host_and_port()
            self.moto_url = f"http://{host}:{port}"
            cluster_jwks = api.request("GET", "/openid/v1/jwks", accept="application/jwk-set+json")
            self._started.append(self.oidc.start())
            self.sts = STSProxy(self.moto_url, lifetime=self.lifetime).start()
            self._started.append(self.sts)
            self.iam = IAMProxy(self.moto_url, self.sts.keyring).start()
            self._started.append(self.iam)
            self.pod_identity = ContainerCredentials(
                self.moto_url,
                role_arn=CONTROLLER_ROLE,
                keyring=self.sts.keyring,
                lifetime=self.lifetime,
            ).start()
            self._started.append(self.pod_identity)
            self.pod_identity.write_token(self._pod_identity_token)
            self.sts.trust(self.oidc.issuer, self.oidc.jwks(), AUDIENCE)
            self.sts.trust(SERVICE_ACCOUNT_ISSUER, cluster_jwks, AUDIENCE)
            self._started.append(self.gcp.start())
            self.gcp.trust.add(self.oidc.issuer, self.oidc.jwks())
            self.gcp.trust.add(SERVICE_ACCOUNT_ISSUER, cluster_jwks)
            self._started.append(self.metadata.start())
            self._started.append(self.imds.start())
            tls, ca_file = tls_context(self._folder("azure-tls"))
            self.azure = AzureStandIn(tls, ca_file, lifetime=self.lifetime).start()
            self._started.append(self.azure)
            self.azure.trust.add(self.oidc.issuer, self.oidc.jwks())
            self.azure.trust.add(SERVICE_ACCOUNT_ISSUER, cluster_jwks)
            manifests.install_crds(api, self.config)
            self._wait_for_default_service_account(api)
            manifests.apply(api, self._samples(), namespace=NAMESPACE)
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for part in reversed(self._started):
            with contextlib.suppress(Exception):
                part.stop()
        self._started.clear()

    @property
    def kubeconfig(self) -> Path:
        return self.control_plane.kubeconfig

    def controller_env(self) -> dict[str, str]:
        """Where the controller finds the providers (boto3 reads the AWS ones itself)."""
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
            "ROTATOR_AZURE_AUTHORITY_HOST": self.azure.authority_host,
            "REQUESTS_CA_BUNDLE": str(self.azure.ca_file),
            # the controller's own identity, where botocore, azure-identity and google-auth look
            **self.pod_identity.environment(self._pod_identity_token),
            "AZURE_POD_IDENTITY_AUTHORITY_HOST": self.imds.authority_host,
            "GCE_METADATA_HOST": self.metadata.host,
            "GCE_METADATA_IP": self.metadata.host,
        }

    @property
    def _pod_identity_token(self) -> Path:
        return self._folder("eks-pod-identity") / "token"

    def _folder(self, name: str) -> Path:
        folder = self.control_plane.dir / name
        folder.mkdir(exist_ok=True)
        return folder

    @staticmethod
    def _wait_for_default_service_account(api: clients.Client) -> None:
        def exists() -> bool:
            try:
                api.get(objects.SERVICEACCOUNTS, "default", namespace=NAMESPACE)
            except errors.NotFound:
                return False
            return True

        manifests.wait(exists, what="the default ServiceAccount")

    def _samples(self) -> list[dict[str, Any]]:
        """config/samples, with what each names registered in the stand-ins."""
        docs = manifests.load(self.config / "samples")
        secrets: dict[str, dict[str, Any]] = {
            d["metadata"]["name"]: d for d in docs if d["kind"] == "Secret"
        }
        for doc in docs:
            if doc["kind"] == "BackendSecurityPolicy":
                self._register(doc["spec"], secrets)
        return docs

    def _register(self, spec: dict[str, Any], secrets: dict[str, dict[str, Any]]) -> None:
        if aws := spec.get("awsCredentials"):
            self._register_aws(aws, secrets)
        if gcp := spec.get("gcpCredentials"):
            self._register_gcp(gcp, secrets)
        if azure := spec.get("azureCredentials"):
            self._register_azure(azure, secrets)

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

    def _register_azure(self, azure: dict[str, Any], secrets: dict[str, dict[str, Any]]) -> None:
        assert self.azure is not None
        if (identity := azure.get("controllerIdentity")) is not None:
            if client := identity.get("clientID"):
                self.imds.user_assigned.add(client)
            return
        app = self.azure.apps.setdefault(azure["clientID"], App(azure["tenantID"]))
        if ref := azure.get("clientSecretRef"):
            app.secret = secrets[ref["name"]]["stringData"][ref.get("key", "client-secret")]
        if sa := azure.get("serviceAccountToken"):
            subject = f"system:serviceaccount:{NAMESPACE}:{sa['serviceAccountName']}"
            app.federated.add((SERVICE_ACCOUNT_ISSUER, subject))
        if exchange := azure.get("oidcExchangeToken"):
            client = self._oidc_client(exchange["oidc"], secrets)
            app.federated.add((self.oidc.issuer, client))

    def _oidc_client(self, oidc: dict[str, Any], secrets: dict[str, dict[str, Any]]) -> str:
        """Points the sample at the local issuer and registers its client there."""
        oidc["issuer"] = self.oidc.issuer
        ref = oidc["clientSecretRef"]
        secret = secrets[ref["name"]]["stringData"][ref.get("key", "client-secret")]
        self.oidc.register(oidc["clientID"], secret)
        return str(oidc["clientID"])
