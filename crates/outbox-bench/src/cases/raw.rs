//! `raw`: the broker's ceiling for this workload. The same events, from memory, through
//! the relay's own publish code: routed by the same hash, one ordered sender per queue,
//! synchronous batches of `batch_size`. No database. Its "relay" CPU is the bench
//! process's own: the publish code alone.
//!
//! The senders run as the relay runs them: on the RocketMQ client's runtime, beside the
//! producer's tasks, with the relay's default number of worker threads. So its CPU per
//! event is about the least the relay's sending can cost, and with a batch of one, an
//! upper bound of what a single send costs the client (the bench's preparing and
//! sender tasks are in it too).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use outbox_relay::config::{HashFunction, RuntimeConfig};
use outbox_relay::event::OutboxEvent;
use outbox_relay::rocketmq::{prepare, ClientHost, ErrorClass, Prepared, Producer, ProducerSettings};
use outbox_relay::route::queue_for;
use rocketmq_model::common::message::message_queue::MessageQueue;

use crate::cpu::{CpuPerEvent, Processes};
use crate::report::Measurement;
use crate::rig::{unique, Rig};

pub async fn run(rig: &Rig) -> anyhow::Result<Measurement> {
    let o = &rig.options;
    let workload = rig.workload("raw").await?;
    let mut per_queue: Vec<Vec<OutboxEvent>> = vec![Vec::new(); o.queues as usize];
    for i in 0..o.events {
        let event = workload.event(i);
        per_queue[queue_for(HashFunction::Stable, &event.biz_key, o.queues) as usize].push(event);
    }
    let settings = ProducerSettings {
        namesrv: o.namesrv.clone(),
        group: unique("bench_raw"),
        send_timeout: Duration::from_secs(3),
    };
    let senders = Senders {
        topic: workload.topic,
        queues: o.queues,
        batch_size: o.batch_size,
        processes: rig.processes(std::process::id()),
    };
    let workers = RuntimeConfig::default().worker_threads;
    let host = ClientHost::with_workers("bench-raw", Some(workers)).context("start the client runtime for raw")?;
    let client = host.runtime();
    let (seconds, cpu) = tokio::task::spawn_blocking(move || {
        host.run(async move {
            let producer = Producer::start_on(client, settings, None).await.context("start the raw producer")?;
            senders.send_all(producer, per_queue).await
        })
    })
    .await
    .context("raw sender thread")??;
    let mut measurement = Measurement::throughput("raw", "broker", o.events, seconds);
    measurement.cpu = cpu;
    Ok(measurement)
}

/// What the senders need, moved onto the client's runtime.
struct Senders {
    topic: String,
    queues: u32,
    batch_size: usize,
    processes: Processes,
}

impl Senders {
    /// Sends every queue's events in order, one sender per queue; the seconds it took
    /// and the CPU each process spent meanwhile.
    async fn send_all(
        self,
        producer: Producer,
        per_queue: Vec<Vec<OutboxEvent>>,
    ) -> anyhow::Result<(f64, Option<CpuPerEvent>)> {
        let total = per_queue.iter().map(Vec::len).sum();
        let producer = Arc::new(producer);
        let queues = producer
            .pinned_queues(&self.topic, self.queues)
            .await
            .with_context(|| format!("look up the queues of {}", self.topic))?;
        let cpu_before = self.processes.read()?;
        let started = Instant::now();
        let mut senders = Vec::new();
        for (queue, events) in queues.into_iter().zip(per_queue) {
            let producer = Arc::clone(&producer);
            let batch_size = self.batch_size;
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
        let cpu_after = self.processes.read()?;
        if let Ok(producer) = Arc::try_unwrap(producer) {
            producer.shutdown().await;
        }
        Ok((seconds, CpuPerEvent::between(&cpu_before, &cpu_after, total)))
    }
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
