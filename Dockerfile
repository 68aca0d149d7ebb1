# The relay's container image. The build stage runs the README's build command, the
# dependencies first in a layer of their own (a change to the relay's code does not
# rebuild RocksDB); the runtime stage is a small Debian image with the binary, run as a
# non-root user, with the RocksDB checkpoint on a volume and /healthz (liveness) as the
# health check: an orchestrator restarts a wedged relay, not one waiting out a broker
# outage. The image holds no configuration: mount yours at /etc/outbox-relay/relay.toml
# (and its password files), see docs/deployment.md.
FROM rust:1.95-bookworm AS build
# librocksdb-sys generates its bindings with libclang.
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Cargo.toml Cargo.lock ./
COPY crates/outbox-kit/Cargo.toml crates/outbox-kit/
COPY crates/outbox-bench/Cargo.toml crates/outbox-bench/
COPY crates/outbox-chaos/Cargo.toml crates/outbox-chaos/
COPY crates/test-support/Cargo.toml crates/test-support/
RUN for crate in . crates/*; do mkdir -p "$crate/src" && touch "$crate/src/lib.rs"; done \
 && echo 'fn main() {}' > src/main.rs \
 && cargo build --release --locked -p outbox-relay --bin outbox-relay
COPY . .
# The sources copied in may be older than the placeholders built above.
RUN find src crates -name '*.rs' -exec touch {} +
RUN cargo build --release --locked -p outbox-relay --bin outbox-relay

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --uid 10001 --home-dir /var/lib/outbox-relay relay \
 && mkdir -p /var/lib/outbox-relay /etc/outbox-relay \
 && chown relay /var/lib/outbox-relay
COPY --from=build /src/target/release/outbox-relay /usr/local/bin/outbox-relay
USER 10001
VOLUME /var/lib/outbox-relay
# Where the configuration is looked for; nothing of it is set here: an environment
# variable would silently win over the mounted file (the shipped configurations set
# checkpoint.path to the volume and http.listen to 0.0.0.0:9464).
ENV OUTBOX_RELAY_CONFIG=/etc/outbox-relay/relay.toml
EXPOSE 9464
STOPSIGNAL SIGTERM
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD curl -fsS http://127.0.0.1:9464/healthz || exit 1
ENTRYPOINT ["outbox-relay"]
CMD ["run"]
