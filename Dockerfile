# The relay's container image. The build stage runs the README's build command; the
# runtime stage is a small Debian image with the binary, run as a non-root user, with
# the RocksDB checkpoint on a volume and /readyz as the health check.
FROM rust:1.95-bookworm AS build
# librocksdb-sys generates its bindings with libclang.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p outbox-relay --bin outbox-relay

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/outbox-relay relay \
 && mkdir -p /var/lib/outbox-relay /etc/outbox-relay \
 && chown relay /var/lib/outbox-relay
COPY --from=build /src/target/release/outbox-relay /usr/local/bin/outbox-relay
COPY config/relay.toml /etc/outbox-relay/relay.toml
USER relay
VOLUME /var/lib/outbox-relay
ENV OUTBOX_RELAY_CONFIG=/etc/outbox-relay/relay.toml \
    OUTBOX_RELAY__CHECKPOINT__PATH=/var/lib/outbox-relay/checkpoint \
    OUTBOX_RELAY__HTTP__LISTEN=0.0.0.0:9464
EXPOSE 9464
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s --retries=3 \
  CMD curl -fsS http://127.0.0.1:9464/readyz || exit 1
ENTRYPOINT ["outbox-relay"]
CMD ["run"]
