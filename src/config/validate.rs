//! Semantic checks that types alone cannot express (ranges, URL shapes, names).

use super::{CleanupConfig, Config, ConfigError, DbUrl, Mode, ReconcileConfig, SourceConfig, VerifyConfig};

/// Checks every value the relay relies on; the first problem is returned.
pub fn validate(config: &Config) -> Result<(), ConfigError> {
    if config.mode == Mode::Binlog {
        check_source(config.source()?)?;
    }
    check_db_url("primary.url", &config.primary.url)?;
    config.primary.tls.validate("primary")?;
    at_least("primary.pool_max", config.primary.pool_max as u64, 1)?;
    check_identifier("outbox.table", &config.outbox.table)?;
    match config.outbox_schema() {
        Some(schema) => check_identifier("outbox.schema", schema)?,
        None => {
            return Err(ConfigError::invalid(
                "outbox.schema",
                "nothing",
                "a schema name, or a database in primary.url (mysql://user:pass@host:3306/app)",
            ))
        }
    }
    check_rocketmq(config)?;
    at_least("rocketmq.timer_max_delay_s", config.rocketmq.timer_max_delay_s, 1)?;
    at_least("lanes.batch_size", config.lanes.batch_size as u64, 1)?;
    check_batch_fits_budget(config)?;
    at_least(
        "lanes.max_in_flight_bytes",
        config.lanes.max_in_flight_bytes as u64,
        config.rocketmq.max_message_bytes as u64,
    )?;
    at_most("lanes.max_in_flight", config.lanes.max_in_flight as u64, MAX_BUDGET)?;
    at_most("lanes.max_in_flight_bytes", config.lanes.max_in_flight_bytes as u64, MAX_BUDGET)?;
    at_least("retry.backoff_initial_ms", config.retry.backoff_initial_ms, 1)?;
    at_least("retry.backoff_max_ms", config.retry.backoff_max_ms, config.retry.backoff_initial_ms)?;
    at_least("sweep.interval_ms", crate::time::millis(config.sweep.interval(config.mode)), 10)?;
    at_least("sweep.batch", config.sweep.batch as u64, 1)?;
    at_least("sweep.lease_ms", config.sweep.lease_ms, 1_000)?;
    check_lease_length(config)?;
    check_lease_name(&config.lease_name())?;
    at_least("checkpoint.interval_ms", config.checkpoint.interval_ms, 1)?;
    at_least("runtime.worker_threads", config.runtime.worker_threads as u64, 1)?;
    check_cleanup(&config.cleanup)?;
    check_verify(&config.verify)?;
    check_reconcile(&config.reconcile)?;
    if config.checkpoint.path.as_os_str().is_empty() {
        return Err(ConfigError::invalid("checkpoint.path", "\"\"", "a directory path for the RocksDB checkpoint"));
    }
    if config.http.listen.parse::<std::net::SocketAddr>().is_err() {
        return Err(ConfigError::invalid(
            "http.listen",
            format!("{:?}", config.http.listen),
            "ip:port, e.g. 127.0.0.1:9464",
        ));
    }
    if let Some(endpoint) = &config.traces.otlp_endpoint {
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(ConfigError::invalid(
                "traces.otlp_endpoint",
                format!("{endpoint:?}"),
                "the collector's OTLP/HTTP address, e.g. http://otel-collector:4318 (or no key: no traces)",
            ));
        }
    }
    if tracing_subscriber::EnvFilter::try_new(&config.log.level).is_err() {
        return Err(ConfigError::invalid(
            "log.level",
            format!("{:?}", config.log.level),
            "a tracing filter such as info or outbox_relay=debug,info",
        ));
    }
    Ok(())
}

fn check_source(source: &SourceConfig) -> Result<(), ConfigError> {
    check_db_url("source.url", &source.url)?;
    source.tls.validate("source")?;
    if source.server_id == 0 {
        return Err(ConfigError::invalid(
            "source.server_id",
            0,
            "a non-zero replica server_id unique among the source's replicas",
        ));
    }
    at_least("source.heartbeat_ms", source.heartbeat_ms, 100)?;
    at_least("source.max_downtime_secs", source.max_downtime_secs, 1)
}

fn check_rocketmq(config: &Config) -> Result<(), ConfigError> {
    let mq = &config.rocketmq;
    let addresses_ok = !mq.namesrv.is_empty()
        && mq
            .namesrv
            .split(';')
            .all(|a| a.rsplit_once(':').is_some_and(|(h, p)| !h.is_empty() && p.parse::<u16>().is_ok()));
    if !addresses_ok {
        return Err(ConfigError::invalid("rocketmq.namesrv", format!("{:?}", mq.namesrv), "host:port[;host:port...]"));
    }
    if mq.producer_group.is_empty() {
        return Err(ConfigError::invalid("rocketmq.producer_group", "\"\"", "a producer group name"));
    }
    at_least("rocketmq.send_timeout_ms", mq.send_timeout_ms, 10)?;
    at_least("rocketmq.max_message_bytes", mq.max_message_bytes as u64, 1)?;
    if mq.access_key.is_some() != mq.secret_key.is_some() {
        return Err(ConfigError::Invalid {
            key: "rocketmq.access_key / rocketmq.secret_key".to_owned(),
            message: "ACL credentials need both the access key and the secret key (or secret_key_file), or neither"
                .to_owned(),
        });
    }
    if mq.access_key.as_deref() == Some("") {
        return Err(ConfigError::invalid("rocketmq.access_key", "\"\"", "the ACL access key, or no access_key"));
    }
    for (topic, topic_config) in &mq.topics {
        let key = format!("rocketmq.topics.{topic}.queue_count");
        if topic_config.queue_count == 0 || topic_config.queue_count > 1024 {
            return Err(ConfigError::invalid(&key, topic_config.queue_count, "1..=1024"));
        }
    }
    Ok(())
}

