//! The command line of `outbox-chaos`.

use std::path::PathBuf;

use clap::Parser;

/// Runs the relay against the real stack under load and a seeded schedule of faults,
/// then judges the run from the database and an independent consumer. Needs the stack's
/// environment: eval "$(scripts/stack env)" (scripts/chaos does all of it).
#[derive(Debug, Clone, Parser)]
#[command(name = "outbox-chaos")]
pub struct Options {
    /// Seed of the fault schedule and the transaction shapes (default: from the clock;
    /// every run prints it, and the same seed replays the same schedule).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Rounds of faults: each round injects every fault kind once, plus `--kills`
    /// relay kills, in a random order.
    #[arg(long, default_value_t = 1)]
    pub cycles: u32,
    /// Relay SIGKILLs per round.
    #[arg(long, default_value_t = 10)]
    pub kills: u32,
    /// Events per second the load generator offers (all writers together).
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..))]
    pub rate: u32,
    /// Shortest load, in seconds: when the faults end earlier, the load runs on
    /// without faults until then.
    #[arg(long, default_value_t = 0)]
    pub duration: u64,
    /// Relays running normally (1 to 3); the crowd fault briefly runs three.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=3))]
    pub relays: u32,
    /// Concurrent writer connections of the load generator.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub writers: u32,
    /// Business keys the events are spread over.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub keys: u32,
    /// The relays' leader lease, in milliseconds.
    #[arg(long, default_value_t = 4000)]
    pub lease_ms: u64,
    /// How long, after the load stops, every committed event has to reach the consumer.
    #[arg(long, default_value_t = 180)]
    pub settle_secs: u64,
    /// How long a relay has to lead and be ready again after a fault ends.
    #[arg(long, default_value_t = 120)]
    pub recover_secs: u64,
    /// The relay binary (default: outbox-relay beside this one). It must be built with
    /// the fault-injection feature for --break-relay.
    #[arg(long)]
    pub relay: Option<PathBuf>,
    /// Proof that the verdict can fail: every relay acknowledges one send in 20
    /// without sending it (marks it SENT on a fake SEND_OK). The run must then fail.
    #[arg(long)]
    pub break_relay: bool,
}
