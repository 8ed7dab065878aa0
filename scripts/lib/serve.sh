# Sourced by the scripts that run stock sysbench against `riptide serve` (sql-compare.sh,
# sql-size.sh).
#
# start_riptide_serve DIR PORT [FLAGS...]: starts "$RIPTIDE" serve on 127.0.0.1:PORT with its
# data in DIR/data and a database `sbtest` (user root, no password), output in
# DIR/serve.{out,err}, and FLAGS appended; waits up to 10 s until it listens and sets
# SERVE_PID. The caller stops it with `kill -TERM "$SERVE_PID"; wait "$SERVE_PID"`.
start_riptide_serve() {
    local dir=$1 port=$2
    shift 2
    mkdir -p "$dir"
    "$RIPTIDE" serve --data-dir "$dir/data" --listen "127.0.0.1:$port" --create-database sbtest "$@" \
        > "$dir/serve.out" 2> "$dir/serve.err" &
    SERVE_PID=$!
    for _ in $(seq 1 100); do
        grep -q 'listening on' "$dir/serve.out" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "riptide serve did not start listening on port $port; see $dir/serve.err" >&2
    return 1
}

# sysbench_riptide_flags PORT: the sysbench connection and table flags for that server
# (TABLES and TABLE_SIZE from the environment), one per line.
sysbench_riptide_flags() {
    printf '%s\n' --db-driver=mysql --mysql-host=127.0.0.1 --mysql-port="$1" --mysql-user=root \
        --mysql-password= --mysql-db=sbtest --tables="$TABLES" --table-size="$TABLE_SIZE"
}
