# syntax=docker/dockerfile:1
# StateServer: build with the Swift toolchain, run on slim Debian as a non-root user.
#
# The runtime image is debian:bookworm-slim (about 75 MB), libmicrohttpd12 and libsqlite3-0 with
# the libraries they pull in (GnuTLS and its kin, about 10 MB), ca-certificates, and the
# stripped state-server binary (about 80 MB; the Swift runtime is linked in statically): about
# 165 MB. No shell tools are added: the health check is the binary's own `healthcheck`.

# ---- build stage -----------------------------------------------------------------------
FROM swift:6.3.1-bookworm AS build
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libmicrohttpd-dev libsqlite3-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Only what the build reads: a change to Tests/, docs/ or scripts/ leaves this layer cached.
COPY Package.swift ./
COPY Sources ./Sources
# Same command as the Makefile's RELEASE_BUILD.
RUN env -i PATH="$PATH" HOME="$HOME" swift build -c release --product state-server --static-swift-stdlib \
 && install -D .build/release/state-server /out/state-server \
 && strip /out/state-server

# ---- runtime stage ---------------------------------------------------------------------
FROM debian:bookworm-slim AS runtime
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends libmicrohttpd12 libsqlite3-0 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --user-group --home-dir /app --shell /usr/sbin/nologin stateserver \
 && mkdir -p /app/config /data \
 && chown stateserver:stateserver /data
COPY --from=build /out/state-server /usr/local/bin/state-server
COPY config/state-server.yaml /app/config/state-server.yaml
WORKDIR /app
# Configuration through the environment (any key: STATE_SERVER_<KEY>, see the config file).
ENV STATE_SERVER_CONFIG=/app/config/state-server.yaml \
    STATE_SERVER_HOST=0.0.0.0 \
    STATE_SERVER_PORT=8080 \
    STATE_SERVER_STORAGE=sqlite:/data/state-server.db
VOLUME ["/data"]
EXPOSE 8080
USER stateserver
# `state-server healthcheck` reads the same settings as the server (STATE_SERVER_PORT, the
# config file), GETs /readyz on 127.0.0.1 and exits 0 when it answers 200, 1 otherwise.
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD ["/usr/local/bin/state-server", "healthcheck"]
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/state-server"]
