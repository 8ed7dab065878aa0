# Sourced by the scripts that measure against an S3-compatible server (tier-compare.sh,
# backup-s3.sh).
#
# start_moto LOGDIR: starts moto's server from the virtual environment scripts/setup.sh makes
# ("$PY", target/venv/bin/python) on a free loopback port, waits until it answers, creates the
# bucket `riptide`, exports test credentials, and sets MOTO_PID and MOTO_PORT. Its output goes
# to LOGDIR/moto.log. The caller stops it with `kill "$MOTO_PID"`.
start_moto() {
    MOTO_PORT=$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
    "$PY" -m moto.server -H 127.0.0.1 -p "$MOTO_PORT" >"$1/moto.log" 2>&1 &
    MOTO_PID=$!
    for _ in $(seq 1 200); do curl -s -o /dev/null "http://127.0.0.1:$MOTO_PORT/" && break; sleep 0.1; done
    curl -s -X PUT "http://127.0.0.1:$MOTO_PORT/riptide" >/dev/null
    export AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing
}

# median: the median of the numbers on standard input, one per line.
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
