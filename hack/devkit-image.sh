#!/usr/bin/env bash
# Builds the dev-kit image: the product plus the dev kit (moto[server], PyJWT, rotator_devkit, the
# LiteLLM proxy of its gateway extra) and config/samples, whose entry point runs the provider
# stand-ins in a test cluster (python -m rotator_devkit.incluster; tests/kind/test_litellm.py runs
# its `litellm` and `envoy` commands too). A test image, never the product; built like it
# (hack/lib/buildah.sh), FROM the same locally made base, never from a registry.
#
#   IMAGE=name      the tag (default localhost/rotator-devkit:dev)
#   ARCHIVE=path    also write the image there as a docker archive (what kind loads)
#
# pip's downloads are cached under ${XDG_CACHE_HOME:-~/.cache}/rotator/image/pip (a volume of the
# build), so a rebuild fetches nothing it fetched before. Prints the tag last.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=hack/lib/buildah.sh
source "$here/hack/lib/buildah.sh"
trap image_cleanup EXIT
image_needs_tools

dockerfile=$here/devkit/Dockerfile
tag=${IMAGE:-localhost/rotator-devkit:dev}
ensure_base "$(base_of "$dockerfile")"
mkdir -p "$image_work/pip"

start=$(date +%s)
version=$(awk -F'"' '/^version = / {print $2; exit}' "$here/pyproject.toml")
revision=$(git -C "$here" rev-parse HEAD 2>/dev/null || true)
b build --pull=never --isolation chroot --layers=false "${build_ca_args[@]}" \
  --volume "$image_work/pip:/root/.cache/pip" \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  --ignorefile "$here/devkit/Dockerfile.dockerignore" \
  -t "$tag" -f "$dockerfile" "$here" >&2
echo "image: built $tag in $(( $(date +%s) - start )) s" >&2

ctr=$(b from "$tag")
image_on_exit "b rm '$ctr' >/dev/null"
uid=$(b run --isolation chroot "$ctr" -- id -u)
[[ $uid == 65532 ]] || { echo "image: $tag runs as uid $uid, not 65532" >&2; exit 1; }
# The stand-ins' entry point, its dependencies and the samples it registers are all there.
b run --isolation chroot "$ctr" -- python -c '
import importlib.util, pathlib, sys
missing = [m for m in ("rotator", "controllers", "rotator_devkit.incluster.main", "moto.server", "jwt", "flask",
                       "litellm")
           if importlib.util.find_spec(m) is None]
missing += [c for c in ("/opt/rotator/bin/litellm", "/opt/rotator/bin/envoy") if not pathlib.Path(c).is_file()]
samples = pathlib.Path("/opt/rotator-devkit/samples/kustomization.yaml")
sys.exit(f"image: missing {missing or samples}" if missing or not samples.is_file() else 0)'
echo "image: $tag runs as uid $uid and holds the stand-ins' entry point, moto, litellm, envoy and the samples" >&2

if [[ -n ${ARCHIVE:-} ]]; then
  write_archive "$tag" "$ARCHIVE"
fi
b rmi --prune >/dev/null 2>&1 || true  # earlier builds' layers: vfs keeps full copies
echo "$tag"
