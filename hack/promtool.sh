#!/usr/bin/env bash
# Builds or finds promtool (Prometheus's rule checker and rule unit-test runner) and prints, as its
# last line, the path of the promtool binary.
#
# - PROMTOOL set: use that binary, build nothing (for a machine that already has promtool); fail
#   clearly when it is not executable.
# - Otherwise build it from the wrapper Go module in hack/promtool/ (the Prometheus module's version
#   pinned in its go.mod: v0.316.0 is Prometheus 3.16.0) into
#   ${XDG_CACHE_HOME:-~/.cache}/rotator/promtool/<key>/, keyed by the version and the wrapper
#   module's content, so a second run builds nothing. Nothing but Go modules is downloaded. Needs
#   Go 1.26.7+ (the go directive of hack/promtool/go.mod), used as installed (GOTOOLCHAIN=local).
# - Built with the tag remove_all_sd: Prometheus's service-discovery plugins (AWS, Azure, GCE,
#   Consul, ...; their SDKs are most of the build) are left out. promtool check rules, test rules
#   and the PromQL parser do not use them; `promtool check config` of a config that names one of
#   them would fail with this binary (rotator never runs it).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [[ -n "${PROMTOOL:-}" ]]; then
  if [[ ! -x "$PROMTOOL" ]]; then
    echo "promtool.sh: PROMTOOL=$PROMTOOL is not an executable (unset it to build promtool with Go)" >&2
    exit 1
  fi
  echo "$PROMTOOL"
  exit 0
fi

mod="$here/promtool/go.mod"
version=$(awk '($1 == "github.com/prometheus/prometheus" && $2 ~ /^v/) || ($1 == "require" && $2 == "github.com/prometheus/prometheus") { print ($1 == "require" ? $3 : $2); exit }' "$mod")
if [[ -z "$version" ]]; then
  echo "promtool.sh: cannot read the pinned github.com/prometheus/prometheus version from $mod" >&2
  exit 1
fi
content_hash=$(cat "$here/promtool/go.mod" "$here/promtool/go.sum" | sha256sum | cut -c1-12)
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rotator/promtool"
dest="$cache_root/promtool-${version}_${content_hash}"

if [[ -x "$dest/promtool" ]]; then
  echo "$dest/promtool"
  exit 0
fi

# The wrapper module's go directive (go 1.26.7) is the oldest Go that builds it. The build runs with
# GOTOOLCHAIN=local: an older local Go fails here, saying so, instead of Go's default
# GOTOOLCHAIN=auto fetching a newer toolchain (a download through the module proxy, which a
# machine without one cannot do, and which would fail with a less clear message).
need_go=$(awk '$1 == "go" { print $2; exit }' "$mod")
if ! command -v go >/dev/null 2>&1; then
  echo "promtool.sh: Go $need_go+ is needed to build promtool (or set PROMTOOL to a promtool binary)" >&2
  exit 1
fi
have_go=$(GOTOOLCHAIN=local go env GOVERSION)
have_go=${have_go#go}
if [[ "$(printf '%s\n%s\n' "$need_go" "$have_go" | sort -V | head -n1)" != "$need_go" ]]; then
  echo "promtool.sh: Go $need_go+ is needed to build promtool (hack/promtool/go.mod's go directive); $(command -v go) is Go $have_go. Install a newer Go, or set PROMTOOL to a promtool binary" >&2
  exit 1
fi

mkdir -p "$cache_root"
# Several pytest workers may ask at once: one builds, the others wait for it and then find it.
exec 9>"$cache_root/.lock"
flock 9
if [[ -x "$dest/promtool" ]]; then
  echo "$dest/promtool"
  exit 0
fi
work=""
trap '[[ -z "$work" ]] || rm -rf "$work"' EXIT
work=$(mktemp -d "$cache_root/.build.XXXXXX")
chmod 755 "$work"
start=$(date +%s)

# Prometheus's release build (promu) sets these: without them `promtool --version` says nothing.
# The module's v0.3MM.P is Prometheus 3.MM.P.
mm=${version#v0.3}; mm=${mm%%.*}
release="3.$((10#$mm)).${version##*.}"
ldflags="-s -w -X github.com/prometheus/common/version.Version=$release"
ldflags+=" -X github.com/prometheus/common/version.Revision=$version"
ldflags+=" -X github.com/prometheus/common/version.Branch=module"
ldflags+=" -X github.com/prometheus/common/version.BuildUser=rotator"
ldflags+=" -X github.com/prometheus/common/version.BuildDate=19700101-00:00:00"

echo "promtool.sh: building promtool $release ($version) into $dest (first run only; a few minutes)" >&2
(
  cd "$here/promtool"
  CGO_ENABLED=0 GOTOOLCHAIN=local GOFLAGS=-mod=readonly go build -trimpath -tags remove_all_sd -ldflags "$ldflags" \
    -o "$work/promtool" github.com/prometheus/prometheus/cmd/promtool
)
"$work/promtool" --version 2>&1 | sed -n 1p >&2
echo "promtool.sh: built in $(($(date +%s) - start)) s" >&2

rm -rf "$dest"
mv "$work" "$dest"
trap - EXIT
echo "$dest/promtool"
