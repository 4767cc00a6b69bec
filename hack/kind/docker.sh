#!/usr/bin/env bash
# hack/kind/docker.sh start|stop|status — makes sure a Docker engine answers, for kind.
#
# start: when an engine already answers, change nothing and print "running". Otherwise, as root
#   with Debian's dockerd installed (there is no service manager here), start dockerd in the
#   background with its pid file and log under $KIND_STATE (default /run/rotator-kind), wait until
#   it answers, and print "started". Where the capability bounding set lacks CAP_SYS_RESOURCE
#   (CapBnd in /proc/self/status, bit 24), `docker run --privileged` fails with "unable to apply
#   caps"; only then is dockerd given a small OCI runtime wrapper (hack/kind/ociwrap, built into
#   the cache) as its default runtime, which drops that capability from each container's config
#   and then execs runc. On an ordinary host nothing of this is used.
# stop: stops only a dockerd this script started (its pid file), then removes the bridges it left
#   (docker0 and the kind network's br-*). An engine it did not start is left alone, and so is
#   ours while containers still run in it (another user's cluster; it says whose).
# status: exit 0 when an engine answers.
# check: exit 0 when an engine answers or start could start one; otherwise a one-line reason on
#   stdout and exit 1 (what .ci/run prints when it skips the kind stage).
#
# The last line of start is "running" or "started"; a reason on stderr and exit 1 when no engine
# can be had (no dockerd, not root).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
state=${KIND_STATE:-/run/rotator-kind}/dockerd
cache="${XDG_CACHE_HOME:-$HOME/.cache}/rotator/kind"
pidfile=$state/dockerd.pid
log=$state/dockerd.log

answers() { timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1; }

