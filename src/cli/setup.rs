//! The commands that set things up: `migrate`, `config` and the broker's `admin`.

use anyhow::Context;
use outbox_relay::config::{url_with_password_file, Config, ConfigError, DbUrl};
use outbox_relay::ops::admin::{self, NameServer};
use outbox_relay::store::{MigrateError, PartitionPlan};
use outbox_relay::{db, store};

use super::args::{AdminCommand, MigrateArgs, NamesrvArg};

pub fn print_config(config: &Config) -> anyhow::Result<()> {
    print!("{}", toml::to_string_pretty(config).context("cannot render the configuration")?);
    Ok(())
}

pub async fn migrate(config: &Config, args: MigrateArgs) -> anyhow::Result<()> {
    let MigrateArgs { admin_url, admin_password_file, partition, convert, dry_run } = args;
    let plan = match (partition.or(config.outbox.partition), convert) {
        (None, false) => PartitionPlan::AsItIs,
        (None, true) => anyhow::bail!(ConfigError::Invalid {
            key: "--convert".to_owned(),
            message: "needs a period: give --partition daily|hourly, or set outbox.partition".to_owned(),
        }),
        (Some(period), false) => PartitionPlan::Partitioned(period),
        (Some(period), true) => PartitionPlan::Convert(period),
    };
    let url = match (admin_url.map(DbUrl::new), admin_password_file) {
        (Some(url), Some(file)) => url_with_password_file(&url, "--admin-url", &file, "--admin-password-file")?,
        (Some(url), None) => url,
        (None, _) => config.primary.url.clone(),
    };
    let pool = db::connect_with("primary", &url, &config.primary.tls, 1, &[]).await?;
    let outbox = config.outbox_table();
    if dry_run {
        let planned = store::planned(&pool, &outbox, plan).await;
        pool.disconnect().await.ok();
        return print_planned(planned, &url, &outbox);
    }
    let migrated = store::migrate(&pool, &outbox, plan).await;
    pool.disconnect().await.ok();
    let report = migrated.map_err(|e| migrate_failed(e, &url, &outbox))?;
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

/// `migrate --dry-run`: the statements, one per paragraph, each ending with `;`.
fn print_planned(
    planned: Result<Vec<String>, MigrateError>,
    url: &DbUrl,
    outbox: &outbox_kit::OutboxTable,
) -> anyhow::Result<()> {
    let planned = planned.map_err(|e| migrate_failed(e, url, outbox))?;
    if planned.is_empty() {
        println!("-- {} and the relay's tables are up to date: nothing to run", outbox.qualified());
    }
    for statement in planned {
        println!("{statement};\n");
    }
    Ok(())
}

/// Why `migrate` failed, with what to do.
fn migrate_failed(error: MigrateError, url: &DbUrl, outbox: &outbox_kit::OutboxTable) -> anyhow::Error {
    match error {
        MigrateError::Refused(refused) => refused.into(),
        MigrateError::Db(e) => anyhow::Error::new(db::DbError::query("primary", url, e)).context(format!(
            "migrating {} failed (the user needs CREATE and ALTER; see --admin-url)",
            outbox.qualified()
        )),
    }
}

/// Runs a broker command against `--namesrv` or the configuration's NameServer, with
/// the configuration's ACL keys (`config` is `None` without a configuration file).
pub async fn admin(command: AdminCommand, config: Option<&Config>, json: bool) -> anyhow::Result<()> {
    let acl = config.and_then(|c| c.rocketmq.acl());
    let namesrv = |arg: NamesrvArg| -> anyhow::Result<String> {
        arg.namesrv.or_else(|| config.map(|c| c.rocketmq.namesrv.clone())).ok_or_else(|| {
            anyhow::Error::new(ConfigError::Invalid {
                key: "--namesrv".to_owned(),
                message: "no NameServer: give --namesrv host:port, or --config with rocketmq.namesrv".to_owned(),
            })
        })
    };
    match command {
        AdminCommand::CreateTopic { namesrv: arg, cluster, topic, queues, brokers } => {
            let address = namesrv(arg)?;
            admin::create_topic(NameServer { address: &address, acl: acl.as_ref() }, &cluster, &topic, queues, brokers)
                .await
                .with_context(|| format!("create topic {topic} via {address}"))?;
            print_one(json, &serde_json::json!({ "topic": topic, "queues": queues }), || {
                format!("topic {topic} ready with {queues} queues")
            })?;
        }
        AdminCommand::Find { namesrv: arg, topic, key } => {
            let address = namesrv(arg)?;
            let found = admin::find(NameServer { address: &address, acl: acl.as_ref() }, &topic, &key)
                .await
                .with_context(|| format!("find {key} in {topic} via {address}"))?;
            print_all(json, &found)?;
            anyhow::ensure!(!found.is_empty(), "no message with key {key} in topic {topic}");
        }
        AdminCommand::Ping { namesrv: arg, topic, queues, find_within } => {
            let address = namesrv(arg)?;
            let within = find_within.map(std::time::Duration::from_secs);
            let probes = admin::ping(NameServer { address: &address, acl: acl.as_ref() }, &topic, queues, within)
                .await
                .with_context(|| format!("ping {topic} via {address}"))?;
            print_all(json, &probes)?;
        }
    }
    Ok(())
}

/// `value` as JSON, or the text `human` gives.
fn print_one(json: bool, value: &impl serde::Serialize, human: impl FnOnce() -> String) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(value)?);
    } else {
        println!("{}", human());
    }
    Ok(())
}

/// `items` as one JSON array, or a line each.
fn print_all<T: serde::Serialize + std::fmt::Display>(json: bool, items: &[T]) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(items)?);
    } else {
        for item in items {
            println!("{item}");
        }
    }
    Ok(())
}
