#!/usr/bin/env bash
# Makes sure Redis and PostgreSQL answer at REDIS_URL and DATABASE_URL (defaults: the
# local ones). Starts the system services when they are installed but stopped, installs
# them with apt when run as root and they are missing, and says what to do otherwise.
set -euo pipefail

REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379}
DATABASE_URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/svc}
say() { echo "[services] $*" >&2; }

redis_hostport() { local u=${REDIS_URL#redis://}; u=${u##*@}; u=${u%%/*}; echo "${u%%:*} ${u##*:}"; }
read -r RHOST RPORT < <(redis_hostport)
[ "$RPORT" = "$RHOST" ] && RPORT=6379

redis_up() { (exec 3<>"/dev/tcp/$RHOST/$RPORT") 2>/dev/null; }
pg_up() { command -v pg_isready >/dev/null && pg_isready -q -d "$DATABASE_URL" 2>/dev/null; }

apt_install() {
  if [ "$(id -u)" != 0 ]; then say "cannot install $*: not root. Install it, or point the URL at a running server."; exit 1; fi
  say "installing $* with apt-get"
  if [ ! -f /tmp/.svc-apt-updated ]; then apt-get update -qq >&2 && touch /tmp/.svc-apt-updated; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >&2
}

if ! redis_up; then
  if [ "$RHOST" != 127.0.0.1 ] && [ "$RHOST" != localhost ]; then say "Redis at $REDIS_URL does not answer"; exit 1; fi
  command -v redis-server >/dev/null || apt_install redis-server
  say "starting redis-server on port $RPORT"
  redis-server --daemonize yes --port "$RPORT" --save "" --appendonly no >&2
  for _ in $(seq 50); do redis_up && break; sleep 0.1; done
  redis_up || { say "Redis did not start"; exit 1; }
fi

if ! pg_up; then
  if [ -z "$(ls /etc/postgresql 2>/dev/null)" ]; then apt_install postgresql; fi
  ver=$(ls /etc/postgresql 2>/dev/null | sort -V | tail -1)
  [ -n "$ver" ] || { say "PostgreSQL is not installed and could not be installed; install it or set DATABASE_URL"; exit 1; }
  say "starting PostgreSQL $ver"
  pg_ctlcluster --skip-systemctl-redirect "$ver" main start >&2 || true
  for _ in $(seq 100); do pg_up && break; sleep 0.1; done
  pg_up || { say "PostgreSQL at $DATABASE_URL does not answer; start it or set DATABASE_URL"; exit 1; }
  # A fresh cluster from apt uses peer auth; the local services here use trust on TCP.
  if ! psql "$DATABASE_URL" -qtAc 'SELECT 1' >/dev/null 2>&1; then
    hba=$(ls /etc/postgresql/"$ver"/main/pg_hba.conf)
    say "allowing local TCP connections without password in $hba (development machine)"
    sed -i -E 's/^(host\s+all\s+all\s+(127\.0\.0\.1\/32|::1\/128)\s+)\S+/\1trust/' "$hba"
    pg_ctlcluster --skip-systemctl-redirect "$ver" main reload >&2
  fi
fi

# The database named in the URL must exist.
db=${DATABASE_URL##*/}; db=${db%%\?*}
if [ -n "$db" ] && ! psql "$DATABASE_URL" -qtAc 'SELECT 1' >/dev/null 2>&1; then
  say "creating database $db"
  if ! psql "${DATABASE_URL%/*}/postgres" -qc "CREATE DATABASE \"$db\"" >&2; then
    say "could not create database $db with $DATABASE_URL (see psql's message above)."
    say "Set DATABASE_URL to a role that may create databases (with its password), or create $db yourself."
    exit 1
  fi
fi
