#!/usr/bin/env bash
# hack/lib/while-caller.sh <pid> <command> [args...] — runs the command while process <pid> lives.
#
# For a background job of .ci/run (the oldest version's control-plane build: up to ~20 min of Go
# on a fresh machine). .ci/run stops it on its way out (a TERM to this script's process group);
# a runner that SIGKILLs .ci/run (a timeout) leaves that cleanup unrun, so this script watches its
# caller and stops the command once the caller is gone, as hack/e2e-kind.sh does for its gate.
#
# The command runs in a process group of its own (setsid), so a TERM reaches everything it
# started (go build's compilers), and a TERM, INT or HUP to this script is passed on to that
# group. The exit code is the command's (143 when it was stopped).
set -euo pipefail

if (( $# < 2 )) || [[ ! $1 =~ ^[0-9]+$ ]]; then
  echo "usage: hack/lib/while-caller.sh <pid> <command> [args...]" >&2
  exit 2
fi
caller=$1
shift
cmd=$*
setsid --wait "$@" &
job=$!

stop() { # <why>
  echo "while-caller: $1; stopping: $cmd" >&2
  kill -TERM -- "-$job" 2>/dev/null || true
  wait "$job" 2>/dev/null || true
  exit 143
}
trap 'stop "signalled"' TERM INT HUP

while kill -0 "$job" 2>/dev/null; do
  if [[ ! -d /proc/$caller ]]; then
    stop "its caller (pid $caller) is gone"
  fi
  sleep 1 &
  wait $! || true  # a trapped signal ends this wait at once
done
rc=0
wait "$job" || rc=$?
exit "$rc"
