# syntax=docker/dockerfile:1
# StateServer: build with the Swift toolchain, run on slim Debian as a non-root user.

# ---- build stage -----------------------------------------------------------------------
FROM swift:6.3.1-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libmicrohttpd-dev libsqlite3-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Package.swift ./
COPY Sources ./Sources
COPY Tests ./Tests
# Same command as the Makefile's RELEASE_BUILD.
RUN swift build -c release --product state-server --static-swift-stdlib \
 && install -D .build/release/state-server /out/state-server

# ---- runtime stage ---------------------------------------------------------------------
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends libmicrohttpd12 libsqlite3-0 curl ca-certificates \
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
HEALTHCHECK --interval=10s --timeout=3s --start-period=5s --retries=3 \
  CMD curl -fsS "http://127.0.0.1:${STATE_SERVER_PORT:-8080}/healthz" || exit 1
STOPSIGNAL SIGTERM
ENTRYPOINT ["/usr/local/bin/state-server"]
