#!/usr/bin/env bash
# A throwaway PostgreSQL server for the tests that need one (two `attendout advise` workers on one study).
#
#   .ci/postgres.sh start DIR   start a server whose data and unix socket live in DIR (made if missing),
#                               create the database "attendout" and print its URL (the only line on stdout)
#   .ci/postgres.sh stop DIR    stop that server (if it runs) and remove DIR
#
# Only a unix socket in DIR is listened on (no TCP port, so nothing can collide), with trust authentication;
# DIR is readable by the server's user only. The server refuses to run as root: as root, it runs as the
# user postgres (made if missing). Without the server's programs (initdb, pg_ctl) it installs Debian's
# postgresql package as root, else it fails. Any failure exits non-zero with the server's log on stderr.
set -euo pipefail

die() {
    echo "postgres.sh: $*" >&2
    exit 1
}

# The folder of the server's programs: where initdb on PATH really lives, else Debian's newest
# /usr/lib/postgresql/VERSION/bin (its initdb and pg_ctl are not on PATH).
find_bin() {
    local candidates=() dir
    if command -v initdb >/dev/null; then
        candidates+=("$(dirname "$(readlink -f "$(command -v initdb)")")")
    fi
    while IFS= read -r dir; do
        candidates+=("$dir")
    done < <(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r)
    for dir in "${candidates[@]}"; do
        if [[ -x $dir/initdb && -x $dir/pg_ctl && -x $dir/createdb ]]; then
            echo "$dir"
            return 0
        fi
    done
    return 1
}

# Run a command as the server's user (ourselves unless root), from a folder that user can enter.
as_server() {
    if [[ $(id -u) == 0 ]]; then
        (cd / && runuser -u postgres -- "$@")
    else
        (cd / && "$@")
    fi
}

start() {
    local dir=$1 bin port=5432
    bin=$(find_bin) || {
        [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null ||
            die "no PostgreSQL server programs (initdb, pg_ctl) found; install Debian's postgresql package"
        echo "postgres.sh: installing Debian's postgresql package" >&2
        { DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql; } >&2 ||
            die "apt-get could not install Debian's postgresql package"
        bin=$(find_bin) || die "Debian's postgresql package installed no initdb, pg_ctl and createdb"
    }
    if [[ $(id -u) == 0 ]] && ! id -u postgres >/dev/null 2>&1; then
        useradd --system --user-group --no-create-home --shell /usr/sbin/nologin postgres
    fi
    mkdir -p "$dir"
    [[ -z $(ls -A "$dir") ]] || die "$dir is not empty"
    dir=$(cd "$dir" && pwd)
    if [[ $(id -u) == 0 ]]; then chown postgres: "$dir"; fi
    chmod 700 "$dir"
    as_server "$bin/initdb" -D "$dir/data" -U attendout -A trust -E UTF8 --locale=C >"$dir/initdb.log" 2>&1 ||
        { cat "$dir/initdb.log" >&2; die "initdb failed (with $bin/initdb)"; }
    # a test server: no TCP, the socket in DIR; durability off (the data is thrown away)
    cat >>"$dir/data/postgresql.conf" <<EOF
listen_addresses = ''
unix_socket_directories = '$dir'
port = $port
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
    as_server "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 start >/dev/null ||
        { cat "$dir/server.log" >&2 || true; die "the server did not start (with $bin/pg_ctl)"; }
    as_server "$bin/createdb" -h "$dir" -p "$port" -U attendout attendout ||
        { cat "$dir/server.log" >&2; die "the server started but refused to create a database"; }
    echo "postgres.sh: PostgreSQL $("$bin/pg_ctl" --version | awk '{print $3}') on $dir (socket)" >&2
    echo "postgresql://attendout@/attendout?host=$dir&port=$port"
}

stop() {
    local dir=$1 bin
    if [[ -f $dir/data/postmaster.pid ]]; then
        bin=$(find_bin) || die "cannot stop the server in $dir: no pg_ctl found"
        as_server "$bin/pg_ctl" -D "$dir/data" -m fast -w -t 60 stop >/dev/null ||
            die "the server in $dir did not stop (its log: $dir/server.log)"
    fi
    rm -rf "$dir"
}

[[ $# == 2 && ($1 == start || $1 == stop) ]] || die "usage: $0 start|stop DIR"
"$1" "$2"
