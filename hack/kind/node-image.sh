#!/usr/bin/env bash
# hack/kind/node-image.sh — prints, as its last line, the kind node image to use.
#
# - KIND_NODE_IMAGE set (e.g. kindest/node:v1.36.3@sha256:...): that published image, as it is;
#   nothing is built (an ordinary Docker host that can pull).
# - Otherwise the node image is built here, once, from Go modules and Debian packages only (no
#   container registry is needed), and cached in ${XDG_CACHE_HOME:-~/.cache}/rotator/kind/<key>/,
#   keyed by the pinned versions and the content of the files that make it (this script,
#   hack/kind/tools/*/go.{mod,sum}, hack/kind/node/, hack/kind/archive.py, hack/controlplane/etcd).
#   A later run finds the image in Docker, or `docker load`s the cached archive into a fresh dockerd.
#
# What the built image holds (versions: hack/kind/tools/*/go.mod, the same as kind v0.33.0's
# kindest/base where kind pins one):
# - a base image made with mmdebstrap (Debian bookworm, the apt mirror this machine uses) plus
#   kind's own base-image files (images/base/files of the sigs.k8s.io/kind module), containerd 2,
#   runc (cgo, seccomp), crictl, the CNI plugins ptp, host-local, loopback, portmap, and a ptp +
#   host-local CNI config (hack/kind/node/10-rotator-ptp.conflist): kindnetd's module is not served;
# - kubeadm, kubelet, kubectl and the images of kube-apiserver, kube-controller-manager,
#   kube-scheduler, kube-proxy from the k8s.io/kubernetes module pinned in
#   hack/kind/tools/kubernetes (the same version and replace block as hack/controlplane/kubernetes,
#   so the Go build cache is shared), etcd from hack/controlplane/etcd, coredns, pause (gcc -static
#   from the C source in the k8s.io/kubernetes module), each tagged exactly as kubeadm lists it;
# - placeholders (the pause binary) under the names of kindnetd, local-path-provisioner and
#   local-path-helper, which `kind build node-image` insists on; their manifests in the node are
#   replaced by a ConfigMap that says so (hack/kind/node/no-default-addon.yaml): no kindnetd (the
#   cluster config sets disableDefaultCNI) and no default StorageClass.
# Needs: root, a Docker engine (hack/kind/docker.sh start), Go 1.26, gcc, mmdebstrap, python3.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)

if [[ -n "${KIND_NODE_IMAGE:-}" ]]; then
  echo "node-image: using KIND_NODE_IMAGE=$KIND_NODE_IMAGE as it is" >&2
  echo "$KIND_NODE_IMAGE"
  exit 0
fi

required_version() { # <go.mod> <module>
  awk -v m="$2" '($1 == m && $2 ~ /^v/) || ($1 == "require" && $2 == m) { print ($1 == m ? $2 : $3); exit }' "$1"
}
tools=$here/tools
kube_version=$(required_version "$tools/kubernetes/go.mod" k8s.io/kubernetes)
kind_version=$(required_version "$tools/kind/go.mod" sigs.k8s.io/kind)
containerd_version=$(required_version "$tools/containerd/go.mod" github.com/containerd/containerd/v2)
runc_version=$(required_version "$tools/runc/go.mod" github.com/opencontainers/runc)
crictl_version=$(required_version "$tools/crictl/go.mod" sigs.k8s.io/cri-tools)
cni_version=$(required_version "$tools/cni/go.mod" github.com/containernetworking/plugins)
coredns_version=$(required_version "$tools/coredns/go.mod" github.com/coredns/coredns)
for v in kube_version kind_version containerd_version runc_version crictl_version cni_version coredns_version; do
  [[ -n ${!v} ]] || { echo "node-image: cannot read $v from hack/kind/tools/*/go.mod" >&2; exit 1; }
