#!/usr/bin/env bash
# Builds or finds Helm and prints, as its last line, the path of the helm binary.
#
# - HELM set: use that binary, build nothing (for a machine that already has Helm); fail clearly
#   when it is not executable.
# - Otherwise build it from the wrapper Go module in hack/helm/ (the version pinned in its go.mod)
#   into ${XDG_CACHE_HOME:-~/.cache}/rotator/helm/<key>/, keyed by the version and the wrapper
#   module's content, so a second run builds nothing. Nothing but Go modules is downloaded: no
#   release binary, no plugin, no chart repository.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ -n "${HELM:-}" ]]; then
  if [[ ! -x "$HELM" ]]; then
    echo "helm.sh: HELM=$HELM is not an executable (unset it to build Helm with Go)" >&2
    exit 1
  fi
  echo "$HELM"
  exit 0
fi

mod="$here/helm/go.mod"
version=$(awk '$1 == "helm.sh/helm/v3" && $2 ~ /^v/ { print $2; exit }' "$mod")
if [[ -z "$version" ]]; then
  echo "helm.sh: cannot read the pinned helm.sh/helm/v3 version from $mod" >&2
  exit 1
fi
content_hash=$(cat "$here/helm/go.mod" "$here/helm/go.sum" | sha256sum | cut -c1-12)
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rotator/helm"
dest="$cache_root/helm-${version}_${content_hash}"

if [[ -x "$dest/helm" ]]; then
  echo "$dest/helm"
  exit 0
fi

if ! command -v go >/dev/null 2>&1; then
  echo "helm.sh: Go 1.26+ is needed to build Helm (or set HELM to a helm binary)" >&2
  exit 1
fi

mkdir -p "$cache_root"
# Several pytest workers may ask at once: one builds, the others wait for it and then find it.
exec 9>"$cache_root/.lock"
flock 9
if [[ -x "$dest/helm" ]]; then
  echo "$dest/helm"
  exit 0
fi
work=""
trap '[[ -z "$work" ]] || rm -rf "$work"' EXIT
work=$(mktemp -d "$cache_root/.build.XXXXXX")
chmod 755 "$work"
start=$(date +%s)

# Helm's own release build sets these variables (its Makefile's LDFLAGS): its version, and the
# Kubernetes version that `helm template` and `helm lint` assume (that of its client-go: v0.37 is
# Kubernetes 1.37); without them Helm says v3.22 with no patch and assumes Kubernetes 1.20.
client_go=$(awk '$1 == "k8s.io/client-go" && $2 ~ /^v0\./ { print $2; exit }' "$mod")
k8s_minor=${client_go#v0.}; k8s_minor=${k8s_minor%%.*}
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$version"
ldflags+=" -X helm.sh/helm/v3/internal/version.metadata= -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
  ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$k8s_minor"
done

echo "helm.sh: building helm $version into $dest (first run only; a minute or two)" >&2
(
  cd "$here/helm"
  CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -ldflags "$ldflags" -o "$work/helm" helm.sh/helm/v3/cmd/helm
)
"$work/helm" version --short >&2
echo "helm.sh: built in $(($(date +%s) - start)) s" >&2

rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest/helm"
