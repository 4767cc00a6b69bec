#!/usr/bin/env bash
# Builds or finds the control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl) and prints, as its last line, the folder that holds them.
#
#   hack/testenv.sh [suite]  the suite's Kubernetes (make test): hack/controlplane/kubernetes
#   hack/testenv.sh oldest   the oldest supported (make test-oldest): hack/controlplane/kubernetes-oldest
# Without an argument, ROTATOR_KUBERNETES (suite or oldest) chooses, as it does for the e2e tests
# (tests/support/kubeversion.py: which version they expect the binaries and the server to report).
#
# - KUBEBUILDER_ASSETS set: use the binaries there, build nothing (controller-runtime's envtest
#   convention); fail clearly when one is missing. Not for `oldest`: that variable names the
#   suite's binaries, and the oldest version's subset must not run against them unnoticed.
# - Otherwise build them from the wrapper Go modules in hack/controlplane/ (versions pinned in their
#   go.mod files; etcd's module is the same for both) into
#   ${XDG_CACHE_HOME:-~/.cache}/rotator/controlplane/<key>/, keyed by the versions and the content
#   of the two wrapper modules used, so a second run builds nothing.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
binaries=(etcd kube-apiserver kube-controller-manager kubectl)
which=${1:-${ROTATOR_KUBERNETES:-suite}}
case "$which" in
  suite) kube_dir="$here/controlplane/kubernetes" ;;
  oldest) kube_dir="$here/controlplane/kubernetes-oldest" ;;
  *) echo "usage: hack/testenv.sh [suite|oldest]" >&2; exit 2 ;;
esac
etcd_dir="$here/controlplane/etcd"

if [[ $which == oldest && -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  echo "testenv: KUBEBUILDER_ASSETS is the suite's; the oldest version is built or found in the cache" >&2
elif [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  for b in etcd kube-apiserver kube-controller-manager; do
    if [[ ! -x "$KUBEBUILDER_ASSETS/$b" ]]; then
      echo "testenv: KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS has no executable '$b'" >&2
      echo "testenv: it must hold etcd, kube-apiserver and kube-controller-manager (unset it to build them with Go)" >&2
      exit 1
    fi
  done
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

required_version() { # <go.mod> <module>
  awk -v m="$2" '($1 == m && $2 ~ /^v/) || ($1 == "require" && $2 == m) { print ($1 == m ? $2 : $3); exit }' "$1"
}
kube_mod="$kube_dir/go.mod"
etcd_mod="$etcd_dir/go.mod"
kube_version=$(required_version "$kube_mod" k8s.io/kubernetes)
etcd_version=$(required_version "$etcd_mod" go.etcd.io/etcd/server/v3)
if [[ -z "$kube_version" || -z "$etcd_version" ]]; then
  echo "testenv: cannot read the pinned versions from $kube_mod and $etcd_mod" >&2
  exit 1
fi
# In this order (the order of the glob that named them before the oldest module existed), so that
# the suite's key, and so its cache, did not change when that module came.
content_hash=$(cat "$etcd_dir/go.mod" "$kube_dir/go.mod" "$etcd_dir/go.sum" "$kube_dir/go.sum" \
  "$etcd_dir"/*.go | sha256sum | cut -c1-12)
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rotator/controlplane"
dest="$cache_root/kubernetes-${kube_version}_etcd-${etcd_version}_${content_hash}"

complete=1
for b in "${binaries[@]}"; do [[ -x "$dest/$b" ]] || complete=0; done
if [[ $complete == 1 ]]; then
  echo "$dest"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "testenv: Go 1.26+ is needed to build the control plane (or set KUBEBUILDER_ASSETS)" >&2
  exit 1
fi

mkdir -p "$cache_root"
work=$(mktemp -d "$cache_root/.build.XXXXXX")
chmod 755 "$work"
trap 'rm -rf "$work"' EXIT
start=$(date +%s)

minor=${kube_version#v1.}; minor=${minor%%.*}
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done

echo "testenv: building kubernetes $kube_version and etcd $etcd_version into $dest (first run only; several minutes)" >&2
export CGO_ENABLED=0 GOFLAGS=-mod=readonly
(
  cd "$kube_dir"
  for b in kube-apiserver kube-controller-manager kubectl; do
    t=$(date +%s)
    go build -trimpath -ldflags "$kube_ldflags" -o "$work/$b" "k8s.io/kubernetes/cmd/$b"
    echo "testenv: $b in $(( $(date +%s) - t )) s" >&2
  done
)
t=$(date +%s)
(cd "$etcd_dir" && go build -trimpath -ldflags "-s -w" -o "$work/etcd" .)
echo "testenv: etcd in $(( $(date +%s) - t )) s" >&2

"$work/kube-apiserver" --version >&2
# sed, not head: head exits after one line, and under pipefail the SIGPIPE that etcd then gets
# when it writes its next (timing: on a busy machine) fails the build after it succeeded.
"$work/etcd" --version | sed -n 1p >&2
echo "testenv: built in $(( $(date +%s) - start )) s" >&2

rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest"
