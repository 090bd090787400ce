//! Hybrid mode: a control plane (`role = control_plane`) holds the
//! configuration and the Admin API; data planes (`role = data_plane`) hold
//! no database, follow the control plane over one mutually authenticated
//! TLS connection each, cache what they receive, and keep serving it when
//! the control plane is away. docs/hybrid.md is the guide; the protocol is
//! in [`frame`], the two sides in [`cp`] and [`dp`], certificates in
//! [`tls`].

pub mod cp;
pub mod dp;
pub mod frame;
pub mod tls;

/// Run the future `work` makes on a thread of its own (named
/// `strait-cluster`) with a current-thread runtime; `what` names it in
/// errors.
fn spawn_on_thread<F, Fut>(what: &'static str, work: F) -> Result<(), String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::Builder::new()
        .name("strait-cluster".into())
        .spawn(
            move || match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(runtime) => runtime.block_on(work()),
                Err(error) => tracing::error!(%error, "{what} could not start"),
            },
        )
        .map(|_| ())
        .map_err(|e| format!("starting {what}: {e}"))
}
