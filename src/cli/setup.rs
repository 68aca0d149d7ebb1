//! The commands that set things up: `migrate`, `config` and the broker's `admin`.

use anyhow::Context;
use outbox_relay::config::{Config, ConfigError, DbUrl, PartitionPeriod};
use outbox_relay::ops::admin;
use outbox_relay::store::{MigrateError, PartitionPlan};
use outbox_relay::{db, store};

use super::args::AdminCommand;

pub fn print_config(config: &Config) -> anyhow::Result<()> {
    print!("{}", toml::to_string_pretty(config).context("cannot render the configuration")?);
    Ok(())
}

pub async fn migrate(
    config: &Config,
    admin_url: Option<String>,
    partition: Option<PartitionPeriod>,
    convert: bool,
) -> anyhow::Result<()> {
    let plan = match (partition.or(config.outbox.partition), convert) {
        (None, false) => PartitionPlan::AsItIs,
        (None, true) => anyhow::bail!(ConfigError::Invalid {
            key: "--convert".to_owned(),
            message: "needs a period: give --partition daily|hourly, or set outbox.partition".to_owned(),
        }),
        (Some(period), false) => PartitionPlan::Partitioned(period),
        (Some(period), true) => PartitionPlan::Convert(period),
    };
    let url = admin_url.map_or_else(|| config.primary.url.clone(), DbUrl::new);
    let pool = db::connect_with("primary", &url, &config.primary.tls, 1, &[]).await?;
    let outbox = config.outbox_table();
    let migrated = store::migrate(&pool, &outbox, plan).await;
    pool.disconnect().await.ok();
    let report = match migrated {
        Ok(report) => report,
        Err(MigrateError::Refused(refused)) => return Err(refused.into()),
        Err(MigrateError::Db(e)) => {
            return Err(db::DbError::query("primary", &url, e)).with_context(|| {
                format!("migrating {} failed (the user needs CREATE and ALTER; see --admin-url)", outbox.qualified())
            })
        }
    };
    tracing::info!(
        outbox_created = report.outbox_created,
        applied = ?report.applied,
        added = ?report.added,
        converted = report.converted,
        partitions_added = report.partitions_added,
        table = %outbox.qualified(),
        "migrate finished"
    );
    Ok(())
}

pub async fn admin(command: AdminCommand) -> anyhow::Result<()> {
    match command {
        AdminCommand::CreateTopic { namesrv, cluster, topic, queues, brokers } => {
            admin::create_topic(&namesrv, &cluster, &topic, queues, brokers)
                .await
                .with_context(|| format!("create topic {topic} via {namesrv}"))?;
            println!("topic {topic} ready with {queues} queues");
        }
        AdminCommand::Find { namesrv, topic, key } => {
            let found = admin::find(&namesrv, &topic, &key)
                .await
                .with_context(|| format!("find {key} in {topic} via {namesrv}"))?;
            for line in &found {
                println!("{line}");
            }
            anyhow::ensure!(!found.is_empty(), "no message with key {key} in topic {topic}");
        }
        AdminCommand::Ping { namesrv, topic, queues, find_within } => {
            let within = find_within.map(std::time::Duration::from_secs);
            let probes = admin::ping(&namesrv, &topic, queues, within)
                .await
                .with_context(|| format!("ping {topic} via {namesrv}"))?;
            for probe in probes {
                let found = probe.found_after.map(|after| format!(" found_by_key_after_ms={}", after.as_millis()));
                println!(
                    "SEND_OK broker={} queue={} msg_id={} key={}{}",
                    probe.broker,
                    probe.queue_id,
                    probe.msg_id,
                    probe.key,
                    found.unwrap_or_default()
                );
            }
        }
    }
    Ok(())
}
