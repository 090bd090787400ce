//! strait-snapshot: configuration in, immutable snapshot out. The compiler
//! thread that derives each snapshot from the previous one and a change, the
//! router and plugin chains it builds, balancers per upstream, TLS material
//! (certificates by SNI, upstream client configurations) and secret
//! references resolved from vaults.
//!
//! Used by the proxy (which serves from snapshots), the Admin API and the
//! cluster (which publish them). It opens no socket and never depends on a
//! store backend: configuration and changes arrive as values.
#![deny(unsafe_code)]

pub mod balancer;
pub mod compiler;
pub mod secrets;
pub mod snapshot;
pub mod tls;

pub use compiler::{PublishError, SnapshotPublisher};
pub use snapshot::{compile_snapshot, compile_snapshot_hashed, config_hash, CompileError, Snapshot, SnapshotBuilder};