fn check_db_url(key: &str, url: &DbUrl) -> Result<(), ConfigError> {
    mysql_async::Opts::from_url(url.expose())
        .map(drop)
        .map_err(|e| ConfigError::invalid(key, url, &format!("mysql://user:password@host:port/database ({e})")))
}

fn check_identifier(key: &str, name: &str) -> Result<(), ConfigError> {
    let ok =
        !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid(
            key,
            format!("{name:?}"),
            "a MySQL identifier of letters, digits, _ or $ (1..=64 chars)",
        ))
    }
}

/// A term ends a send timeout (plus half a second) before its lease does, so a send
/// that passed the term check is over before another instance may publish; the rest
/// must leave room for renewals.
fn check_lease_length(config: &Config) -> Result<(), ConfigError> {
    let min = 2 * (config.rocketmq.send_timeout_ms + 500);
    if config.leader.lease_ms >= min {
        return Ok(());
    }
    Err(ConfigError::invalid(
        "leader.lease_ms",
        config.leader.lease_ms,
        &format!("at least 2 x (rocketmq.send_timeout_ms + 500) = {min}, so a send started at a term's end is over before another instance may publish"),
    ))
}

/// The lease name appears in the relay's SQL as a literal: letters, digits and `_.$:-` only.
fn check_lease_name(name: &str) -> Result<(), ConfigError> {
    let ok =
        !name.is_empty() && name.len() <= 128 && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.$:-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(ConfigError::invalid("leader.name", format!("{name:?}"), "1..=128 letters, digits or _ . $ : -"))
    }
}

/// The largest in-flight budget (events or bytes): far beyond any sensible setting,
/// and within what the budget's semaphores can count.
const MAX_BUDGET: u64 = 1 << 40;

fn at_most(key: &str, value: u64, max: u64) -> Result<(), ConfigError> {
    if value <= max {
        Ok(())
    } else {
        Err(ConfigError::invalid(key, value, &format!("at most {max}")))
    }
}

/// A reconciliation reads the lookback's rows: at most once a second, over at least
/// an hour (its buckets are hours).
fn check_reconcile(reconcile: &ReconcileConfig) -> Result<(), ConfigError> {
    if reconcile.interval_ms == 0 {
        return Ok(());
    }
    at_least("reconcile.interval_ms", reconcile.interval_ms, 1_000)?;
    at_least("reconcile.lookback_secs", reconcile.lookback_secs, 3_600)?;
    if reconcile.consumer_url.is_some() && reconcile.consumer_table.is_none() {
        return Err(ConfigError::Invalid {
            key: "reconcile.consumer_url".to_owned(),
            message: "is set without reconcile.consumer_table: name the consumer kit's dedup table (e.g. event_dedup)"
                .to_owned(),
        });
    }
    Ok(())
}

/// A scheduled sample is a few key-index queries, at most once a second.
fn check_verify(verify: &VerifyConfig) -> Result<(), ConfigError> {
    if verify.interval_ms == 0 {
        return Ok(());
    }
    at_least("verify.interval_ms", verify.interval_ms, 1_000)?;
    at_least("verify.sample", verify.sample as u64, 1)?;
    at_most("verify.sample", verify.sample as u64, 1_000)
}

/// A scheduled cleanup deletes in batches a statement can name, and runs at most
/// every second.
fn check_cleanup(cleanup: &CleanupConfig) -> Result<(), ConfigError> {
    if cleanup.interval_ms == 0 {
        return Ok(());
    }
    at_least("cleanup.interval_ms", cleanup.interval_ms, 1_000)?;
    at_least("cleanup.retention_secs", cleanup.retention_secs, 1)?;
    at_most("cleanup.retention_secs", cleanup.retention_secs, 3_650 * 86_400)?;
    at_least("cleanup.batch", cleanup.batch as u64, 1)?;
    at_most("cleanup.batch", cleanup.batch as u64, 1_000)
}

/// A lane's batch must fit in the in-flight budget. Named both ways, since a budget set
/// below an unchanged default batch size is fixed by either key.
fn check_batch_fits_budget(config: &Config) -> Result<(), ConfigError> {
    let (budget, batch) = (config.lanes.max_in_flight, config.lanes.batch_size);
    if budget >= batch {
        return Ok(());
    }
    Err(ConfigError::invalid(
        "lanes.max_in_flight",
        budget,
        &format!("at least lanes.batch_size ({batch}), or a lanes.batch_size of at most {budget}"),
    ))
}

fn at_least(key: &str, value: u64, min: u64) -> Result<(), ConfigError> {
    if value >= min {
        Ok(())
    } else {
        Err(ConfigError::invalid(key, value, &format!("at least {min}")))
    }
}
