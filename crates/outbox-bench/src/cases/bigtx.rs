//! `bigtx`: memory under the two loads that break unbounded relays. One transaction of
//! `--bigtx-rows` rows committed while the relay tails (timed from its commit until
//! every row is SENT), then a backlog of `--backlog-rows` rows drained after a restart.
//! Both report the relay's peak RSS.

use std::time::{Duration, Instant};

use crate::cases::drain;
use crate::options::Mode;
use crate::report::Measurement;
use crate::rig::{until, Rig};

pub async fn run(rig: &Rig) -> anyhow::Result<Vec<Measurement>> {
    let big = one_transaction(rig).await?;
    let backlog = drain::backlog(rig, Mode::Binlog, "backlog", rig.options.backlog_rows).await?;
    Ok(vec![big, backlog])
}

async fn one_transaction(rig: &Rig) -> anyhow::Result<Measurement> {
    let rows = rig.options.bigtx_rows;
    let table = rig.table().await?;
    let workload = rig.workload("bigtx").await?;
    let mut relay = rig.relay(Mode::Binlog, &table, &rig.checkpoint_dir())?;
    relay.wait_ready().await?;
    rig.insert(&table, &workload, 0..rows, rows).await?;
    let committed = Instant::now();
    let limit = Duration::from_secs(1_800);
    until("every row SEND_OK", limit, || async {
        Ok(relay.metric_sum("relay_events_published_total").unwrap_or(0.0) >= rows as f64)
    })
    .await?;
    let done = until("every row SENT in the table", limit, || async { Ok(rig.unsent(&table).await? == 0) }).await?;
    let mut measurement = Measurement::throughput("bigtx", "binlog", rows, (done - committed).as_secs_f64());
    measurement.peak_rss_mib = Some(relay.peak_rss_mib()?);
    relay.stop()?;
    rig.drop_table(&table).await?;
    Ok(measurement)
}
