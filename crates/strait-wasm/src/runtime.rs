//! The one Wasm engine of the process and its clock: Cranelift-compiled
//! code with epoch interruption, and a thread that advances the epoch every
//! [`TICK`]. A call into a filter is given a deadline in ticks; code past it
//! traps at its next loop back-edge or function entry. This costs a load
//! and a compare per check on the hot path, and no signal, no timer per
//! call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use wasmtime::{Config, Engine};

/// How often the epoch advances: the budget's resolution.
pub(crate) const TICK: Duration = Duration::from_millis(5);

static ENGINE: OnceLock<Engine> = OnceLock::new();
static EPOCH: AtomicU64 = AtomicU64::new(0);
static STARTED: OnceLock<Instant> = OnceLock::new();

/// The engine, made (and its clock started) on first use.
pub(crate) fn engine() -> Result<&'static Engine, String> {
    if let Some(engine) = ENGINE.get() {
        return Ok(engine);
    }
    let mut config = Config::new();
    config.epoch_interruption(true);
    let engine = Engine::new(&config).map_err(|e| format!("the Wasm engine: {e}"))?;
    let engine = ENGINE.get_or_init(|| engine);
    started();
    let ticking = engine.clone();
    std::thread::Builder::new()
        .name("strait-wasm-clock".into())
        .spawn(move || loop {
            std::thread::sleep(TICK);
            EPOCH.fetch_add(1, Ordering::Relaxed);
            ticking.increment_epoch();
        })
        .map_err(|e| format!("the Wasm clock thread: {e}"))?;
    Ok(engine)
}

/// The epoch now, in ticks since the engine started.
pub(crate) fn epoch() -> u64 {
    EPOCH.load(Ordering::Relaxed)
}

/// When the host started (WASI's monotonic clock counts from it).
pub(crate) fn started() -> Instant {
    *STARTED.get_or_init(Instant::now)
}

/// `budget` in ticks, at least one.
pub(crate) fn ticks(budget: Duration) -> u64 {
    (budget.as_micros() / TICK.as_micros()).max(1) as u64
}
