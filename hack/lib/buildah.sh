# shellcheck shell=bash
# What hack/image.sh and hack/devkit-image.sh share: buildah with vfs storage under
# ${XDG_CACHE_HOME:-~/.cache}/rotator/image and chroot isolation (no daemon), the locally made base
# image, and writing a built image as a docker archive that kind loads.
#
# There is no image registry here, so the base image a Dockerfile names is made locally first: a
# Debian bookworm root filesystem with python3, venv and pip (mmdebstrap, from the Debian mirror
# apt uses), committed under that exact tag. RUN steps reach PyPI through the host.

lib_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
image_work="${XDG_CACHE_HOME:-$HOME/.cache}/rotator/image"

image_needs_tools() {
  local tool
  for tool in buildah mmdebstrap python3; do
    command -v "$tool" >/dev/null ||
      { echo "image: needs $tool (apt-get install buildah mmdebstrap)" >&2; exit 1; }
  done
  mkdir -p "$image_work"
}

# Temporary files of this run, removed on exit: image_cleanup is the EXIT trap the scripts set
# before anything is made (they add their own steps with image_on_exit).
image_exit_steps=()
image_on_exit() { image_exit_steps+=("$1"); }
image_cleanup() {
  local i
  for (( i=${#image_exit_steps[@]}-1; i>=0; i-- )); do eval "${image_exit_steps[i]}" || true; done
}

b() { buildah --root "$image_work/storage" --runroot "$image_work/run" --storage-driver vfs "$@"; }

# The base image a Dockerfile builds FROM: its ARG PYTHON_IMAGE default, or else its first FROM.
base_of() {
  local dockerfile=$1 base
  base=$(awk -F= '/^ARG PYTHON_IMAGE=/ {print $2; exit}' "$dockerfile")
  [[ -n $base ]] || base=$(awk '/^FROM / {print $2; exit}' "$dockerfile")
  [[ -n $base ]] || { echo "image: $dockerfile names no base image" >&2; exit 1; }
  echo "$base"
}

# Makes the base image (first run only). A lock, so that two builds started at once (the product
# and the dev kit) make it once.
ensure_base() {
  local base=$1 ctr mirror rootfs
  b inspect --type image "$base" >/dev/null 2>&1 && return 0
  (
    flock 9
    b inspect --type image "$base" >/dev/null 2>&1 && exit 0
    echo "image: making the base image $base with mmdebstrap (first run only)" >&2
    rootfs=$(mktemp "$image_work/rootfs.XXXXXX.tar")
    trap 'rm -f "$rootfs"' EXIT
    mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    mmdebstrap --variant=minbase --include=python3,python3-venv,python3-pip,ca-certificates \
      bookworm "$rootfs" ${mirror:+"$mirror"} >&2
    ctr=$(b from scratch)
    b add "$ctr" "$rootfs" / >/dev/null
    b config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd python3 "$ctr"
    b commit --rm "$ctr" "$base" >/dev/null
  ) 9>"$image_work/base.lock"
}

# The host's CA bundle for pip inside RUN steps, when it has one: sets the array build_ca_args.
build_ca_args=()
for ca in /etc/ssl/certs/ca-certificates.crt; do
  [[ -f $ca ]] && build_ca_args=(--volume "$ca:/run/host-ca.crt:ro" --build-arg PIP_CERT=/run/host-ca.crt)
done

# Writes image $1 to $2 as a docker archive (docker-archive, what `docker save` writes) tagged $1,
# with its `repositories` file first and then manifest.json (kind reads an archive best that way),
# and checks that manifest.json names the tag. Written beside $2 and renamed: never half a file.
write_archive() {
  local tag=$1 path=$2 raw
  mkdir -p "$(dirname "$path")"
  raw="$path.$$.raw"
  image_on_exit "rm -f '$raw' '$raw.tar'"
  rm -f "$raw" "$raw.tar"
  b push --quiet "$tag" "docker-archive:$raw:$tag" >/dev/null
  python3 "$lib_dir/dockerarchive.py" "$raw" "$raw.tar" "$tag"
  mv -f "$raw.tar" "$path"
  echo "image: wrote $tag to $path ($(du -h "$path" | cut -f1))" >&2
}
