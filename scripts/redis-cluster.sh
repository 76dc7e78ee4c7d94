#!/usr/bin/env bash
# A local Redis Cluster for tests: `start` runs REDIS_CLUSTER_MASTERS masters (3) on
# 127.0.0.1 from REDIS_CLUSTER_PORT (7000: 7000-7002), no replicas, nothing persisted,
# in a temporary directory, and waits for cluster_state:ok; `stop` shuts them down and
# removes the directory; `status` prints CLUSTER INFO. `start` on a cluster that is
# already up does nothing.
set -euo pipefail

BASE=${REDIS_CLUSTER_PORT:-7000}
N=${REDIS_CLUSTER_MASTERS:-3}
DIR_FILE=${TMPDIR:-/tmp}/svc-redis-cluster-$BASE.dir
say() { echo "[redis-cluster] $*" >&2; }
ports() { seq "$BASE" $((BASE + N - 1)); }
cli() { redis-cli -h 127.0.0.1 -p "$1" "${@:2}"; }
up() { cli "$1" ping >/dev/null 2>&1; }
state_ok() { cli "$BASE" cluster info 2>/dev/null | tr -d '\r' | grep -q '^cluster_state:ok$'; }
wait_until() { for _ in $(seq "$1"); do "${@:2}" && return 0; sleep 0.1; done; return 1; }

start() {
  if state_ok; then
    known=$(cli "$BASE" cluster info | tr -d '\r' | sed -n 's/^cluster_known_nodes://p')
    [ "$known" = "$N" ] && { say "already up on $BASE-$((BASE + N - 1))"; return 0; }
    say "a cluster on $BASE has $known nodes, not $N: stop it first"; exit 1
  fi
  command -v redis-server >/dev/null || { say "redis-server is not installed"; exit 1; }
  local dir
  dir=$(cat "$DIR_FILE" 2>/dev/null || true)
  [ -n "$dir" ] && [ -d "$dir" ] || { dir=$(mktemp -d "${TMPDIR:-/tmp}/svc-redis-cluster.XXXXXX"); echo "$dir" >"$DIR_FILE"; }
  for p in $(ports); do
    if up "$p"; then
      [ "$(cli "$p" info cluster | tr -d '\r' | sed -n 's/^cluster_enabled://p')" = 1 ] || { say "port $p is taken by a Redis that is not a cluster node"; exit 1; }
      continue
    fi
    # Nothing is persisted, so a node that is down has nothing to keep. Its nodes.conf,
    # left by a node that was killed (a machine or session that stopped with the cluster
    # up), would bring back the old cluster's view half-way, and `--cluster create` would
    # wait for ever for the nodes to agree: a node always starts from a fresh directory.
    rm -rf "${dir:?}/$p"
    mkdir -p "$dir/$p"
    redis-server --port "$p" --bind 127.0.0.1 --dir "$dir/$p" --cluster-enabled yes \
      --cluster-config-file "$dir/$p/nodes.conf" --cluster-node-timeout 2000 \
      --save "" --appendonly no --daemonize yes --logfile "$dir/$p/redis.log" >&2
    wait_until 50 up "$p" || { say "redis-server on $p did not start (log: $dir/$p/redis.log)"; exit 1; }
  done
  # Nodes that already know each other (a half-made cluster) are reset first.
  for p in $(ports); do
    [ "$(cli "$p" dbsize)" = 0 ] || { say "node $p holds keys but the cluster is not up: stop it first"; exit 1; }
    cli "$p" cluster reset hard >/dev/null
  done
  local addrs=()
  for p in $(ports); do addrs+=("127.0.0.1:$p"); done
  # `--cluster create` waits without end for the nodes to agree; bounded here.
  timeout 60 redis-cli --cluster create "${addrs[@]}" --cluster-replicas 0 --cluster-yes >&2 || { say "redis-cli --cluster create did not finish within 60 s"; exit 1; }
  for p in $(ports); do
    wait_until 100 eval "cli $p cluster info | tr -d '\r' | grep -q '^cluster_state:ok$'" || { say "node $p did not reach cluster_state:ok"; exit 1; }
  done
  say "up on $BASE-$((BASE + N - 1)) ($dir)"
}

stop() {
  for p in $(ports); do up "$p" && cli "$p" shutdown nosave >/dev/null 2>&1 || true; done
  local dir
  dir=$(cat "$DIR_FILE" 2>/dev/null || true)
  [ -n "$dir" ] && rm -rf "$dir"
  rm -f "$DIR_FILE"
  say "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) cli "$BASE" cluster info ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac
