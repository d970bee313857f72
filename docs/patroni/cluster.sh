#!/usr/bin/env bash
# A Patroni cluster on this machine, the one the ledger's failover tests
# start (tests/common/patroni.rs): one etcd and NODES PostgreSQL servers
# under Patroni, synchronous_mode on, every port on 127.0.0.1, everything
# in DIR.
#
#   docs/patroni/cluster.sh start DIR   start it, with an empty database
#                                       `ledger`; prints its URL, kept in
#                                       DIR/ledger-url
#   docs/patroni/cluster.sh stop DIR    stop it; DIR is kept (rm -rf it),
#                                       and `start DIR` starts it again
#
# Needs etcd (Debian: etcd-server), python3 with venv, curl and the PostgreSQL
# server binaries. Patroni is installed from PyPI into DIR/venv the first
# time. As root, Patroni and PostgreSQL run as the `postgres` user, which
# must be able to reach DIR. Settings, from the environment:
#   NODES (3)      how many PostgreSQL nodes
#   PORT_BASE      etcd listens on PORT_BASE and PORT_BASE+1, node i on
#   (15400)        PORT_BASE+10+i (PostgreSQL) and PORT_BASE+20+i (REST API)
#   PG_BIN         the server binaries (default: the highest version under
#                  /usr/lib/postgresql, else the folder of initdb on PATH)
# Then, e.g.:
#   effectwatch migrate --database-url "$(cat DIR/ledger-url)"
#   effectwatch --database-url "$(cat DIR/ledger-url)"
#   DIR/venv/bin/patronictl -c DIR/n1/patroni.yml list
#   DIR/venv/bin/patronictl -c DIR/n1/patroni.yml switchover --force
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
action=${1:-}
dir=${2:-}
if [ -z "$dir" ] || { [ "$action" != start ] && [ "$action" != stop ]; }; then
    echo "usage: $0 start|stop DIR" >&2
    exit 2
fi
nodes=${NODES:-3}
base=${PORT_BASE:-15400}
scope=effectwatch

# What runs a command as the server's user when we are root (PostgreSQL
# refuses to run as root, and Patroni runs it). Every program here execs
# the next, so `$!` is the pid of Patroni itself.
as_server=()
if [ "$(id -u)" -eq 0 ]; then
    as_server=(setpriv --reuid=postgres --regid=postgres --init-groups --)
fi

# Sends SIGTERM to the processes whose pids these files hold and waits up
# to 30 s for them to go; then SIGKILL.
terminate() {
    local file pids=()
    for file in "$@"; do
        [ -f "$file" ] && pids+=("$(cat "$file")")
    done
    [ ${#pids[@]} -gt 0 ] || return 0
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for _ in $(seq 1 300); do
        kill -0 "${pids[@]}" 2>/dev/null || break
        sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
    rm -f "$@"
}

stop() {
    # Patroni stops its PostgreSQL on SIGTERM (all nodes at once, so that no
    # replica takes over from a leader on its way out); etcd goes last,
    # since the nodes give their keys back to it as they go.
    terminate "$dir"/n*/patroni.pid
    terminate "$dir/etcd.pid"
}

if [ "$action" = stop ]; then
    stop
    echo "stopped; remove $dir when done with it"
    exit 0
fi

command -v etcd >/dev/null || { echo "etcd not found: install etcd-server" >&2; exit 1; }
bin_dir=${PG_BIN:-}
if [ -z "$bin_dir" ]; then
    bin_dir=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$bin_dir" ] && command -v initdb >/dev/null; then
        bin_dir=$(dirname "$(readlink -f "$(command -v initdb)")")
    fi
fi
[ -x "$bin_dir/postgres" ] || { echo "PostgreSQL server binaries not found: set PG_BIN" >&2; exit 1; }

mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
if [ -f "$dir/etcd.pid" ] && kill -0 "$(cat "$dir/etcd.pid")" 2>/dev/null; then
    echo "a cluster already runs in $dir: $0 stop $dir first" >&2
    exit 1
fi

venv=$dir/venv
if [ ! -x "$venv/bin/patroni" ]; then
    # As root, an interpreter the postgres user can run too (pyenv's live
    # under /root).
    python=python3
    if [ "$(id -u)" -eq 0 ] && [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; fi
    echo "installing Patroni into $venv" >&2
    "$python" -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check "patroni[etcd3,psycopg3]==4.1.5"
fi

setsid etcd --name etcd --data-dir "$dir/etcd" \
    --listen-client-urls "http://127.0.0.1:$base" --advertise-client-urls "http://127.0.0.1:$base" \
    --listen-peer-urls "http://127.0.0.1:$((base + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((base + 1))" \
    --initial-cluster "etcd=http://127.0.0.1:$((base + 1))" \
    >"$dir/etcd.log" 2>&1 &
echo $! >"$dir/etcd.pid"

hosts=()
for i in $(seq 1 "$nodes"); do
    node=$dir/n$i
    mkdir -p "$node"
    sed -e "s|@SCOPE@|$scope|g" -e "s|@NAME@|n$i|g" \
        -e "s|@REST_PORT@|$((base + 20 + i))|g" -e "s|@PG_PORT@|$((base + 10 + i))|g" \
        -e "s|@ETCD_HOSTS@|127.0.0.1:$base|g" -e "s|@NODE_DIR@|$node|g" -e "s|@BIN_DIR@|$bin_dir|g" \
        "$here/node.yml.template" >"$node/patroni.yml"
    if [ "$(id -u)" -eq 0 ]; then chown -R postgres:postgres "$node"; fi
    hosts+=("127.0.0.1:$((base + 10 + i))")
done
for i in $(seq 1 "$nodes"); do
    node=$dir/n$i
    "${as_server[@]}" setsid "$venv/bin/patroni" "$node/patroni.yml" >"$node/patroni.log" 2>&1 &
    echo $! >"$node/patroni.pid"
done

# Up when one node leads and another is its synchronous standby.
up=
for _ in $(seq 1 120); do
    members=$(curl -fsS "http://127.0.0.1:$((base + 21))/cluster" 2>/dev/null || true)
    if grep -q '"role": *"leader", *"state": *"running"' <<<"$members" \
        && grep -q '"role": *"sync_standby", *"state": *"streaming"' <<<"$members"; then
        up=1
        break
    fi
    sleep 1
done
if [ -z "$up" ]; then
    echo "no leader with a synchronous standby after 120 s: see $dir/etcd.log and $dir/n*/patroni.log; $0 stop $dir" >&2
    exit 1
fi
"$venv/bin/patronictl" -c "$dir/n1/patroni.yml" list

# Every node, the primary wanted: libpq (psql here) and the ledger's own
# connections find the leader in this list, wherever it is now.
servers="postgres://postgres@$(IFS=,; echo "${hosts[*]}")"
attrs="target_session_attrs=read-write"
if [ "$("$bin_dir/psql" -Atc "select count(*) from pg_database where datname = 'ledger'" "$servers/postgres?$attrs")" = 0 ]; then
    "$bin_dir/psql" -qc "create database ledger" "$servers/postgres?$attrs"
fi
echo "$servers/ledger?$attrs" | tee "$dir/ledger-url"
