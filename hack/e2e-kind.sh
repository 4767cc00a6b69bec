#!/usr/bin/env bash
# make e2e-kind: the end-to-end suite against a kind cluster, for machines with Docker and kind
# (CI here has no Docker engine, so this does not run in CI).
#
# 1. create a kind cluster; 2. build the image and load it; 3. deploy config/default and wait for
# the rollout (proves the image, the manifests and the RBAC in a real cluster); 4. scale the
# Deployment to zero and run the suite through the cluster's kubeconfig: the suite starts its own
# controller process (it restarts it and reads its metrics) and the stand-ins (moto, the OIDC
# issuer, the token services) on this host. Tests that need the local control plane itself
# (its etcd, audit log or binaries) are skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
cluster=${KIND_CLUSTER:-rotator-e2e}
image=rotator:e2e
for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { echo "e2e-kind: needs $tool" >&2; exit 1; }
done
kubeconfig=$(mktemp)
kind create cluster --name "$cluster" --wait 180s
trap 'kind delete cluster --name "$cluster"; rm -f "$kubeconfig"' EXIT
kind get kubeconfig --name "$cluster" >"$kubeconfig"
docker build -t "$image" .
kind load docker-image "$image" --name "$cluster"
kubectl kustomize config/default | sed "s#image: rotator:latest#image: $image#" |
  kubectl --kubeconfig "$kubeconfig" apply --server-side -f -
kubectl --kubeconfig "$kubeconfig" -n rotator-system rollout status deployment/rotator-controller-manager --timeout=180s
kubectl --kubeconfig "$kubeconfig" -n rotator-system scale deployment/rotator-controller-manager --replicas=0
kubectl --kubeconfig "$kubeconfig" -n rotator-system wait --for=delete pod \
  -l app.kubernetes.io/name=rotator,app.kubernetes.io/component=controller --timeout=120s
ROTATOR_E2E_KUBECONFIG="$kubeconfig" .venv/bin/pytest tests/e2e "$@"
