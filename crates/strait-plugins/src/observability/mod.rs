//! Plugins that watch traffic without changing it: metrics (and, as they
//! land, logs and traces).

pub mod prometheus;
