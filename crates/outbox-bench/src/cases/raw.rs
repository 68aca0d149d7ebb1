//! `raw`: the broker's ceiling for this workload. The same events, from memory, through
//! the relay's own publish code: routed by the same hash, one ordered sender per queue,
//! synchronous batches of `batch_size`. No database. Its "relay" CPU is the bench
//! process's own: the publish code alone.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use outbox_relay::config::HashFunction;
use outbox_relay::event::OutboxEvent;
use outbox_relay::relay::route::queue_for;
use outbox_relay::rocketmq::{prepare, ErrorClass, Prepared, Producer, ProducerSettings};
use rocketmq_model::common::message::message_queue::MessageQueue;

use crate::cpu::CpuPerEvent;
use crate::report::Measurement;
use crate::rig::{unique, Rig};

pub async fn run(rig: &Rig) -> anyhow::Result<Measurement> {
    let o = &rig.options;
    let workload = rig.workload("raw").await?;
    let producer = Arc::new(
        Producer::start(ProducerSettings {
            namesrv: o.namesrv.clone(),
            group: unique("bench_raw"),
            send_timeout: Duration::from_secs(3),
        })
        .await?,
    );
    let queues = producer.pinned_queues(&workload.topic, o.queues).await?;
    let mut per_queue: Vec<Vec<OutboxEvent>> = vec![Vec::new(); queues.len()];
    for i in 0..o.events {
        let event = workload.event(i);
        per_queue[queue_for(HashFunction::Stable, &event.biz_key, o.queues) as usize].push(event);
    }
    let processes = rig.processes(std::process::id());
    let cpu_before = processes.read()?;
    let started = Instant::now();
    let mut senders = Vec::new();
    for (queue, events) in queues.into_iter().zip(per_queue) {
        let producer = Arc::clone(&producer);
        let batch_size = o.batch_size;
        senders.push(tokio::spawn(async move {
            for chunk in events.chunks(batch_size) {
                send_until_stored(&producer, &queue, &prepare(chunk, None)?).await?;
            }
            anyhow::Ok(())
        }));
    }
    for sender in senders {
        sender.await.context("sender task")??;
    }
    let seconds = started.elapsed().as_secs_f64();
    let cpu_after = processes.read()?;
    if let Ok(producer) = Arc::try_unwrap(producer) {
        producer.shutdown().await;
    }
    let mut measurement = Measurement::throughput("raw", "broker", o.events, seconds);
    measurement.cpu = CpuPerEvent::between(&cpu_before, &cpu_after, o.events);
    Ok(measurement)
}

/// Sends `batch` like a lane does: a broker that cannot take it now (busy, flushing)
/// is asked again shortly; anything else ends the case.
async fn send_until_stored(producer: &Producer, queue: &MessageQueue, batch: &Prepared) -> anyhow::Result<()> {
    loop {
        match producer.send(queue, batch).await {
            Ok(()) => return Ok(()),
            Err(error) if error.class() == ErrorClass::Outage => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(error) => return Err(error.into()),
        }
    }
}
