#!/usr/bin/env bash
# A throwaway Postgres server for the tests: a fresh cluster in DIR on a loopback port, trust
# authentication for the user `flue`, durability off (the tests measure behaviour, not disks).
#
#   postgres.sh start DIR PORT [tls]
#                                initdb if needed, start in the background, print the URL
#   postgres.sh stop DIR         stop it
#   postgres.sh serve-for PID DIR PORT [tls]
#                                start, print the URL, and stop it and delete DIR once process
#                                PID has exited (test binaries that start their own server)
#
# With `tls` the server runs with ssl=on and a certificate for `localhost` (not 127.0.0.1)
# signed by a CA made for it: DIR/tls/ca.crt is that CA, DIR/tls/other-ca.crt one that signed
# nothing (the `openssl` command line makes them, in well under a second).
#
# As root, the cluster belongs to `nobody` (Postgres refuses to run as root). The server
# binaries come from Debian's `postgresql` package (tests/peers/install.sh installs it).
set -euo pipefail

self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"

say() { echo "tests/peers/postgres.sh: $*" >&2; }

bin=""
for candidate in /usr/lib/postgresql/*/bin; do
  [ -x "$candidate/initdb" ] && bin="$candidate"
done
if [ -z "$bin" ] && command -v initdb >/dev/null 2>&1; then bin="$(dirname "$(command -v initdb)")"; fi
[ -n "$bin" ] || { say "no Postgres server binaries (Debian: apt-get install -y postgresql)"; exit 1; }

usage="usage: postgres.sh start DIR PORT [tls] | stop DIR | serve-for PID DIR PORT [tls]"
mode="${1:?$usage}"
watched=""
if [ "$mode" = serve-for ]; then watched="${2:?$usage}"; shift; fi
dir="${2:?$usage}"
port="${3:-}"
tls="${4:-}"
data="$dir/data"

if [ "$(id -u)" = 0 ]; then as=(setpriv --reuid=nobody --regid=nogroup --clear-groups); else as=(); fi

init() {
  mkdir -p "$dir"
  if [ ! -f "$data/PG_VERSION" ]; then
    [ "$(id -u)" = 0 ] && chown nobody:nogroup "$dir"
    "${as[@]}" "$bin/initdb" -D "$data" -U flue --auth=trust --encoding=UTF8 --locale=C.UTF-8 >"$dir/initdb.log" 2>&1 \
      || { cat "$dir/initdb.log" >&2; exit 1; }
  fi
}

# A test CA, a server certificate for `localhost` it signed, and a second CA that signed nothing.
make_certs() {
  local out="$dir/tls" ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
  [ -f "$out/server.crt" ] && return
  mkdir -p "$out"
  {
    openssl req -x509 "${ec[@]}" -keyout "$out/ca.key" -out "$out/ca.crt" -days 3 \
      -subj "/CN=flue test CA" -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req -x509 "${ec[@]}" -keyout "$out/other-ca.key" -out "$out/other-ca.crt" -days 3 \
      -subj "/CN=flue other test CA" -addext basicConstraints=critical,CA:TRUE \
      -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req "${ec[@]}" -keyout "$out/server.key" -out "$out/server.csr" -subj "/CN=localhost"
    printf 'subjectAltName=DNS:localhost\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature\nextendedKeyUsage=serverAuth\n' >"$out/server.ext"
    openssl x509 -req -in "$out/server.csr" -CA "$out/ca.crt" -CAkey "$out/ca.key" \
      -CAcreateserial -out "$out/server.crt" -days 3 -extfile "$out/server.ext"
  } >"$out/openssl.log" 2>&1 || { cat "$out/openssl.log" >&2; exit 1; }
  chmod 600 "$out/server.key"
  [ "$(id -u)" = 0 ] && chown -R nobody:nogroup "$out"
  return 0
}

# One line: pg_ctl pastes it into a shell command.
options() {
  local ssl=""
  [ "$tls" = tls ] && ssl=" -c ssl=on -c ssl_cert_file=$dir/tls/server.crt -c ssl_key_file=$dir/tls/server.key"
  echo "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories=$dir \
-c max_connections=400 -c fsync=off -c synchronous_commit=off -c full_page_writes=off \
-c shared_buffers=64MB$ssl"
}

case "$mode" in
  start)
    [ -n "$port" ] || { say "start needs a port"; exit 1; }
    init
    if [ "$tls" = tls ]; then
      command -v openssl >/dev/null 2>&1 || { say "tls needs the openssl command (Debian: apt-get install -y openssl)"; exit 1; }
      make_certs
    fi
    # shellcheck disable=SC2046
    "${as[@]}" "$bin/pg_ctl" -D "$data" -l "$dir/server.log" -w -o "$(options)" start >/dev/null \
      || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgres://flue@127.0.0.1:$port/postgres"
    ;;
  stop)
    "${as[@]}" "$bin/pg_ctl" -D "$data" -m immediate stop >/dev/null 2>&1 || true
    ;;
  serve-for)
    "$self" start "$dir" "$port" "$tls"
    # The watchdog must not hold the caller's stdout open.
    nohup bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; "$2" stop "$3"; rm -rf "$3"' \
      watchdog "$watched" "$self" "$dir" </dev/null >/dev/null 2>&1 &
    ;;
  *) say "unknown mode $mode"; exit 1 ;;
esac
