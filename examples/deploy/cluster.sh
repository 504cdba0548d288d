#!/usr/bin/env bash
# make cluster: a local ZooKeeper and two metaq-go brokers, for trying
# cluster mode on one machine. Ctrl-C (or SIGTERM) stops the brokers
# gracefully (they unregister from ZooKeeper), then ZooKeeper. A broker
# that dies (kill -9 it to see failures) leaves ZooKeeper and the other
# broker running; the script prints the command that restarts it.
#
#   make cluster                      # ZooKeeper on 2181, brokers on 8123 and 8124,
#                                     # their HTTP (metrics, admin) on 8120 and 8121
#   ZK_PORT=2281 PORT1=9123 PORT2=9124 HTTP1=9120 HTTP2=9121 make cluster  (0: no HTTP)
#   CLUSTER_DIR=/tmp/metaq-cluster make cluster
#
# Needs Debian's zookeeper package (java, /usr/share/java/zookeeper.jar)
# and the binaries `make build` puts in bin/. Everything binds 127.0.0.1;
# data and logs go to $CLUSTER_DIR (default .cluster/, removed by nothing:
# delete it to start from empty).
set -euo pipefail

ZK_PORT=${ZK_PORT:-2181}
PORT1=${PORT1:-8123}
PORT2=${PORT2:-8124}
HTTP1=${HTTP1:-8120}
HTTP2=${HTTP2:-8121}
DIR=${CLUSTER_DIR:-.cluster}
CONFIG=${CONFIG:-conf/server.toml}
BIN=${BIN:-bin}
ZK_JAR=${ZK_JAR:-/usr/share/java/zookeeper.jar}

die() { echo "cluster: $*" >&2; exit 1; }
command -v java >/dev/null || die "no java on PATH: install Debian's zookeeper package (apt-get install zookeeper), or run .ci/services.sh install"
[ -f "$ZK_JAR" ] || die "$ZK_JAR not found: install Debian's zookeeper package"
[ -x "$BIN/metaq-server" ] || die "$BIN/metaq-server not found: run make build"
for p in "$ZK_PORT" "$PORT1" "$PORT2" "$HTTP1" "$HTTP2"; do
	[ "$p" = 0 ] && continue
	if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
		die "port $p is in use (set ZK_PORT, PORT1, PORT2, HTTP1, HTTP2)"
	fi
done

mkdir -p "$DIR/zookeeper/data" "$DIR/broker-1" "$DIR/broker-2"
DIR=$(cd "$DIR" && pwd)
sed -e "s#^dataDir=.*#dataDir=$DIR/zookeeper/data#" -e "s#^clientPort=.*#clientPort=$ZK_PORT#" \
	examples/deploy/zookeeper/zoo.cfg >"$DIR/zookeeper/zoo.cfg"

# The pids: ZooKeeper's in $DIR/zookeeper.pid, broker N's in
# $DIR/broker-N.pid (a broker restarted by hand with the printed command
# writes its new pid there, so Ctrl-C stops it too).
stop() {
	trap - INT TERM EXIT
	echo
	echo "cluster: stopping the brokers (SIGTERM: drain, flush, unregister)"
	local bp=()
	for id in 1 2; do
		[ -f "$DIR/broker-$id.pid" ] && bp+=("$(cat "$DIR/broker-$id.pid")")
	done
	for pid in "${bp[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
	for pid in "${bp[@]}"; do
		wait "$pid" 2>/dev/null || while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	done
	echo "cluster: stopping ZooKeeper"
	kill -TERM "$zk" 2>/dev/null || true
	wait "$zk" 2>/dev/null || true
	echo "cluster: stopped; data and logs are in $DIR"
	exit 0
}
trap stop INT TERM EXIT

echo "cluster: starting ZooKeeper on 127.0.0.1:$ZK_PORT (log $DIR/zookeeper/server.log)"
java -Xms16m -Xmx256m -XX:+UseSerialGC -Djava.awt.headless=true \
	-Dzookeeper.admin.enableServer=false -Dzookeeper.log.dir="$DIR/zookeeper" \
	-cp "$ZK_JAR" org.apache.zookeeper.server.ZooKeeperServerMain "$DIR/zookeeper/zoo.cfg" \
	>"$DIR/zookeeper/server.log" 2>&1 &
