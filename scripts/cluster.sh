#!/usr/bin/env bash
# The distributed topology of docker-compose.yml as local processes on
# loopback, for machines without a container engine:
#   3 NATS JetStream nodes (a cluster; streams and KV with 3 replicas),
#   ledger-1 and ledger-2 (active/standby behind the JetStream KV writer lease),
#   projections, edge-1 and edge-2, and Caddy in front of the edges.
#
#   scripts/cluster.sh up        build, generate keys once, start everything, wait until ready
#   scripts/cluster.sh status    one line per process: pid, alive, ready; the lease holder
#   scripts/cluster.sh down      stop everything (SIGTERM, then SIGKILL after 30 s)
#   scripts/cluster.sh kill NAME / start NAME   stop one process hard / start it again
#   scripts/cluster.sh stop NAME  stop one process gracefully (SIGTERM: readiness goes false, it serves
#                                 on for its --drain-delay, drains, exits; SIGKILL after 30 s)
#   scripts/cluster.sh restart NAME  stop NAME gracefully, start it again and wait until it is ready
#
# State lives in $CHIO_CLUSTER_DIR (default .artifacts/cluster-local): bin/,
# keys/, data/NAME/, logs/NAME.log, pids/NAME.pid. Ports (loopback) are the
# compose file's: proxy 18080, ledgers 18081/18082, projections 18083,
# NATS clients 14222-14224; edges 18091/18092.
#
# Reads, as in the compose file: the ledgers' checkpoints, hash tiles and
# consistency proofs are public; receipts and the projections need
# Authorization: Bearer with the service token $CHIO_SERVICE_TOKEN (default
# cluster-dev-token; every process gets it) or a capability from keys/issuer.key
# (the ledgers and projections trust keys/issuer.pub as a --reader-issuer).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${CHIO_CLUSTER_DIR:-$root/.artifacts/cluster-local}
token=${CHIO_SERVICE_TOKEN:-cluster-dev-token}
nats_urls=nats://127.0.0.1:14222,nats://127.0.0.1:14223,nats://127.0.0.1:14224
names=(nats-1 nats-2 nats-3 ledger-1 ledger-2 projections edge-1 edge-2 proxy)

die() { echo "cluster.sh: $*" >&2; exit 1; }

build() {
	mkdir -p "$dir/bin"
	echo "cluster.sh: building chio, nats-server and caddy into $dir/bin"
	# The flags of scripts/images.sh: the same build cache serves both.
	local -a gobuild=(env CGO_ENABLED=0 GOWORK=off go build -trimpath -buildvcs=false -ldflags='-s -w')
	(cd "$root" && "${gobuild[@]}" -o "$dir/bin/chio" ./cmd/chio)
	(cd "$root" && "${gobuild[@]}" -o "$dir/bin/nats-server" github.com/nats-io/nats-server/v2)
	(cd "$root/deploy/caddy" && "${gobuild[@]}" -o "$dir/bin/caddy" .)
}

# natsauth ROLE prints the NATS credential and TLS flags of a role (keygen's
# DIR/nats: one nkey seed per role and the internal CA), one per line.
natsauth() { printf '%s\n' --nats-nkey "$dir/keys/nats/$1.nk" --nats-tls-ca "$dir/keys/nats/ca.pem"; }

# cmdline NAME prints the process's command line, one argument per line.
cmdline() {
	local bin=$dir/bin
	case $1 in
	nats-[123])
		printf '%s\n' "$bin/nats-server" -c "$dir/conf/$1.conf" ;;
	ledger-[12])
		local n=${1#ledger-}
		printf '%s\n' "$bin/chio" ledger --nats "$nats_urls" --data-dir "$dir/data/$1" --keys "$dir/keys" \
			--listen "127.0.0.1:1808$n" --standby --instance "$1" --lease-ttl 10s --replicas 3 \
			--reader-issuer "$dir/keys/issuer.pub" --edge-issuer "$dir/keys/issuer.pub"
		natsauth ledger ;;
	projections)
		printf '%s\n' "$bin/chio" projections --nats "$nats_urls" --data-dir "$dir/data/projections" \
			--listen 127.0.0.1:18083 --kernel-key "$dir/keys/kernel.pub" --replicas 3 \
			--reader-issuer "$dir/keys/issuer.pub" --edge-issuer "$dir/keys/issuer.pub"
		natsauth projections ;;
	edge-[12])
		local n=${1#edge-}
		printf '%s\n' "$bin/chio" edge a2a --nats "$nats_urls" --listen "127.0.0.1:1809$n" \
			--issuer-pub "$dir/keys/issuer.pub" --edge-id "$1" --replicas 3 --public-url https://127.0.0.1:18080 \
			--edge-key "$dir/keys/edges/$1.key" --edge-credential "$dir/keys/edges/$1.cred" \
			--edge-issuer "$dir/keys/issuer.pub"
		natsauth edge ;;
	proxy)
		printf '%s\n' "$bin/caddy" run --config "$dir/conf/Caddyfile" --adapter caddyfile ;;
	*) die "unknown process $1 (one of: ${names[*]})" ;;
	esac
}

