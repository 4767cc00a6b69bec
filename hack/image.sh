#!/usr/bin/env bash
# Builds the controller image without a Docker daemon and proves it runs as its non-root user.
#
# buildah with vfs storage under ${XDG_CACHE_HOME:-~/.cache}/rotator/image and chroot isolation;
# the base image the Dockerfile names is made locally first (hack/lib/buildah.sh says how).
#
#   IMAGE=name      the tag (default localhost/rotator:dev)
#   ARCHIVE=path    also write the image there as a docker archive (what kind loads)
#   CONTEXT=dir     build that tree instead of this one: another checkout or a worktree of an
#                   earlier commit, with its own Dockerfile and sources
#
# Prints the tag last.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib/buildah.sh
source "$here/hack/lib/buildah.sh"
trap image_cleanup EXIT
image_needs_tools

src=$(cd "${CONTEXT:-$here}" && pwd)
[[ -f $src/Dockerfile ]] || { echo "image: no Dockerfile in $src" >&2; exit 1; }
tag=${IMAGE:-localhost/rotator:dev}
ensure_base "$(base_of "$src/Dockerfile")"

start=$(date +%s)
version=$(awk -F'"' '/^version = / {print $2; exit}' "$src/pyproject.toml")
revision=$(git -C "$src" rev-parse HEAD 2>/dev/null || true)
b build --pull=never --isolation chroot --layers=false "${build_ca_args[@]}" \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  -t "$tag" -f "$src/Dockerfile" "$src" >&2
echo "image: built $tag${revision:+ at ${revision:0:12}} from $src in $(( $(date +%s) - start )) s" >&2

ctr=$(b from "$tag")
image_on_exit "b rm '$ctr' >/dev/null"
version=$(b run --isolation chroot "$ctr" -- rotator --version)
uid=$(b run --isolation chroot "$ctr" -- id -u)
echo "image: $tag runs '$version' as uid $uid" >&2
[[ $version == rotator\ * ]] || { echo "image: unexpected version output: $version" >&2; exit 1; }
[[ $uid == 65532 ]] || { echo "image: runs as uid $uid, not 65532" >&2; exit 1; }

# The product only: its Python packages, and no dev kit (stand-ins, launcher, manifest tools).
# An earlier tree (CONTEXT) is built as it was: before the dev kit had a distribution of its own
# (commit 6ce5245) the product held it, which is reported, not refused.
devkit_found() {
  if [[ $src == "$here" ]]; then
    echo "image: $1" >&2; exit 1
  fi
  echo "image: note: $1 (as the tree in $src ships it)" >&2
}
packages=$(b run --isolation chroot "$ctr" -- python -c '
import pkgutil, sys
site = [p for p in sys.path if p.endswith("site-packages")]
print(" ".join(sorted(m.name for m in pkgutil.iter_modules(site))))')
echo "image: top-level Python packages: $packages" >&2
for forbidden in rotator_devkit moto; do  # (PyJWT is there: msal needs it)
  [[ " $packages " != *" $forbidden "* ]] || devkit_found "holds $forbidden (dev kit)"
done
[[ " $packages " == *" controllers "* && " $packages " == *" rotator "* ]] ||
  { echo "image: the product's packages are missing" >&2; exit 1; }
dev=$(b run --isolation chroot "$ctr" -- python -c '
import importlib.util
print(" ".join(m for m in ("controllers.devenv", "controllers.controlplane") if importlib.util.find_spec(m)))')
[[ -z $dev ]] || devkit_found "dev-kit modules in the product: $dev"

if [[ -n ${ARCHIVE:-} ]]; then
  write_archive "$tag" "$ARCHIVE"
fi
b rmi --prune >/dev/null 2>&1 || true  # earlier builds' layers: vfs keeps full copies
echo "$tag"
