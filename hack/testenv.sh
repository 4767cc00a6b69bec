#!/usr/bin/env bash
# Builds or finds the control-plane binaries (etcd, kube-apiserver, kube-controller-manager,
# kubectl) and prints, as its last line, the folder that holds them.
#
# - KUBEBUILDER_ASSETS set: use the binaries there, build nothing (controller-runtime's envtest
#   convention); fail clearly when one is missing.
# - Otherwise build them from the wrapper Go modules in hack/controlplane/ (versions pinned in their
#   go.mod files) into ${XDG_CACHE_HOME:-~/.cache}/rotator/controlplane/<key>/, keyed by the
#   versions and the wrapper modules' content, so a second run builds nothing.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
binaries=(etcd kube-apiserver kube-controller-manager kubectl)

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
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
kube_mod="$here/controlplane/kubernetes/go.mod"
etcd_mod="$here/controlplane/etcd/go.mod"
kube_version=$(required_version "$kube_mod" k8s.io/kubernetes)
etcd_version=$(required_version "$etcd_mod" go.etcd.io/etcd/server/v3)
if [[ -z "$kube_version" || -z "$etcd_version" ]]; then
  echo "testenv: cannot read the pinned versions from $kube_mod and $etcd_mod" >&2
  exit 1
fi
content_hash=$(cat "$here"/controlplane/*/go.mod "$here"/controlplane/*/go.sum "$here"/controlplane/etcd/*.go | sha256sum | cut -c1-12)
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
  cd "$here/controlplane/kubernetes"
  for b in kube-apiserver kube-controller-manager kubectl; do
    go build -trimpath -ldflags "$kube_ldflags" -o "$work/$b" "k8s.io/kubernetes/cmd/$b"
  done
)
(cd "$here/controlplane/etcd" && go build -trimpath -ldflags "-s -w" -o "$work/etcd" .)

"$work/kube-apiserver" --version >&2
# sed, not head: head exits after one line, and under pipefail the SIGPIPE that etcd then gets
# when it writes its next (timing: on a busy machine) fails the build after it succeeded.
"$work/etcd" --version | sed -n 1p >&2
echo "testenv: built in $(( $(date +%s) - start )) s" >&2

rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest"
