//! The thread that ships logs and traces: one current-thread runtime,
//! started on first use, running the consumers of every log queue. Proxy
//! workers only ever `try_send` into those queues.

use std::future::Future;
use std::sync::OnceLock;

fn handle() -> &'static tokio::runtime::Handle {
    static HANDLE: OnceLock<tokio::runtime::Handle> = OnceLock::new();
    HANDLE.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("building the log shipping runtime");
        let handle = runtime.handle().clone();
        std::thread::Builder::new()
            .name("strait-log-ship".into())
            .spawn(move || runtime.block_on(std::future::pending::<()>()))
            .expect("spawning the log shipping thread");
        handle
    })
}

/// Runs `task` on the log shipping thread.
pub fn spawn<F>(task: F)
where
    F: Future<Output = ()> + Send + 'static,
{
    handle().spawn(task);
}