configs() {
	mkdir -p "$dir/conf"
	for n in 1 2 3; do
		cat >"$dir/conf/nats-$n.conf" <<EOF
server_name: nats-$n
listen: 127.0.0.1:1422$((n + 1))
http: 127.0.0.1:1822$((n + 1))
jetstream { store_dir: "$dir/data/nats-$n" }
# As deploy/nats: only the roles' nkeys, TLS for clients and routes.
include "../keys/nats/users.conf"
tls { cert_file: "$dir/keys/nats/server.pem", key_file: "$dir/keys/nats/server-key.pem", ca_file: "$dir/keys/nats/ca.pem", timeout: 5 }
cluster {
  name: chio
  listen: 127.0.0.1:1622$((n + 1))
  tls { cert_file: "$dir/keys/nats/server.pem", key_file: "$dir/keys/nats/server-key.pem", ca_file: "$dir/keys/nats/ca.pem", verify: true, timeout: 5 }
  routes: [nats-route://127.0.0.1:16222, nats-route://127.0.0.1:16223, nats-route://127.0.0.1:16224]
}
EOF
	done
	# TLS with the internal CA's certificate (keygen --https-host), as
	# the compose proxy's.
	cat >"$dir/conf/Caddyfile" <<EOF
{
	admin off
	auto_https off
}
https://127.0.0.1:18080 {
	tls $dir/keys/tls/https.pem $dir/keys/tls/https-key.pem
	reverse_proxy 127.0.0.1:18091 127.0.0.1:18092 {
		lb_policy round_robin
		lb_try_duration 5s
		lb_try_interval 100ms
		fail_duration 5s
		health_uri /readyz
		health_interval 1s
		flush_interval -1
		header_down X-Chio-Upstream {http.reverse_proxy.upstream.hostport}
		transport http {
			dial_timeout 500ms
		}
	}
}
EOF
}

pid_of() { [[ -f $dir/pids/$1.pid ]] && cat "$dir/pids/$1.pid"; }
alive() { local p; p=$(pid_of "$1") && kill -0 "$p" 2>/dev/null; }

start() {
	local name=$1
	alive "$name" && { echo "cluster.sh: $name already runs (pid $(pid_of "$name"))"; return; }
	mkdir -p "$dir/pids" "$dir/logs" "$dir/data/$name"
	local -a argv
	mapfile -t argv < <(cmdline "$name")
	CHIO_SERVICE_TOKEN=$token HOME=$dir/data/$name XDG_DATA_HOME=$dir/data/$name XDG_CONFIG_HOME=$dir/data/$name \
		nohup "${argv[@]}" >>"$dir/logs/$name.log" 2>&1 &
	echo $! >"$dir/pids/$name.pid"
	echo "cluster.sh: started $name (pid $!, log $dir/logs/$name.log)"
}

url_of() {
	case $1 in
	ledger-[12]) echo "http://127.0.0.1:1808${1#ledger-}" ;;
	projections) echo http://127.0.0.1:18083 ;;
	edge-[12]) echo "http://127.0.0.1:1809${1#edge-}" ;;
	proxy) echo https://127.0.0.1:18080 ;;
	nats-[123]) echo "http://127.0.0.1:1822$((${1#nats-} + 1))" ;;
	esac
}

ready_path() { case $1 in nats-*) echo /healthz ;; *) echo /readyz ;; esac; }

is_ready() { curl -fsS -o /dev/null --max-time 2 --cacert "$dir/keys/nats/ca.pem" "$(url_of "$1")$(ready_path "$1")"; }

