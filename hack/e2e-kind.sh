#!/usr/bin/env bash
# make e2e-kind: the tests only a real cluster can answer, on a kind cluster built and run here.
# Nothing is pulled from a container registry; all traffic stays on this machine.
#
# Stages (each prints its seconds; a summary at the end):
#   1. docker     hack/kind/docker.sh start: an engine that answers (dockerd started when none does)
#   2. node-image hack/kind/node-image.sh: the node image, built once and cached (KIND_NODE_IMAGE:
#                 a published one instead)
#   (after)       with E2E_KIND_CLUSTER_AFTER (below) only: waits for that file
#   3. cluster    hack/kind/cluster.sh up: cluster $KIND_CLUSTER (default rotator-e2e), CoreDNS up
#   4. images     (built from the end of stage 1 on, alongside 2 and 3; this stage waits for them)
#                 the controller image of this checkout (B, localhost/rotator:e2e), of the commit in
#                 hack/kind/upgrade-from (A, from a git worktree under the cache; its archive cached
#                 by commit) and the dev-kit image (localhost/rotator-devkit:e2e), as docker archives;
#                 then, without E2E_KIND_CLUSTER_AFTER, promtool (hack/promtool.sh: built once and
#                 cached; tests/kind/test_alerts.py runs it). With it, make test builds promtool
#                 before its tests, so the tests stage finds it cached, and no build at nice 19 here
#                 can hold hack/promtool.sh's lock while make test waits for it.
#   5. load       the archives into the node (never pulled)
#   6. tests      .venv/bin/pytest tests/kind "$@" (test_kept_cluster.py runs tests/e2e/test_deploy.py
#                 through the kubeconfig against the live installation)
# Always, also on failure or Ctrl-C: the cluster is deleted and a dockerd this run started is
# stopped (with its bridges). KIND_KEEP=1 keeps both and prints how to delete them.
#
# E2E_KIND_CLUSTER_AFTER=<file> (.ci/run, which runs make test and make test-oldest meanwhile): the
# builds of stages 2 and 4 (node-image.sh and the image scripts, with their Go, pip and buildah) run
# at nice 19, so they take mostly the CPU the other work leaves idle (dockerd, and what it does for
# them, keeps its own priority), and a stage `after` waits, before the cluster is created, until
# <file> exists.
# A TERM or INT acts at once in every stage but docker (which ends within its 60 s): the long ones
# run in the background and are waited for (bash runs a trap only when a foreground command ends;
# a `wait` it interrupts), and cleanup stops them (.ci/run's TERM when make test fails). The image
# builds run in a process group of their own, and cleanup signals that group: whatever is still in
# it E2E_KIND_STOP_SECONDS (default 30) after the TERM gets a KILL.
#
# Needs Docker (an engine that answers, or root and Debian's docker.io), Go, buildah, mmdebstrap.
# Without Docker it fails with the reason (.ci/run skips the stage there: docker.sh check).
set -euo pipefail
cd "$(dirname "$0")/.."
export KIND_CLUSTER=${KIND_CLUSTER:-rotator-e2e}
cache_root="${XDG_CACHE_HOME:-$HOME/.cache}/rotator/kind"
keep=${KIND_KEEP:-0}

# The cleanup is in place before anything is created (the work folder, the kubeconfig, dockerd).
work=""
cluster_up=0
timings=()
stage_name=""
stage_start=0
t_all=$SECONDS
after=${E2E_KIND_CLUSTER_AFTER:-}
builds=()  # how the builds run: at nice 19 while other work runs beside them (E2E_KIND_CLUSTER_AFTER)
if [[ -n $after ]]; then builds=(nice -n 19); fi
kill_tree() { # <pid>: TERM to a process and everything under it
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do kill_tree "$child"; done
  kill -TERM "$1" 2>/dev/null || true
}
stop_seconds=${E2E_KIND_STOP_SECONDS:-30}  # how long the image builds get to end after a TERM
if [[ ! $stop_seconds =~ ^[0-9]+$ ]]; then
  echo "e2e-kind: E2E_KIND_STOP_SECONDS is not a whole number of seconds: $stop_seconds" >&2
  exit 2
