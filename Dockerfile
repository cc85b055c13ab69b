# syntax=docker/dockerfile:1
# `flue serve` in a container: built from this checkout, run as an unprivileged user on
# Debian slim. The server binds 0.0.0.0 inside the container, which flue allows only with a
# token, so the container refuses to start without FLUE_TOKEN:
#
#   docker build -t flue .
#   docker run --rm -p 3000:3000 -e FLUE_TOKEN="$(openssl rand -hex 32)" \
#       -v "$PWD/my-agents:/workspace" --user "$(id -u):$(id -g)" flue
#
# The workspace (agents/, flue.toml, .env) is mounted at /workspace; conversations are kept in
# /workspace/.flue/flue.db, so the mounted folder must be writable by the container's user
# (`--user` above). Arguments after the image name replace the default command, e.g.
# `flue serve --host 0.0.0.0 --store postgres://...` to keep them in Postgres instead.
#
# A workspace that declares hooks, MCP servers, a host sandbox, schedules or endpoints of its
# own runs only once trusted (docs/security.md#workspace-trust); the container has no trust
# records, so add `-e FLUE_TRUST=1` for a workspace you trust.

ARG RUST_VERSION=1.95
ARG DEBIAN_RELEASE=bookworm

FROM rust:${RUST_VERSION}-slim-${DEBIAN_RELEASE} AS build
WORKDIR /src
COPY . .
# The `release` profile (no whole-program LTO) builds in minutes with under 2 GB of memory;
# PROFILE=dist gives the smaller binary of the release archives but needs about 4 GB.
ARG PROFILE=release
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --locked --profile "${PROFILE}" -p flue-cli \
    && cp "target/${PROFILE}/flue" /usr/local/bin/flue

FROM debian:${DEBIAN_RELEASE}-slim
# CA certificates for HTTPS to model providers and MCP servers; bash for the local sandbox's
# commands is part of the base image. Unpinned: the certificates should be the current ones.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 flue \
    && useradd --system --uid 10001 --gid flue --create-home --home-dir /home/flue flue \
    && mkdir /workspace \
    && chown flue:flue /workspace
COPY --from=build /usr/local/bin/flue /usr/local/bin/flue
USER 10001:10001
WORKDIR /workspace
EXPOSE 3000
ENTRYPOINT ["flue"]
CMD ["serve", "--host", "0.0.0.0", "--port", "3000", "--root", "/workspace"]
