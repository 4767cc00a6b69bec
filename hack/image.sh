#!/usr/bin/env bash
# Builds the controller image without a Docker daemon and proves it runs as its non-root user.
#
# buildah with vfs storage under ${XDG_CACHE_HOME:-~/.cache}/rotator/image and chroot isolation.
# There is no image registry here, so the base image the Dockerfile names is made locally first:
# a Debian bookworm root filesystem with python3, venv and pip (mmdebstrap, from the Debian
# mirror apt uses), committed under that exact tag. RUN steps reach PyPI through the host.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
for tool in buildah mmdebstrap; do
  command -v "$tool" >/dev/null || { echo "image: needs $tool (apt-get install buildah mmdebstrap)" >&2; exit 1; }
done

base=$(awk -F= '/^ARG PYTHON_IMAGE=/ {print $2; exit}' "$here/Dockerfile")
tag=${IMAGE:-localhost/rotator:dev}
work="${XDG_CACHE_HOME:-$HOME/.cache}/rotator/image"
mkdir -p "$work"
b() { buildah --root "$work/storage" --runroot "$work/run" --storage-driver vfs "$@"; }

if ! b inspect --type image "$base" >/dev/null 2>&1; then
  echo "image: making the base image $base with mmdebstrap (first run only)" >&2
  mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
  mmdebstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
    bookworm "$work/rootfs.tar" ${mirror:+"$mirror"} >&2
  ctr=$(b from scratch)
  b add "$ctr" "$work/rootfs.tar" / >/dev/null
  b config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd python3 "$ctr"
  b commit --rm "$ctr" "$base" >/dev/null
  rm -f "$work/rootfs.tar"
fi

ca_args=()
for ca in /etc/ssl/certs/ca-certificates.crt; do
  [[ -f $ca ]] && ca_args=(--volume "$ca:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
done
start=$(date +%s)
version=$(awk -F'"' '/^version = / {print $2; exit}' "$here/pyproject.toml")
revision=$(git -C "$here" rev-parse HEAD 2>/dev/null || true)
b build --pull=never --isolation chroot --layers=false "${ca_args[@]}" \
  --build-arg VERSION="$version" --build-arg REVISION="$revision" \
  -t "$tag" -f "$here/Dockerfile" "$here" >&2
echo "image: built $tag in $(( $(date +%s) - start )) s" >&2

ctr=$(b from "$tag")
trap 'b rm "$ctr" >/dev/null' EXIT
version=$(b run --isolation chroot "$ctr" -- rotator --version)
uid=$(b run --isolation chroot "$ctr" -- id -u)
echo "image: $tag runs '$version' as uid $uid" >&2
[[ $version == rotator\ * ]] || { echo "image: unexpected version output: $version" >&2; exit 1; }
[[ $uid == 65532 ]] || { echo "image: runs as uid $uid, not 65532" >&2; exit 1; }
# The product only: its Python packages, and no dev kit (stand-ins, launcher, manifest tools).
packages=$(b run --isolation chroot "$ctr" -- python -c '
import pkgutil, sys
site = [p for p in sys.path if p.endswith("site-packages")]
print(" ".join(sorted(m.name for m in pkgutil.iter_modules(site))))')
echo "image: top-level Python packages: $packages" >&2
for forbidden in rotator_devkit moto; do  # (PyJWT is there: msal needs it)
  [[ " $packages " != *" $forbidden "* ]] || { echo "image: holds $forbidden (dev kit)" >&2; exit 1; }
done
[[ " $packages " == *" controllers "* && " $packages " == *" rotator "* ]] ||
  { echo "image: the product's packages are missing" >&2; exit 1; }
b run --isolation chroot "$ctr" -- python -c '
import importlib.util, sys
dev = [m for m in ("controllers.devenv", "controllers.controlplane") if importlib.util.find_spec(m)]
sys.exit(f"image: dev-kit modules in the product: {dev}" if dev else 0)'
b rmi --prune >/dev/null 2>&1 || true  # earlier builds' layers: vfs keeps full copies
echo "$tag"