fi
KILL_WAIT_SECONDS=10  # how long KILLed image builds may take to end
group_lives() { # <pgid>: a live process (not a zombie) of that group is in this run's session
  # Zombies do not count: one reparented to a PID 1 that does not reap stays one for ever. The
  # session: once the images' group is empty its number may be another's (a pid used again by
  # a process that leads a group, such as a containerd-shim: never in this session).
  pgrep -g "$1" -s 0 -r D,R,S,T,t,W >/dev/null 2>&1
}
kill_group() { # <pgid>: TERM (and CONT) to every process of the group, if it lives
  # A group, not a tree: a process that left the tree (reparented when its parent died first)
  # or was forked after the tree was read keeps its group. (A tree walk once missed the pip of
  # a buildah RUN step, which built on alone.) CONT: a member stopped by SIGTTIN (a step that
  # read the terminal from this background group) acts on TERM only once it runs.
  group_lives "$1" || return 0
  kill -TERM -- "-$1" 2>/dev/null || true
  kill -CONT -- "-$1" 2>/dev/null || true
}
wait_group() { # <pgid>: polls (none is a child of this shell) until the group is gone; KILLs late
  local deadline=$((SECONDS + stop_seconds))
  while group_lives "$1" && (( SECONDS < deadline )); do sleep 0.2; done
  group_lives "$1" || return 0
  echo "e2e-kind: the image builds still ran $stop_seconds s after TERM: KILL" >&2
  kill -KILL -- "-$1" 2>/dev/null || true
  # and until they are gone: a KILLed process ends only once it next runs (a busy machine, an
  # uninterruptible read); a run that returned at once ended with a KILLed step still there
  deadline=$((SECONDS + KILL_WAIT_SECONDS))
  while group_lives "$1" && (( SECONDS < deadline )); do sleep 0.1; done
  if group_lives "$1"; then
    echo "e2e-kind: the image builds outlived their KILL by $KILL_WAIT_SECONDS s" >&2
  fi
}
cleanup() {
  local rc=$? t=$SECONDS
  trap - EXIT INT TERM
  set +e  # every step runs, whatever one before it answered (a failed step once ended cleanup)
  if [[ -n ${images_pid:-} ]]; then kill_group "$images_pid"; fi  # stopped before they ended
  if [[ -n ${stage_pid:-} ]]; then kill_tree "$stage_pid"; fi  # TERM to both before any wait
  if [[ -n ${images_pid:-} ]]; then
    wait_group "$images_pid"
    wait "$images_pid" 2>/dev/null || true
  fi
  if [[ -n ${stage_pid:-} ]]; then wait "$stage_pid" 2>/dev/null || true; fi
  if [[ $stage_name == node-image && -n $stage_pid ]]; then remove_build_containers; fi
  # docker.sh start's answer (its last line): "started" when this run started dockerd
  local docker_started=0
  if [[ -f $work/docker.out && $(tail -n 1 "$work/docker.out") == started ]]; then docker_started=1; fi
  if [[ -n $stage_name ]]; then timings+=("$stage_name $((SECONDS - stage_start)) s (failed)"); fi
  if [[ $keep == 1 && $cluster_up == 1 ]]; then
    echo "e2e-kind: KIND_KEEP=1: cluster $KIND_CLUSTER kept; kubeconfig $KIND_KUBECONFIG" >&2
    echo "e2e-kind: delete it with: KIND_CLUSTER=$KIND_CLUSTER KIND_KUBECONFIG=$KIND_KUBECONFIG hack/kind/cluster.sh down" \
      "$( [[ $docker_started == 1 ]] && echo '&& hack/kind/docker.sh stop')" >&2
  else
    if [[ $cluster_up == 1 ]]; then hack/kind/cluster.sh down || rc=1; fi
    if [[ $docker_started == 1 ]]; then hack/kind/docker.sh stop || rc=1; fi
  fi
  if [[ -n $work ]]; then rm -rf "$work"; fi
  timings+=("cleanup $((SECONDS - t)) s")
  echo "e2e-kind: timings: ${timings[*]}; total $((SECONDS - t_all)) s (exit $rc)" >&2
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

stage_pid=""
stage() { # [--bg] <name> <command...>: runs a stage, records its seconds (a failed one: cleanup
  # does); --bg: in the background, waited for (a command that sets no variable of this shell)
  local bg=0
  if [[ $1 == --bg ]]; then bg=1; shift; fi
  stage_name=$1 stage_start=$SECONDS
  shift
  echo "e2e-kind: -- $stage_name" >&2
  if [[ $bg == 1 ]]; then
    "$@" &
    stage_pid=$!
    local rc=0
    wait "$stage_pid" || rc=$?
    stage_pid=""
    (( rc == 0 )) || return "$rc"  # errexit: the run ends here
  else
    "$@"
  fi
  timings+=("$stage_name $((SECONDS - stage_start)) s")
  echo "e2e-kind: $stage_name done in $((SECONDS - stage_start)) s" >&2
  stage_name=""
}

work=$(mktemp -d "${TMPDIR:-/tmp}/rotator-e2e-kind.XXXXXX")
if [[ $keep == 1 ]]; then
  mkdir -p "$cache_root"
  export KIND_KUBECONFIG=${KIND_KUBECONFIG:-$cache_root/$KIND_CLUSTER.kubeconfig}
else
  export KIND_KUBECONFIG=${KIND_KUBECONFIG:-$work/kubeconfig}
fi

# Image A: the pinned earlier commit, from a worktree under the cache
commit_a=$(grep -v '^[[:space:]]*#' hack/kind/upgrade-from | awk 'NF {print $1; exit}')
[[ $commit_a =~ ^[0-9a-f]{40}$ ]] || { echo "e2e-kind: hack/kind/upgrade-from holds no commit" >&2; exit 1; }
checkout_a=$cache_root/upgrade-from/$commit_a
image_a=localhost/rotator:upgrade-from-${commit_a:0:12}
archive_a=$cache_root/images/rotator-$commit_a.tar
archive_b=$work/rotator-e2e.tar
archive_devkit=$work/rotator-devkit-e2e.tar
images() {
  if [[ $(git -C "$checkout_a" rev-parse HEAD 2>/dev/null) != "$commit_a" ]]; then
    git worktree remove --force "$checkout_a" 2>/dev/null || rm -rf "$checkout_a"
    mkdir -p "$(dirname "$checkout_a")"
    git worktree add --force --detach "$checkout_a" "$commit_a" >&2
  fi
  local t=$SECONDS
  if [[ ! -f $archive_a ]]; then
    mkdir -p "$(dirname "$archive_a")"
    IMAGE=$image_a ARCHIVE=$archive_a.tmp CONTEXT=$checkout_a hack/image.sh >/dev/null
    mv "$archive_a.tmp" "$archive_a"
    echo "e2e-kind: image A ($image_a) built in $((SECONDS - t)) s" >&2
  else
    echo "e2e-kind: image A ($image_a) from the cache: $archive_a" >&2
  fi
  t=$SECONDS
  IMAGE=localhost/rotator:e2e ARCHIVE=$archive_b hack/image.sh >/dev/null
  echo "e2e-kind: image B (localhost/rotator:e2e) built in $((SECONDS - t)) s" >&2
  t=$SECONDS
  IMAGE=localhost/rotator-devkit:e2e ARCHIVE=$archive_devkit hack/devkit-image.sh >/dev/null
  echo "e2e-kind: dev-kit image (localhost/rotator-devkit:e2e) built in $((SECONDS - t)) s" >&2
  if [[ -z $after ]]; then
    t=$SECONDS
    hack/promtool.sh >/dev/null
    echo "e2e-kind: promtool ready in $((SECONDS - t)) s" >&2
  fi
}
# The images take minutes of pip and buildah and need neither Docker nor the node image, so they
# are built while those come up (on a fresh machine the node image's Go builds and the images'
# downloads overlap: minutes off the stage); the images stage waits for them and prints their log.
images_pid=""
images_log=$work/images.log
images_started=0
wait_images() {
  local rc=0
  wait "$images_pid" || rc=$?
  images_pid=""
  cat "$images_log" >&2
  echo "e2e-kind: images built in $((SECONDS - images_started)) s, alongside node-image and cluster" >&2
  return "$rc"
}

stage docker hack/kind/docker.sh start >"$work/docker.out"  # cleanup reads its answer
# In a process group of their own (job control on for this one job: its group is its pid), so
# that cleanup reaches all of them (kill_group); inside, job control is off again.
set -m
(  # after Docker answers: without it, the stage stops here
  set +m
  if [[ -n $after ]]; then renice -n 19 -p "$BASHPID" >/dev/null; fi
  images
) >"$images_log" 2>&1 </dev/null &
images_pid=$!
set +m
images_started=$SECONDS

node_image_started=$EPOCHSECONDS
# A build stopped in `kind build node-image` leaves its container (kind-build-<unix time>-<n>;
# kind removes it only when it ends by itself): those this run's build started are removed.
remove_build_containers() {
  local name names
  names=$(docker ps -a --format '{{.Names}}' 2>/dev/null) || return 0  # no engine: no containers
  while read -r name; do
    if [[ $name =~ ^kind-build-([0-9]+)- ]] && (( BASH_REMATCH[1] >= node_image_started )); then
      docker rm -f "$name" >/dev/null 2>&1 || true
    fi
  done <<<"$names"
}
stage --bg node-image "${builds[@]}" hack/kind/node-image.sh >"$work/node-image.out"
KIND_NODE_IMAGE=$(tail -n 1 "$work/node-image.out")
export KIND_NODE_IMAGE  # cluster.sh up uses it as it is

# The cluster runs at the engine's priority and its tests at this script's, so it waits until the
# work beside it is done (make test's timing bounds are not shared with a cluster).
# Its caller writes the file: a caller that is gone (SIGKILLed) never will, so the run ends then.
wait_after() {
  local caller=$PPID
  echo "e2e-kind: waiting for $after before the cluster is created" >&2
  until [[ -e $after ]]; do
    if [[ ! -d /proc/$caller ]]; then
      echo "e2e-kind: its caller (pid $caller), which was to write $after, is gone" >&2
      return 1
    fi
    sleep 1
  done
}
if [[ -n $after ]]; then stage after wait_after; fi

if hack/kind/cluster.sh exists; then
  echo "e2e-kind: a kind cluster $KIND_CLUSTER exists already (a kept run, or someone else's); it is" \
    "left alone: delete it (KIND_CLUSTER=$KIND_CLUSTER hack/kind/cluster.sh down) or set another KIND_CLUSTER" >&2
  exit 1
fi
cluster_up=1  # from here on a (partly) created cluster is deleted
stage --bg cluster hack/kind/cluster.sh up

stage images wait_images
stage --bg load hack/kind/cluster.sh load "$archive_b" "$archive_a" "$archive_devkit"

kubectl=$(command -v kubectl || echo "$(hack/testenv.sh | tail -n 1)/kubectl")
kind_tests() {
  if [[ ! -d tests/kind ]]; then
    echo "e2e-kind: no tests/kind yet; skipped" >&2
    return 0
  fi
  local promtool
  promtool=$(hack/promtool.sh | tail -n 1)  # cached by now (the images job, or make test)
  ROTATOR_KIND_KUBECONFIG=$KIND_KUBECONFIG ROTATOR_KIND_CLUSTER=$KIND_CLUSTER \
    ROTATOR_KIND_IMAGE=localhost/rotator:e2e ROTATOR_KIND_IMAGE_A=$image_a \
    ROTATOR_KIND_IMAGE_A_COMMIT=$commit_a ROTATOR_KIND_CHECKOUT_A=$checkout_a \
    ROTATOR_KIND_DEVKIT_IMAGE=localhost/rotator-devkit:e2e ROTATOR_KIND_KUBECTL=$kubectl \
    PROMTOOL=$promtool ROTATOR_TESTS_COMPLETE=1 .venv/bin/pytest tests/kind "$@"
}
stage --bg tests-kind kind_tests "$@"
echo "e2e-kind: passed" >&2