zk=$!
echo "$zk" >"$DIR/zookeeper.pid"
zk_deadline=$((SECONDS + 60))
while :; do
	# srvr's reply names the server's mode. Each read waits at most 2 s: a
	# server still starting can accept the connection and neither answer
	# nor close it, and a read without a limit then hung the script (a
	# make test run: nothing after this line for 90 s).
	if (exec 3<>"/dev/tcp/127.0.0.1/$ZK_PORT" && printf srvr >&3 &&
		while IFS= read -r -t 2 line <&3; do case $line in Mode*) exit 0 ;; esac; done && exit 1) 2>/dev/null; then
		break
	fi
	kill -0 "$zk" 2>/dev/null || die "ZooKeeper exited; see $DIR/zookeeper/server.log"
	[ "$SECONDS" -ge "$zk_deadline" ] && die "ZooKeeper not serving after 60 s; see $DIR/zookeeper/server.log"
	sleep 0.5
done

# start_cmd N prints the command line that starts broker N.
start_cmd() {
	local port=PORT$1 http=HTTP$1
	echo "$BIN/metaq-server --config $CONFIG --zk 127.0.0.1:$ZK_PORT --broker-id $1" \
		"--host 127.0.0.1 --port ${!port} --http-port ${!http} --data-dir $DIR/broker-$1"
}
for id in 1 2; do
	port=PORT$id
	echo "cluster: starting broker $id on 127.0.0.1:${!port} (log $DIR/broker-$id.log)"
	$(start_cmd $id) >"$DIR/broker-$id.log" 2>&1 &
	echo $! >"$DIR/broker-$id.pid"
done
for id in 1 2; do
	for i in $(seq 1 100); do
		grep -q "metaq-server ready on" "$DIR/broker-$id.log" && break
		kill -0 "$(cat "$DIR/broker-$id.pid")" 2>/dev/null || die "broker $id exited; see $DIR/broker-$id.log"
		[ "$i" = 100 ] && die "broker $id not ready after 50 s; see $DIR/broker-$id.log"
		sleep 0.5
	done
done

cat <<MSG
cluster: ready. In another terminal:
  $BIN/metaq cluster --zk 127.0.0.1:$ZK_PORT
  echo hello | $BIN/metaq produce --zk 127.0.0.1:$ZK_PORT --topic meta-test
  $BIN/metaq consume --zk 127.0.0.1:$ZK_PORT --topic meta-test --group g1 --count 1
  $BIN/metaq group describe g1 --zk 127.0.0.1:$ZK_PORT
  /usr/share/zookeeper/bin/zkCli.sh -server 127.0.0.1:$ZK_PORT ls /meta/brokers/ids
Ctrl-C stops everything.
MSG
if [ -n "${CLUSTER_ONESHOT:-}" ]; then
	exit 0 # tests: stop at once (the EXIT trap stops everything)
fi
# Watch: a broker that exits is reported with the command that restarts
# it, and the rest keep running; only ZooKeeper's exit stops everything.
# This polls rather than `wait -n`: a child that died before wait was
# called is not waited for again, and a broker restarted by hand is not
# our child at all.
reported=("" "" "")
while :; do
	if ! kill -0 "$zk" 2>/dev/null; then
		status=0
		wait "$zk" 2>/dev/null || status=$?
		echo "cluster: ZooKeeper exited (status $status; see $DIR/zookeeper/server.log); stopping the brokers" >&2
		stop
	fi
	for id in 1 2; do
		pid=$(cat "$DIR/broker-$id.pid" 2>/dev/null || true)
		[ -n "$pid" ] && [ "$pid" != "${reported[$id]}" ] || continue
		kill -0 "$pid" 2>/dev/null && continue
		status=0
		wait "$pid" 2>/dev/null || status=$?
		how="status $status"
		[ "$status" = 127 ] && how="not started by this script"
		reported[$id]=$pid
		cat >&2 <<MSG
cluster: broker $id exited ($how; see $DIR/broker-$id.log).
  ZooKeeper and the other broker keep running. Restart broker $id in another terminal with:
  $(start_cmd $id) 2>>$DIR/broker-$id.log & echo \$! > $DIR/broker-$id.pid
MSG
	done
	sleep 0.5
done
