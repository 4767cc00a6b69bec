#!/usr/bin/env bash
# hack/kind/cluster.sh up|down|load ARCHIVE... — the kind cluster of the e2e-kind suite.
#
# up: creates cluster ${KIND_CLUSTER:-rotator-e2e} (one node, API server on 127.0.0.1) from the
#   node image hack/kind/node-image.sh prints (KIND_NODE_IMAGE: a published one), writes its
#   kubeconfig to $KIND_KUBECONFIG (required), waits for the node Ready and CoreDNS available, and
#   prints the seconds of each. The kind config is made for this machine (printed to stderr):
#   - kubelet 1.36 refuses cgroup v1 unless told: `failCgroupV1: false`, only on a cgroup v1 host;
#   - where the capability bounding set lacks CAP_SYS_RESOURCE, runc in the node cannot write
#     /proc/self/oom_score_adj: containerd's `restrict_oom_score_adj = true`, only then;
#   - a node image built here has no kindnetd but a ptp + host-local CNI config baked in (its
#     label dev.rotator.kind.cni says so): `disableDefaultCNI: true`, only then.
#   On an ordinary host with a published image, the config is kind's own.
#   An existing cluster of that name is never taken over: up fails (exit 3) and leaves it.
# down: deletes the cluster (and its context in $KIND_KUBECONFIG; the file stays).
# exists: exit 0 when the cluster exists.
# load ARCHIVE...: loads docker archives into the node (`kind load image-archive`); nothing is
#   pulled, so Pods must name the images with a tag and imagePullPolicy IfNotPresent or Never.
# kind itself is built from the Go module pinned in hack/kind/tools/kind into the cache's bin/.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cluster=${KIND_CLUSTER:-rotator-e2e}
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rotator/kind"

kind_bin() { # prints the path of the pinned kind, building it once
  local version out
  version=$(awk '$1 == "sigs.k8s.io/kind" {print $2; exit} $1 == "require" && $2 == "sigs.k8s.io/kind" {print $3; exit}' "$here/tools/kind/go.mod")
  out=$cache_root/bin/kind-$version
  if [[ ! -x $out ]]; then
    mkdir -p "$cache_root/bin"
    (cd "$here/tools/kind" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "-s -w" -o "$out.tmp" sigs.k8s.io/kind) >&2
    mv "$out.tmp" "$out"
  fi
  echo "$out"
}

kubectl_bin() { # a kubectl: $KUBECTL, the one on PATH, or the control plane's (hack/testenv.sh)
  if [[ -n ${KUBECTL:-} ]]; then echo "$KUBECTL"
  elif command -v kubectl >/dev/null; then command -v kubectl
  else echo "$("$here/../testenv.sh" | tail -n 1)/kubectl"
  fi
}

sys_resource_missing() {
  local bnd
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  [[ -n $bnd ]] && (( (16#$bnd >> 24 & 1) == 0 ))
}

kind_config() { # <node image>
  local cni
  cni=$(docker image inspect -f '{{index .Config.Labels "dev.rotator.kind.cni"}}' "$1" 2>/dev/null || true)
  cat <<EOF
kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  apiServerAddress: 127.0.0.1
EOF
  if [[ -n $cni && $cni != "<no value>" ]]; then
    echo "  # the node image has no kindnetd; its CNI config ($cni) is baked in"
    echo "  disableDefaultCNI: true"
    echo "  podSubnet: 10.244.0.0/16"
  fi
  echo "nodes:"
  echo "  - role: control-plane"
  if [[ $(stat -fc %T /sys/fs/cgroup) != cgroup2fs ]]; then
    cat <<EOF
kubeadmConfigPatches:
  # a cgroup v1 host: kubelet 1.36 runs on it only when told to
  - |
    kind: KubeletConfiguration
    failCgroupV1: false
EOF
  fi
  if sys_resource_missing; then
    cat <<EOF
containerdConfigPatches:
  # CAP_SYS_RESOURCE is not in this machine's bounding set: runc cannot raise oom_score_adj
  - |
    [plugins."io.containerd.grpc.v1.cri"]
      restrict_oom_score_adj = true
EOF
  fi
}

up() {
  : "${KIND_KUBECONFIG:?cluster.sh up: set KIND_KUBECONFIG to the path the kubeconfig is written to}"
  local kind kubectl image config t0 t
  kind=$(kind_bin)
  if exists; then
    echo "cluster: a kind cluster $cluster exists already (kept by KIND_KEEP=1, or someone else's):" \
      "delete it (hack/kind/cluster.sh down) or choose another KIND_CLUSTER" >&2
    exit 3
  fi
  kubectl=$(kubectl_bin)
  image=$("$here/node-image.sh" | tail -n 1)
  mkdir -p "${XDG_CACHE_HOME:-$HOME/.cache}/rotator/kind"
  config=$(kind_config "$image")
  echo "cluster: kind config:" >&2
  sed 's/^/  | /' <<<"$config" >&2
  t0=$SECONDS
  "$kind" create cluster --name "$cluster" --image "$image" --kubeconfig "$KIND_KUBECONFIG" \
    --config - <<<"$config" >&2
  echo "cluster: $cluster created in $((SECONDS - t0)) s" >&2
  t=$SECONDS
  "$kubectl" --kubeconfig "$KIND_KUBECONFIG" wait --for=condition=Ready node --all --timeout=180s >&2
  echo "cluster: node Ready $((SECONDS - t)) s after create ($((SECONDS - t0)) s in all)" >&2
  t=$SECONDS
  "$kubectl" --kubeconfig "$KIND_KUBECONFIG" -n kube-system rollout status deployment/coredns --timeout=240s >&2
  echo "cluster: CoreDNS available $((SECONDS - t)) s after the node was Ready ($((SECONDS - t0)) s in all)" >&2
}

down() {
  local kind
  kind=$(kind_bin)
  # kind removes the cluster's context from $KIND_KUBECONFIG and leaves the file: it may be a
  # user's own (~/.kube/config) that kind merged into. The runner removes a file it made.
  if exists; then
    "$kind" delete cluster --name "$cluster" ${KIND_KUBECONFIG:+--kubeconfig "$KIND_KUBECONFIG"} >&2
  else
    echo "cluster: no kind cluster $cluster; nothing deleted" >&2
  fi
}

exists() { "$(kind_bin)" get clusters 2>/dev/null | grep -qx "$cluster"; }

load() {
  (( $# > 0 )) || { echo "usage: $0 load ARCHIVE..." >&2; exit 2; }
  local kind t
  kind=$(kind_bin)
  for archive in "$@"; do
    t=$SECONDS
    "$kind" load image-archive --name "$cluster" "$archive" >&2
    echo "cluster: loaded $archive in $((SECONDS - t)) s" >&2
  done
}

case ${1:-} in
  up) up ;;
  down) down ;;
  load) shift; load "$@" ;;
  exists) exists ;;
  *) echo "usage: $0 up|down|load ARCHIVE...|exists" >&2; exit 2 ;;
esac
