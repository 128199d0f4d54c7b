#!/usr/bin/env bash
# A Spark standalone cluster on this machine, from the pyspark package (no Spark download):
# one master and N workers, all on 127.0.0.1, stopped by their process ids.
#
#   scripts/spark-cluster.sh start [WORKERS]   # default 2 workers of 1 core and 2 GiB each
#   scripts/spark-cluster.sh status
#   scripts/spark-cluster.sh stop
#
# Then run the job against it: PENUMBRA_SPARK_MASTER=spark://127.0.0.1:$PENUMBRA_CLUSTER_PORT
# Settings: PENUMBRA_CLUSTER_DIR (pid files and logs, default var/cluster), PENUMBRA_CLUSTER_PORT
# (7077), PENUMBRA_CLUSTER_UI_PORT (master web UI, 8090; workers use the next ports),
# PENUMBRA_WORKER_CORES (1), PENUMBRA_WORKER_MEMORY (2g).
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PENUMBRA_PYTHON:-$PWD/.venv/bin/python}"
dir="${PENUMBRA_CLUSTER_DIR:-$PWD/var/cluster}"
port="${PENUMBRA_CLUSTER_PORT:-7077}"
ui="${PENUMBRA_CLUSTER_UI_PORT:-8090}"
cores="${PENUMBRA_WORKER_CORES:-1}"
memory="${PENUMBRA_WORKER_MEMORY:-2g}"

export SPARK_HOME="$("$python" -c 'import os, pyspark; print(os.path.dirname(pyspark.__file__))')"
export SPARK_LOCAL_IP=127.0.0.1
export SPARK_PUBLIC_DNS=127.0.0.1
export PYSPARK_PYTHON="$python"
export SPARK_LOG_DIR="$dir"

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

wait_port() {   # until something listens on 127.0.0.1:$1, or fail after 60 s
    for _ in $(seq 600); do
        if "$python" -c "import socket,sys; socket.create_connection(('127.0.0.1', $1), 0.2)" 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "nothing listens on 127.0.0.1:$1; see $dir" >&2
    return 1
}

start() {
    local workers="${1:-2}"
    mkdir -p "$dir"
    if alive "$dir/master.pid"; then
        echo "a cluster already runs (master pid $(cat "$dir/master.pid"))"
        return 0
    fi
    nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.master.Master \
        --host 127.0.0.1 --port "$port" --webui-port "$ui" >"$dir/master.log" 2>&1 &
    echo $! >"$dir/master.pid"
    wait_port "$port"
    for n in $(seq "$workers"); do
        nohup "$SPARK_HOME/bin/spark-class" org.apache.spark.deploy.worker.Worker \
            --host 127.0.0.1 --cores "$cores" --memory "$memory" --webui-port "$((ui + n))" \
            --work-dir "$dir/work-$n" "spark://127.0.0.1:$port" >"$dir/worker-$n.log" 2>&1 &
        echo $! >"$dir/worker-$n.pid"
    done
    for n in $(seq "$workers"); do
        for _ in $(seq 600); do
            grep -q "Successfully registered with master" "$dir/worker-$n.log" 2>/dev/null && break
            alive "$dir/worker-$n.pid" || { echo "worker $n stopped; see $dir/worker-$n.log" >&2; exit 1; }
            sleep 0.1
        done
    done
    echo "spark://127.0.0.1:$port: master and $workers worker(s) running (logs in $dir)"
}

stop() {
    local stopped=0
    for pidfile in "$dir"/worker-*.pid "$dir"/master.pid; do
        [ -f "$pidfile" ] || continue
        if alive "$pidfile"; then
            kill "$(cat "$pidfile")" 2>/dev/null || true
            for _ in $(seq 100); do alive "$pidfile" || break; sleep 0.1; done
            alive "$pidfile" && kill -9 "$(cat "$pidfile")" 2>/dev/null || true
            stopped=$((stopped + 1))
        fi
        rm -f "$pidfile"
    done
    echo "stopped $stopped process(es)"
}

status() {
    local any=1
    for pidfile in "$dir"/master.pid "$dir"/worker-*.pid; do
        [ -f "$pidfile" ] || continue
        if alive "$pidfile"; then echo "$(basename "$pidfile" .pid): running (pid $(cat "$pidfile"))"; any=0
        else echo "$(basename "$pidfile" .pid): stopped"; fi
    done
    return $any
}

case "${1:-}" in
    start) start "${2:-2}" ;;
    stop) stop ;;
    status) status ;;
    *) echo "usage: $0 start [WORKERS] | stop | status" >&2; exit 2 ;;
esac
