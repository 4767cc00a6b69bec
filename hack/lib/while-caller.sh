#!/usr/bin/env bash
# hack/lib/while-caller.sh <pid> <command> [args...] — runs the command while process <pid> lives.
#
# For a background job of .ci/run (the oldest version's control-plane build: up to ~20 min of Go
# on a fresh machine). .ci/run stops it on its way out (a TERM to this script's process group);
# a runner that SIGKILLs .ci/run (a timeout) leaves that cleanup unrun, so this script watches its
# caller and stops the command once the caller is gone.
#
# Gone: no /proc/<pid>, or a zombie there (a killed caller whose parent has not reaped it yet, or
# never will), or another process under that pid (its start time differs from the caller's when
# this script began).
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

# "<state> <start time>" of a pid (fields 3 and 22 of /proc/<pid>/stat, counted after the
# command name, which may hold spaces and parentheses); empty when there is no such process.
state_and_start() {
  local stat
  stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 0
  stat=${stat##*) }
  local fields
  read -r -a fields <<<"$stat"
  echo "${fields[0]} ${fields[19]}"
}
started=$(state_and_start "$caller")
if [[ -z $started ]]; then
  echo "while-caller: no process $caller to watch" >&2
  exit 2
fi
caller_start=${started#* }
caller_alive() {
  local now
  now=$(state_and_start "$caller")
  [[ -n $now && ${now%% *} != Z && ${now#* } == "$caller_start" ]]
}

job=""
stop() { # <why>
  echo "while-caller: $1; stopping: $cmd" >&2
  if [[ -n $job ]]; then
    # the group; or the job alone, if the signal came before its setsid() made the group
    kill -TERM -- "-$job" 2>/dev/null || kill -TERM "$job" 2>/dev/null || true
    wait "$job" 2>/dev/null || true
  fi
  exit 143
}
trap 'stop "signalled"' TERM INT HUP  # before the job starts: no window that orphans it

setsid --wait "$@" &
job=$!

while kill -0 "$job" 2>/dev/null; do
  if ! caller_alive; then
    stop "its caller (pid $caller) is gone"
  fi
  sleep 1 &
  wait $! || true  # a trapped signal ends this wait at once
done
rc=0
wait "$job" || rc=$?
exit "$rc"