done
content_hash=$(cat "${BASH_SOURCE[0]}" "$here/archive.py" "$tools"/*/go.mod "$tools"/*/go.sum \
  "$here"/node/* "$repo"/hack/controlplane/etcd/go.* "$repo"/hack/controlplane/etcd/*.go | sha256sum | cut -c1-12)
key="kubernetes-${kube_version}_kind-${kind_version}_${content_hash}"
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rotator/kind"
dest=$cache_root/$key
image="localhost/rotator-kind-node:${kube_version}-${content_hash}"
archive=$dest/node-image.tar

command -v docker >/dev/null || { echo "node-image: needs docker (hack/kind/docker.sh start)" >&2; exit 1; }
t0=$SECONDS
if docker image inspect "$image" >/dev/null 2>&1; then
  echo "node-image: $image is in Docker already (warm: $((SECONDS - t0)) s)" >&2
  echo "$image"
  exit 0
fi
if [[ -f $archive ]]; then
  docker load -q -i "$archive" >&2
  echo "node-image: loaded $image from $archive (warm: $((SECONDS - t0)) s)" >&2
  echo "$image"
  exit 0
fi

for tool in go gcc mmdebstrap python3 jq pkg-config; do
  command -v "$tool" >/dev/null || { echo "node-image: building the node image needs $tool" >&2; exit 1; }
done
[[ $(id -u) == 0 ]] || { echo "node-image: building the node image needs root (mmdebstrap, docker)" >&2; exit 1; }

# One build at a time (a second caller waits, then finds the image).
mkdir -p "$cache_root/bin"
exec 9>"$cache_root/.build.lock"
if ! flock -n 9; then
  echo "node-image: another build is running; waiting for it" >&2
  flock 9
fi
if docker image inspect "$image" >/dev/null 2>&1 || [[ -f $archive ]]; then
  exec 9>&-
  exec "${BASH_SOURCE[0]}"
fi

# The build folder stays after a failure, so that a second run redoes only the steps not done.
work=$cache_root/$key.build
mkdir -p "$work"/{bin,logs,images}
logs=$work/logs
step() { # <name> <command...>: runs once (a marker file records success); its output to a log
  local name=$1; shift
  [[ -f $work/.done-$name ]] && return 0
  local t=$SECONDS
  # in the background, so that errexit holds inside the step (it is off in an `if` condition)
  "$@" >"$logs/$name.log" 2>&1 &
  if ! wait $!; then
    echo "node-image: step $name failed; last lines of $logs/$name.log:" >&2
    tail -n 30 "$logs/$name.log" >&2
    return 1
  fi
  touch "$work/.done-$name"
  echo "node-image: $name done in $((SECONDS - t)) s" >&2
}
echo "node-image: building $image (first run only; about 10-15 min on 2 cores) in $work" >&2

mirror=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
base_packages=systemd,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,fuse-overlayfs,bash,ca-certificates,curl,jq,procps
proxy_packages=iptables,conntrack,nftables,ipset,kmod

debootstrap() { # <dir> <packages>
  rm -rf "$1"
  mmdebstrap --variant=minbase --include="$2" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/apt/* "$1"/usr/share/doc/* "$1"/usr/share/man/*' \
    bookworm "$1" ${mirror:+"$mirror"}
}

# The Debian root filesystems download while Go compiles.
base_root=$work/base-root
proxy_root=$work/proxy-root
( step rootfs-base debootstrap "$base_root" "$base_packages" && step rootfs-proxy debootstrap "$proxy_root" "$proxy_packages" ) &
rootfs_pid=$!
trap 'kill "$rootfs_pid" 2>/dev/null || true' EXIT

minor=${kube_version#v1.}; minor=${minor%%.*}
kube_ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  kube_ldflags+=" -X $pkg.gitVersion=$kube_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
  kube_ldflags+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
export GOFLAGS=-mod=readonly
gobuild() { # <module dir> <cgo> <go build args...>
  local dir=$1 cgo=$2; shift 2
  (cd "$dir" && CGO_ENABLED=$cgo go build -trimpath "$@")
}
b=$work/bin
step go-kubernetes gobuild "$tools/kubernetes" 0 -ldflags "$kube_ldflags" -o "$b/" \
  k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubectl \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kube-proxy
step go-etcd gobuild "$repo/hack/controlplane/etcd" 0 -ldflags "-s -w" -o "$b/etcd" .
step go-containerd gobuild "$tools/containerd" 0 -tags "no_aufs no_zfs no_btrfs no_devmapper" \
  -ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=${containerd_version#v}" -o "$b/" \
  github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2
step go-runc gobuild "$tools/runc" 1 -tags seccomp -ldflags "-s -w -X main.version=${runc_version#v}" \
  -o "$b/runc" github.com/opencontainers/runc
step go-crictl gobuild "$tools/crictl" 0 -ldflags "-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$crictl_version" \
  -o "$b/crictl" sigs.k8s.io/cri-tools/cmd/crictl
step go-cni gobuild "$tools/cni" 0 -ldflags "-s -w" -o "$b/" \
  github.com/containernetworking/plugins/plugins/main/ptp github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/main/loopback github.com/containernetworking/plugins/plugins/meta/portmap
step go-coredns gobuild "$tools/coredns" 0 -ldflags "-s -w" -o "$b/coredns" github.com/coredns/coredns
kind_bin=$cache_root/bin/kind-$kind_version
[[ -x $kind_bin ]] || step go-kind gobuild "$tools/kind" 0 -ldflags "-s -w" -o "$kind_bin" sigs.k8s.io/kind
kube_dir=$(cd "$tools/kubernetes" && go list -m -f '{{.Dir}}' k8s.io/kubernetes)
kind_dir=$(cd "$tools/kind" && go list -m -f '{{.Dir}}' sigs.k8s.io/kind)
pause_version=$(awk -F'"' '/PauseVersion *=/ {print $2; exit}' "$kube_dir/cmd/kubeadm/app/constants/constants.go")
step pause gcc -Os -Wall -Werror -static -DVERSION="v${pause_version}" -o "$b/pause" "$kube_dir/build/pause/linux/pause.c"

if ! wait "$rootfs_pid"; then
  echo "node-image: the Debian root filesystems could not be made" >&2
  exit 1
fi
trap - EXIT

# --- the base image: Debian + kind's base-image files + the runtime, as kind's Dockerfile does it
assemble_base() {
  local r=$base_root f=$kind_dir/images/base/files
  install -m 0755 "$f"/usr/local/bin/* "$r/usr/local/bin/"
  mkdir -p "$r/kind" "$r/LICENSES"
  cp -r "$f"/kind/. "$r/kind/"
  chmod -R u=rwX,go=rX "$r/kind"
  chmod 0755 "$r"/kind/bin/*
  mkdir -p "$r/etc/containerd" "$r/etc/default" "$r/etc/sysctl.d" "$r/etc/systemd/system/kubelet.service.d"
  install -m 0644 "$f/etc/crictl.yaml" "$r/etc/"
  install -m 0644 "$f"/etc/containerd/* "$r/etc/containerd/"
  install -m 0644 "$f"/etc/default/* "$r/etc/default/"
  install -m 0644 "$f"/etc/sysctl.d/* "$r/etc/sysctl.d/"
  find "$f/etc/systemd/system" -maxdepth 1 -type f -exec install -m 0644 {} "$r/etc/systemd/system/" \;
  install -m 0644 "$f"/etc/systemd/system/kubelet.service.d/* "$r/etc/systemd/system/kubelet.service.d/"
  find "$r/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
  rm -f "$r"/lib/systemd/system/multi-user.target.wants/* "$r"/etc/systemd/system/*.wants/* \
    "$r"/lib/systemd/system/local-fs.target.wants/* "$r"/lib/systemd/system/sockets.target.wants/*udev* \
    "$r"/lib/systemd/system/sockets.target.wants/*initctl* "$r"/lib/systemd/system/basic.target.wants/*
  echo "ReadKMsg=no" >>"$r/etc/systemd/journald.conf"
  ln -sf /usr/lib/systemd/systemd "$r/sbin/init"
  chroot "$r" systemctl enable kubelet.service containerd.service undo-mount-hacks.service
  chroot "$r" systemctl mask systemd-binfmt.service
  mkdir -p "$r/etc/kubernetes/manifests" "$r/opt/cni/bin" "$r/etc/cni/net.d"
  install -m 0755 "$b/containerd" "$b/ctr" "$b/containerd-shim-runc-v2" "$b/crictl" "$r/usr/local/bin/"
  install -m 0755 "$b/runc" "$r/usr/local/sbin/runc"
  install -m 0755 "$b/ptp" "$b/host-local" "$b/loopback" "$b/portmap" "$r/opt/cni/bin/"
  install -m 0644 "$here/node/10-rotator-ptp.conflist" "$r/etc/cni/net.d/"
  # the runtime spec template: `ctr oci spec` with kind's mount hook and no rlimits
  "$b/ctr" oci spec | jq '.hooks.createContainer[.hooks.createContainer| length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' |
    jq 'del(.process.rlimits)' >"$r/etc/containerd/cri-base.json"
  chroot "$r" /usr/local/sbin/runc --version
  chroot "$r" /usr/local/bin/containerd --version
  tar -C "$r" --numeric-owner -cf "$work/base.tar" .
  docker import "$work/base.tar" "$base_image-rootfs"
  rm -f "$work/base.tar"
  # the metadata of kind's base image (`docker import` cannot set STOPSIGNAL); nothing is pulled
  DOCKER_BUILDKIT=0 docker build -q -t "$base_image" - <<EOF
FROM $base_image-rootfs
ENV container=docker
STOPSIGNAL SIGRTMIN+3
LABEL dev.rotator.kind.cni=10-rotator-ptp.conflist
ENTRYPOINT [ "/usr/local/bin/entrypoint", "/sbin/init" ]
EOF
  docker rmi "$base_image-rootfs"
}
base_image="localhost/rotator-kind-base:${kube_version}-${content_hash}"
if [[ -f $work/.done-base-image ]] && ! docker image inspect "$base_image" >/dev/null 2>&1; then
  rm -f "$work/.done-base-image"  # a fresh dockerd
fi
step base-image assemble_base

# --- the images kind and kubeadm need, tagged as kubeadm lists them
mkimage() { # <tag> <root dir> <docker import --change...>: a one-layer image of a folder
  local tag=$1 root=$2; shift 2
  local changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin')
  for c in "$@"; do changes+=(--change "$c"); done
  tar -C "$root" --numeric-owner -c . | docker import "${changes[@]}" - "$tag"
}
binroot() { # <dir> <binary...>: a folder with the binaries in usr/local/bin
  local dir=$1; shift
  rm -rf "$dir"; mkdir -p "$dir/usr/local/bin" "$dir/tmp" "$dir/etc"
  chmod 1777 "$dir/tmp"
  for f in "$@"; do install -m 0755 "$b/$f" "$dir/usr/local/bin/"; done
  echo 'root:x:0:0:root:/root:/sbin/nologin' >"$dir/etc/passwd"
  echo 'root:x:0:' >"$dir/etc/group"
}
save() { # <archive> <image...>: one docker archive, rewritten for kind (archive.py)
  local out=$1; shift
  docker save -o "$out.raw" "$@"
  python3 "$here/archive.py" "$out.raw" "$out"
  rm -f "$out.raw"
}
build_images() {
  local i=$work/images tarball=$work/tarball
  rm -rf "$tarball"; mkdir -p "$tarball/kubernetes/server/bin"
  local sb=$tarball/kubernetes/server/bin
  local listed etcd_image coredns_image pause_images
  listed=$("$b/kubeadm" config images list --kubernetes-version "$kube_version")
  etcd_image=$(grep '/etcd:' <<<"$listed")
  coredns_image=$(grep '/coredns:' <<<"$listed")
  # kubeadm's pause and the one kind's containerd config names as its sandbox image
  pause_images="$(grep '/pause:' <<<"$listed") $(awk -F'"' '/sandbox_image/ {print $2}' "$kind_dir/images/base/files/etc/containerd/config.toml")"
  for c in kube-apiserver kube-controller-manager kube-scheduler; do
    binroot "$i/$c" "$c"
    mkimage "registry.k8s.io/$c:$kube_version" "$i/$c"
    save "$sb/$c.tar" "registry.k8s.io/$c:$kube_version"
  done
  # kube-proxy: a Debian root with iptables, and a wrapper that picks the node's iptables backend
  install -m 0755 "$b/kube-proxy" "$proxy_root/usr/local/bin/kube-proxy"
  install -m 0755 "$here/node/iptables-wrapper" "$proxy_root/usr/sbin/iptables-wrapper"
  for cmd in iptables iptables-save iptables-restore ip6tables ip6tables-save ip6tables-restore; do
    ln -sf iptables-wrapper "$proxy_root/usr/sbin/$cmd"
  done
  mkimage "registry.k8s.io/kube-proxy:$kube_version" "$proxy_root"
  binroot "$i/etcd" etcd
  mkdir -p "$i/etcd/var/lib/etcd"
  mkimage "$etcd_image" "$i/etcd" 'LABEL org.opencontainers.image.version=etcd-from-hack/controlplane/etcd'
  binroot "$i/coredns" coredns
  mv "$i/coredns/usr/local/bin/coredns" "$i/coredns/coredns"
  mkimage "$coredns_image" "$i/coredns" 'ENTRYPOINT ["/coredns"]'
  binroot "$i/pause" pause
  mv "$i/pause/usr/local/bin/pause" "$i/pause/pause"
  local first others=() p
  for p in $pause_images; do
    if [[ -z ${first:-} ]]; then first=$p; mkimage "$p" "$i/pause" 'ENTRYPOINT ["/pause"]' 'USER 65535:65535'
    else docker tag "$first" "$p"; others+=("$p"); fi
  done
  # placeholders for what cannot be built here (see the header); never run
  local placeholders
  placeholders=$(grep -ho 'docker.io/kindest/[a-z-]*:[A-Za-z0-9._-]*' "$kind_dir"/pkg/build/nodeimage/const_*.go | sort -u)
  for p in $placeholders; do
    docker tag "$first" "$p"
  done
  # the four archives kind reads; the other images ride in kube-proxy's (repositories file first)
  # shellcheck disable=SC2086
  save "$sb/kube-proxy.tar" "registry.k8s.io/kube-proxy:$kube_version" "$etcd_image" "$coredns_image" \
    $pause_images $placeholders
  install -m 0755 "$b/kubeadm" "$b/kubelet" "$b/kubectl" "$sb/"
  echo "$kube_version" >"$tarball/kubernetes/version"
  tar -C "$tarball" -c kubernetes | gzip -1 >"$work/kubernetes-server-linux-amd64.tar.gz"
  rm -rf "$tarball" "$i"
  # the archives hold them now; kind imports them into the node from there
  # shellcheck disable=SC2086
  docker rmi "registry.k8s.io/kube-apiserver:$kube_version" "registry.k8s.io/kube-controller-manager:$kube_version" \
    "registry.k8s.io/kube-scheduler:$kube_version" "registry.k8s.io/kube-proxy:$kube_version" \
    "$etcd_image" "$coredns_image" $pause_images $placeholders >/dev/null
}
step images build_images

node_image() {
  local raw="$image-raw" ctr
  "$kind_bin" build node-image --type file --base-image "$base_image" --image "$raw" \
    "$work/kubernetes-server-linux-amd64.tar.gz"
  # kindnetd and local-path-provisioner are placeholders: their manifests become a ConfigMap
  ctr=$(docker create "$raw")
  docker cp "$here/node/no-default-addon.yaml" "$ctr:/kind/manifests/default-cni.yaml"
  docker cp "$here/node/no-default-addon.yaml" "$ctr:/kind/manifests/default-storage.yaml"
  docker commit "$ctr" "$image"
  docker rm "$ctr"
  docker rmi "$raw"
  docker save -o "$work/node-image.tar" "$image"
}
step node-image node_image

mv "$work/node-image.tar" "$work/node-image.tar.tmp"
rm -rf "$dest"; mkdir -p "$dest"
mv "$work/node-image.tar.tmp" "$archive"
cp "$work/kubernetes-server-linux-amd64.tar.gz" "$dest/"
rm -rf "$work"
docker rmi "$base_image" >/dev/null 2>&1 || true
echo "node-image: built $image in $((SECONDS - t0)) s (cold); archive $archive ($(du -h "$archive" | cut -f1))" >&2
echo "$image"