# wait_ready NAME: until its readiness probe answers. A process that exits
# while the cluster is still electing JetStream leaders is restarted (as
# compose's restart: on-failure does), a few times at most.
wait_ready() {
	local deadline=$((SECONDS + ${2:-120})) restarts=0
	until is_ready "$1"; do
		if ! alive "$1"; then
			((restarts < 5)) || die "$1 exited $restarts times; see $dir/logs/$1.log: $(tail -5 "$dir/logs/$1.log")"
			restarts=$((restarts + 1))
			echo "cluster.sh: $1 exited while starting ($(tail -1 "$dir/logs/$1.log")); restarting"
			rm -f "$dir/pids/$1.pid"
			sleep 1
			start "$1"
		fi
		((SECONDS < deadline)) || die "$1 not ready after ${2:-120}s; see $dir/logs/$1.log"
		sleep 0.3
	done
}

up() {
	command -v curl >/dev/null || die "curl is required"
	build
	configs
	"$dir/bin/chio" keygen --out "$dir/keys" --keep --edge edge-1 --edge edge-2 --nats-roles --nats-tls-host 127.0.0.1 --nats-tls-host localhost \
		--https-host 127.0.0.1 --https-host localhost
	for n in nats-1 nats-2 nats-3; do start "$n"; done
	for n in nats-1 nats-2 nats-3; do wait_ready "$n"; done
	for n in ledger-1 ledger-2 projections edge-1 edge-2 proxy; do start "$n"; done
	for n in ledger-1 ledger-2 projections edge-1 edge-2 proxy; do wait_ready "$n"; done
	status
	echo "cluster.sh: up. Agent card: https://127.0.0.1:18080/.well-known/agent-card.json (curl --cacert $dir/keys/nats/ca.pem); callers need a capability from"
	echo "  $dir/bin/chio capability issue --issuer-key $dir/keys/issuer.key --subject HEX --grant hello-a2a-srv/hello_task --output header"
	echo "  receipts and projections are read with the service token: -H \"Authorization: Bearer \$CHIO_SERVICE_TOKEN\" (default cluster-dev-token)"
}

status() {
	local n
	for n in "${names[@]}"; do
		local state=stopped ready=-
		if alive "$n"; then
			state="pid $(pid_of "$n")"
			if is_ready "$n"; then ready=ready; else ready="not ready"; fi
		fi
		printf '%-12s %-12s %-10s %s\n' "$n" "$state" "$ready" "$(url_of "$n")"
	done
	if alive ledger-1 || alive ledger-2; then
		for n in ledger-1 ledger-2; do
			if curl -fsS --max-time 2 "$(url_of $n)/metrics" 2>/dev/null | grep -q '^chio_ledger_writer 1'; then
				echo "writer lease: $n"
			fi
		done
	fi
}

stop() {
	local n p
	for n in "$@"; do
		p=$(pid_of "$n") || continue
		kill -TERM "$p" 2>/dev/null || true
	done
	for n in "$@"; do
		p=$(pid_of "$n") || continue
		for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -KILL "$p" 2>/dev/null || true
		rm -f "$dir/pids/$n.pid"
	done
}

case ${1:-} in
up) up ;;
down)
	stop proxy edge-1 edge-2 projections ledger-1 ledger-2
	stop nats-1 nats-2 nats-3
	echo "cluster.sh: down (state kept in $dir; remove it to start afresh)" ;;
status) status ;;
kill)
	[[ -n ${2:-} ]] || die "kill NAME"
	p=$(pid_of "$2") || die "$2 is not running"
	kill -KILL "$p"; rm -f "$dir/pids/$2.pid"; echo "cluster.sh: killed $2 (pid $p)" ;;
start)
	[[ -n ${2:-} ]] || die "start NAME"
	start "$2"; wait_ready "$2" ;;
stop)
	[[ -n ${2:-} ]] || die "stop NAME"
	alive "$2" || die "$2 is not running"
	stop "$2"; echo "cluster.sh: stopped $2" ;;
restart)
	[[ -n ${2:-} ]] || die "restart NAME"
	stop "$2"; start "$2"; wait_ready "$2" ;;
*) die "usage: scripts/cluster.sh up|down|status|kill NAME|start NAME|stop NAME|restart NAME" ;;
esac
