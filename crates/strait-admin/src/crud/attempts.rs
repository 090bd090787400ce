//! A configuration write as one optimistic transaction across the nodes that
//! share a database.
//!
//! A write reads what it needs (does the name exist? which id has this
//! parent?), derives its changes, and commits them. On one node those steps
//! are serialised by [`crate::AdminState::writes`]; across nodes they are
//! not, so every read a write made must still hold when it commits. Each
//! attempt records the version the node serves when it starts (its base),
//! and the store commits only while the database is still at that version
//! (`Store::apply_at`, checked under the database's write lock). When
//! another node committed in between, the attempt is answered
//! [`Superseded`] instead of being written: this node catches up and the
//! whole request runs again from its first read, so a second `POST` of a
//! name sees the first and gets Kong's 409, and a `PUT` that lost the race
//! updates what the other node created instead of replacing it blindly.

use std::cell::Cell;
use std::future::Future;
use std::time::Duration;

use http::StatusCode;
use serde_json::json;
use strait_core::ConfigVersion;

use crate::response::{json_response, AdminResponse};
use crate::AdminState;

/// Attempts one request makes while other nodes keep committing first.
const ATTEMPTS: usize = 20;

/// How long a superseded attempt waits for this node to serve the version
/// that superseded it before it runs again.
const CATCH_UP: Duration = Duration::from_secs(5);

tokio::task_local! {
    /// The version the running attempt read from; moved on by each commit
    /// the attempt makes, so a second commit in one request starts from the
    /// first.
    static BASE: Cell<Option<ConfigVersion>>;
}

/// Carried by an answer whose commit found the database past the attempt's
/// base: another node committed `found` first; nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Superseded(pub ConfigVersion);

/// The base of the running attempt; `None` outside [`run`], where a commit
/// takes the version its snapshot was derived from.
pub fn base() -> Option<ConfigVersion> {
    BASE.try_with(Cell::get).ok().flatten()
}

/// Records that the running attempt committed `version`.
pub fn committed(version: ConfigVersion) {
    let _ = BASE.try_with(|base| base.set(Some(version)));
}

/// The answer for an attempt another node's commit `found` superseded.
pub fn superseded(found: ConfigVersion) -> AdminResponse {
    let mut response = json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        &json!({ "message": "the configuration kept changing on other nodes; nothing was written, try again" }),
    );
    response.extensions_mut().insert(Superseded(found));
    response
}

/// Runs `attempt` until it is not superseded (at most [`ATTEMPTS`] times);
/// the last superseded answer is a 503 that says nothing was written.
pub async fn run<F, Fut>(state: &AdminState, mut attempt: F) -> AdminResponse
where
    F: FnMut() -> Fut,
    Fut: Future<Output = AdminResponse>,
{
    let mut tries = 0;
    loop {
        let base = state.publisher.current().load().version;
        let response = BASE.scope(Cell::new(Some(base)), attempt()).await;
        tries += 1;
        match response.extensions().get::<Superseded>() {
            Some(Superseded(found)) if tries < ATTEMPTS => {
                tracing::debug!(
                    base,
                    found,
                    tries,
                    "write superseded by another node's; running it again"
                );
                wait_for_version(state, *found).await;
            }
            _ => return response,
        }
    }
}

/// Wait (at most [`CATCH_UP`]) until this node serves `version` or a later one.
async fn wait_for_version(state: &AdminState, version: ConfigVersion) {
    let deadline = tokio::time::Instant::now() + CATCH_UP;
    let current = state.publisher.current();
    while current.load().version < version && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}
