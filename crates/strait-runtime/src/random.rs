//! A fast per-thread random number generator (splitmix64) for values that
//! must differ, not be secret: request ids, the balancer's draws,
//! connection-age jitter, DNS query ids.

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

thread_local! {
    /// splitmix64 state, seeded per thread from the OS's randomness (through
    /// std's hasher keys): request ids need to be unique, not secret.
    static ID_STATE: Cell<u64> = Cell::new({
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u64(0x5eed);
        hasher.finish()
    });
}

/// A fast per-thread random number (splitmix64): request ids, the
/// balancer's draws, connection-age jitter, DNS query ids.
pub fn next_u64() -> u64 {
    ID_STATE.with(|state| {
        let next = state.get().wrapping_add(0x9e37_79b9_7f4a_7c15);
        state.set(next);
        let mut z = next;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}
