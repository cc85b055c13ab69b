#!/bin/sh
# Installs the `flue` binary from a release archive, after checking the archive's SHA-256
# checksum against the checksum file published beside it.
#
#   curl -fsSL https://raw.githubusercontent.com/flue-rs/flue/main/install.sh | sh
#   sh install.sh --version v0.1.0 --dir /usr/local/bin
#
# Options (or the environment variable named in brackets):
#   --dir DIR        where to put `flue` (FLUE_INSTALL_DIR; default: ~/.local/bin)
#   --version TAG    a release tag such as v0.1.0, or `latest` (FLUE_VERSION; default: latest)
#   --base-url URL   the folder holding the archives, instead of the GitHub release of TAG:
#                    a mirror, http://127.0.0.1:8000 or file:///path/to/dist (FLUE_BASE_URL)
#   --target TRIPLE  the archive to take, instead of this machine's (FLUE_TARGET)
#
# The archives are `flue-TARGET.tar.gz` with `flue-TARGET.tar.gz.sha256` beside them, as
# `cargo xtask dist` writes them. Nothing is installed unless the checksum matches.

set -eu

repo_url="https://github.com/flue-rs/flue"
dir="${FLUE_INSTALL_DIR:-${HOME}/.local/bin}"
version="${FLUE_VERSION:-latest}"
base_url="${FLUE_BASE_URL:-}"
target="${FLUE_TARGET:-}"

fail() {
    echo "install.sh: $*" >&2
    exit 1
}

while [ $# -gt 0 ]; do
    case "$1" in
        --dir) [ $# -ge 2 ] || fail "--dir needs a folder"; dir="$2"; shift 2 ;;
        --version) [ $# -ge 2 ] || fail "--version needs a tag (v0.1.0) or latest"; version="$2"; shift 2 ;;
        --base-url) [ $# -ge 2 ] || fail "--base-url needs a URL"; base_url="$2"; shift 2 ;;
        --target) [ $# -ge 2 ] || fail "--target needs a target triple"; target="$2"; shift 2 ;;
        -h|--help) echo "usage: install.sh [--dir DIR] [--version TAG|latest] [--base-url URL] [--target TRIPLE]"; exit 0 ;;
        *) fail "unknown option $1 (try --help)" ;;
    esac
done

# The release archives built for this machine: Linux (glibc) and macOS, on x86_64 and arm64.
detect_target() {
    os=$(uname -s)
    arch=$(uname -m)
    case "$arch" in
        x86_64|amd64) arch=x86_64 ;;
        aarch64|arm64) arch=aarch64 ;;
        *) fail "no release archive for the $arch processor; build from source: cargo install --git $repo_url flue-cli --locked" ;;
    esac
    case "$os" in
        Linux)
            if ls /lib/ld-musl-* >/dev/null 2>&1; then
                fail "the release archives need glibc and this Linux uses musl; build from source: cargo install --git $repo_url flue-cli --locked"
            fi
            echo "${arch}-unknown-linux-gnu" ;;
        Darwin)
            # A shell under Rosetta reports x86_64 on Apple silicon; take the native build.
            if [ "$arch" = x86_64 ] && [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || echo 0)" = 1 ]; then
                arch=aarch64
            fi
            echo "${arch}-apple-darwin" ;;
        *) fail "no release archive for $os; build from source: cargo install --git $repo_url flue-cli --locked" ;;
    esac
}

download() {
    if command -v curl >/dev/null 2>&1; then
        curl -fsSL -o "$2" "$1" || fail "could not download $1"
    elif command -v wget >/dev/null 2>&1; then
        wget -q -O "$2" "$1" || fail "could not download $1"
    else
        fail "needs curl or wget to download $1"
    fi
}

sha256_of() {
    if command -v sha256sum >/dev/null 2>&1; then
        sha256sum "$1" | cut -d ' ' -f 1
    elif command -v shasum >/dev/null 2>&1; then
        shasum -a 256 "$1" | cut -d ' ' -f 1
    elif command -v openssl >/dev/null 2>&1; then
        openssl dgst -sha256 "$1" | sed 's/^.*= *//'
    else
        fail "needs sha256sum, shasum or openssl to check the download"
    fi
}

[ -n "$target" ] || target=$(detect_target)
if [ -z "$base_url" ]; then
    if [ "$version" = latest ]; then
        base_url="$repo_url/releases/latest/download"
    else
        base_url="$repo_url/releases/download/$version"
    fi
fi
archive="flue-${target}.tar.gz"

tmp=$(mktemp -d 2>/dev/null || mktemp -d -t flue-install)
trap 'rm -rf "$tmp"' EXIT INT TERM

echo "downloading $base_url/$archive" >&2
download "$base_url/$archive" "$tmp/$archive"
download "$base_url/$archive.sha256" "$tmp/$archive.sha256"

expected=$(cut -d ' ' -f 1 < "$tmp/$archive.sha256" | tr 'A-F' 'a-f')
actual=$(sha256_of "$tmp/$archive")
case "$expected" in
    *[!0-9a-f]*|"") fail "$archive.sha256 holds no SHA-256 checksum; nothing was installed" ;;
esac
if [ "$expected" != "$actual" ]; then
    fail "checksum mismatch for $archive: expected $expected, got $actual; nothing was installed"
fi

tar -xzf "$tmp/$archive" -C "$tmp" || fail "could not unpack $archive"
binary="$tmp/flue-${target}/flue"
[ -f "$binary" ] || fail "$archive holds no flue-${target}/flue"

mkdir -p "$dir" || fail "could not create $dir"
# Copy beside the old binary, then rename over it: a running flue keeps its file.
cp "$binary" "$dir/.flue.new.$$" || fail "could not write to $dir"
chmod 755 "$dir/.flue.new.$$"
mv -f "$dir/.flue.new.$$" "$dir/flue"

installed=$("$dir/flue" --version 2>/dev/null || echo flue)
echo "installed $installed to $dir/flue" >&2
case ":${PATH}:" in
    *":$dir:"*) ;;
    *) echo "$dir is not on your PATH; add it, e.g. export PATH=\"$dir:\$PATH\"" >&2 ;;
esac
