//! The `outbox-relay` binary: the command line over the library (see `cli`).
#![recursion_limit = "512"]

/// mimalloc instead of the system's allocator: the relay allocates a few small buffers
/// per event and frees them a batch at a time, more than glibc's per-thread cache
/// holds, so most of them would go through its slower shared bins. mimalloc costs the
/// relay a fifth less CPU per event; with transparent huge pages off (see
/// `cli::serve`) its resident memory is about what glibc's would be.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod cli;

fn main() -> std::process::ExitCode {
    cli::main()
}
