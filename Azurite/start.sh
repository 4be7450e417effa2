#!/usr/bin/env bash
# Runs the Azure Storage emulator for local runs, tests and CI: blob and queue as two separate
# processes (a queue clean-up pass can stall its whole process; keeping it apart from blob keeps
# leases renewing), with disk persistence, listening on 127.0.0.1 only.
#
# Environment:
#   AZURITE_BLOB_PORT   blob port              (default 10000)
#   AZURITE_QUEUE_PORT  queue port             (default 10001)
#   AZURITE_LOCATION    data folder            (default ./.azurite-data beside this script)
#   AZURITE_PIDFILE     where the two pids go  (default $AZURITE_LOCATION/azurite.pids)
#
# Runs in the foreground; SIGINT/SIGTERM stops both processes by pid. If either process dies, the
# other is stopped and the script exits non-zero.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
blob_port=${AZURITE_BLOB_PORT:-10000}
queue_port=${AZURITE_QUEUE_PORT:-10001}
location=${AZURITE_LOCATION:-$here/.azurite-data}
pidfile=${AZURITE_PIDFILE:-$location/azurite.pids}
bin=$here/node_modules/.bin

if [ ! -x "$bin/azurite-blob" ]; then
  echo "azurite is not installed; run: npm ci --prefix $here" >&2
  exit 1
fi
mkdir -p "$location/blob" "$location/queue"
flags=(--skipApiVersionCheck --loose --disableTelemetry)

# Azurite leaks a file descriptor for every ranged read its client stops early (a known Azurite
# bug) and, at its open-file limit, answers every request that opens a data file with a bare
# HTTP 500 until it restarts. Raise the limit as far as allowed: the hard one too where that is
# permitted (root), else the soft one up to the hard one.
ulimit -n 1048576 2>/dev/null || ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
limit=$(ulimit -n)
if [ "$limit" != unlimited ] && [ "$limit" -lt 16384 ]; then
  echo "azurite: open-file limit $limit; Azurite leaks a descriptor per ranged read stopped early and fails (HTTP 500) at the limit: raise the hard limit (ulimit -Hn, or LimitNOFILE) for long runs" >&2
fi

"$bin/azurite-blob" --blobHost 127.0.0.1 --blobPort "$blob_port" --location "$location/blob" "${flags[@]}" &
blob_pid=$!
"$bin/azurite-queue" --queueHost 127.0.0.1 --queuePort "$queue_port" --location "$location/queue" "${flags[@]}" &
queue_pid=$!
printf '%s\n%s\n' "$blob_pid" "$queue_pid" >"$pidfile"

stop() { kill "$blob_pid" "$queue_pid" 2>/dev/null || true; wait "$blob_pid" "$queue_pid" 2>/dev/null || true; rm -f "$pidfile"; }
trap 'stop; exit 0' INT TERM
set +e
wait -n "$blob_pid" "$queue_pid"
rc=$?
echo "azurite: a process exited (status $rc); stopping the other" >&2
stop
exit 1