# bit 24 of the bounding set is CAP_SYS_RESOURCE
sys_resource_missing() {
  local bnd
  bnd=$(awk '/^CapBnd:/ {print $2}' /proc/self/status)
  [[ -n $bnd ]] && (( (16#$bnd >> 24 & 1) == 0 ))
}

ours_running() {
  [[ -f $pidfile ]] || return 1
  local pid
  pid=$(cat "$pidfile")
  [[ -n $pid && -d /proc/$pid ]] && [[ $(readlink "/proc/$pid/exe" 2>/dev/null) == */dockerd ]]
}

build_wrapper() { # prints the wrapper's path; built once per source content
  local key out
  key=$(cat "$here"/ociwrap/go.mod "$here"/ociwrap/*.go | sha256sum | cut -c1-12)
  out=$cache/bin/ociwrap-$key
  if [[ ! -x $out ]]; then
    mkdir -p "$cache/bin"
    (cd "$here/ociwrap" && CGO_ENABLED=0 GOFLAGS=-mod=readonly go build -trimpath -o "$out.tmp" .) >&2
    mv "$out.tmp" "$out"
  fi
  echo "$out"
}

start() {
  if answers; then
    echo "docker: an engine answers already; using it as it is" >&2
    echo running
    return 0
  fi
  if ours_running; then
    echo "docker: the dockerd started earlier (pid $(cat "$pidfile")) does not answer; see $log" >&2
    exit 1
  fi
  if ! command -v dockerd >/dev/null; then
    echo "docker: no Docker engine answers and dockerd is not installed (apt-get install docker.io)" >&2
    exit 1
  fi
  if [[ $(id -u) != 0 ]]; then
    echo "docker: no Docker engine answers, and starting dockerd needs root" >&2
    exit 1
  fi
  if ! command -v docker >/dev/null; then
    echo "docker: the docker client is not installed (apt-get install docker.io)" >&2
    exit 1
  fi
  mkdir -p "$state"
  local args=(--pidfile "$pidfile")
  local envs=()
  if sys_resource_missing; then
    local wrapper runc
    runc=$(command -v runc || true)
    [[ -n $runc ]] || { echo "docker: runc is not installed" >&2; exit 1; }
    wrapper=$(build_wrapper)
    echo "docker: CAP_SYS_RESOURCE is not in this machine's capability bounding set;" \
      "dockerd runs containers through $wrapper, which drops it" >&2
    args+=(--add-runtime "rotator-runc=$wrapper" --default-runtime rotator-runc)
    envs=(OCIWRAP_RUNC="$runc")
  fi
  save_host_network
  echo "docker: starting dockerd (log $log)" >&2
  # setsid: its own session, so that a Ctrl-C of the caller does not reach it
  env "${envs[@]}" setsid dockerd "${args[@]}" </dev/null >>"$log" 2>&1 &
  local started_pid=$!
  # A dockerd that never answers (or a Ctrl-C while waiting) is stopped here, not left behind.
  trap 'kill -TERM "$started_pid" 2>/dev/null; wait "$started_pid" 2>/dev/null; rm -f "$pidfile"; restore_host_network' EXIT
  local deadline=$((SECONDS + 60))
  until answers; do
    if (( SECONDS > deadline )) || ! kill -0 "$started_pid" 2>/dev/null; then
      echo "docker: dockerd did not answer within 60 s; last lines of $log:" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
    sleep 0.5
  done
  trap - EXIT
  echo "docker: dockerd $(docker version --format '{{.Server.Version}}') answers (pid $(cat "$pidfile"))" >&2
  echo started
}

check() {
  answers && return 0
  if ! command -v dockerd >/dev/null; then
    echo "no Docker engine answers and dockerd is not installed"; return 1
  fi
  if [[ $(id -u) != 0 ]]; then
    echo "no Docker engine answers and starting dockerd needs root"; return 1
  fi
  if ! command -v docker >/dev/null; then
    echo "no Docker engine answers and the docker client is not installed"; return 1
  fi
}

stop() {
  if ! ours_running; then
    echo "docker: no dockerd started by this script is running; nothing stopped" >&2
    rm -f "$pidfile"
    return 0
  fi
  local pid bridges others
  pid=$(cat "$pidfile")
  # Containers still running are someone else's (another cluster on this machine): their dockerd
  # stays up. KIND_DOCKER_STOP_FORCE=1 stops it all the same.
  others=$(docker ps --format '{{.Names}}' 2>/dev/null | paste -sd ' ' -)
  if [[ -n $others && ${KIND_DOCKER_STOP_FORCE:-0} != 1 ]]; then
    echo "docker: dockerd (pid $pid) left running: containers still use it: $others" >&2
    return 0
  fi
  # the bridges of its networks: docker0, and br-<first 12 of the id> for the kind network
  bridges=$(docker network ls -q --filter driver=bridge 2>/dev/null | while read -r id; do
    docker network inspect -f \
      '{{with index .Options "com.docker.network.bridge.name"}}{{.}}{{else}}br-{{printf "%.12s" $.Id}}{{end}}' \
      "$id" 2>/dev/null || true
  done)
  for net in $(docker network ls -q --filter driver=bridge --filter name=^kind$ 2>/dev/null); do
    docker network rm "$net" >/dev/null 2>&1 || true
  done
  kill -TERM "$pid"
  local deadline=$((SECONDS + 60))
  while [[ -d /proc/$pid ]]; do
    if (( SECONDS > deadline )); then
      echo "docker: dockerd (pid $pid) still running after 60 s; sending SIGKILL" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    sleep 0.2
  done
  rm -f "$pidfile"
  local br
  for br in $bridges docker0; do
    if ip link show "$br" >/dev/null 2>&1; then
      ip link delete "$br" 2>/dev/null || echo "docker: could not remove bridge $br" >&2
    fi
  done
  restore_host_network
  echo "docker: stopped dockerd (pid $pid), removed its bridges, restored the host's firewall" >&2
}

# What dockerd changes on the host besides its bridges: the iptables rules (its DOCKER chains,
# NAT, FORWARD policy DROP) and net.ipv4.ip_forward. Saved before it starts, put back after it
# stops: a table that held nothing before is emptied (iptables-restore only touches the tables
# its input names).
save_host_network() {
  local family
  for family in iptables ip6tables; do
    command -v "$family-save" >/dev/null || continue
    "$family-save" >"$state/$family.before" 2>/dev/null || rm -f "$state/$family.before"
  done
  sysctl -n net.ipv4.ip_forward >"$state/ip_forward.before" 2>/dev/null || true
}

restore_host_network() {
  local family table
  for family in iptables ip6tables; do
    [[ -f $state/$family.before ]] || continue
    for table in $("$family-save" 2>/dev/null | sed -n 's/^\*//p'); do
      grep -qx "\*$table" "$state/$family.before" ||
        { "$family" -t "$table" -F && "$family" -t "$table" -X; } 2>/dev/null || true
    done
    "$family-restore" <"$state/$family.before" 2>/dev/null ||
      echo "docker: could not restore the host's $family rules ($state/$family.before)" >&2
    rm -f "$state/$family.before"
  done
  if [[ -f $state/ip_forward.before ]]; then
    sysctl -qw "net.ipv4.ip_forward=$(cat "$state/ip_forward.before")" 2>/dev/null || true
    rm -f "$state/ip_forward.before"
  fi
}

case ${1:-} in
  start) start ;;
  stop) stop ;;
  status) answers ;;
  check) check ;;
  *) echo "usage: $0 start|stop|status|check" >&2; exit 2 ;;
esac
