//! The request's borrowed parts for PDK functions, during one synchronous
//! rewrite or access call: the directory (the snapshot's consumers, routes
//! and services, which `kong.client.load_consumer`, `authenticate` and
//! `kong.router.*` read) and the request line (host, path, query: read in
//! place rather than copied for every call). A phase call moves the
//! request's owned parts into a thread-local `Call` (pdk.rs); these are
//! borrows that cannot be moved there, so their address is kept in a
//! thread-local for exactly the length of the call.
//!
//! This module is the crate's one use of `unsafe`: erasing the borrow's
//! lifetime to store it, and turning the stored address back into a
//! reference. Both are sound because the address is only stored by
//! [`with_directory`], which restores the previous value when its closure
//! returns or unwinds (so the stored address never outlives the borrow it
//! came from), and [`directory`] hands the reference only to a closure
//! whose result cannot hold it (its type does not depend on the
//! reference's lifetime).
#![allow(unsafe_code)]

use std::cell::Cell;
use std::ptr::NonNull;

use strait_plugins::{Directory, RequestCtx};

/// What a rewrite or access call reads in place.
pub(crate) struct Scope<'a> {
    pub directory: &'a dyn Directory,
    pub host: &'a str,
    pub uri: &'a http::Uri,
}

type Erased = NonNull<Scope<'static>>;

thread_local! {
    static SCOPE: Cell<Option<Erased>> = const { Cell::new(None) };
}

/// Runs `run` with `ctx`'s directory and request line readable through
/// [`directory`] and [`line`]; `run` gets the context's store.
pub(crate) fn with_request<R>(ctx: &mut RequestCtx<'_>, run: impl FnOnce(&mut strait_plugins::SharedStore) -> R) -> R {
    let scope = Scope {
        directory: ctx.directory,
        host: ctx.host,
        uri: &*ctx.uri,
    };
    with_scope(&scope, || run(&mut ctx.shared))
}

fn with_scope<R>(scope: &Scope<'_>, run: impl FnOnce() -> R) -> R {
    struct Restore(Option<Erased>);
    impl Drop for Restore {
        fn drop(&mut self) {
            SCOPE.with(|cell| cell.set(self.0));
        }
    }
    // Only the lifetimes change (a pointer cast). The value is removed by
    // `Restore` before `scope`'s borrow ends.
    let erased: Erased = NonNull::from(scope).cast::<Scope<'static>>();
    let _restore = Restore(SCOPE.with(|cell| cell.replace(Some(erased))));
    run()
}

/// The scope of the call running on this thread, if any.
fn scope<R>(read: impl FnOnce(Option<&Scope<'_>>) -> R) -> R {
    let stored = SCOPE.with(Cell::get);
    // SAFETY: a stored address is that of a `Scope` alive, with the
    // borrows it holds, for the whole of the `with_scope` call now running
    // on this thread (see the module's note); `read` cannot keep the
    // reference past its return (its result's type does not depend on it).
    read(stored.map(|pointer| unsafe { pointer.as_ref() }))
}

/// The directory of the call running on this thread, if any.
pub(crate) fn directory<R>(read: impl FnOnce(Option<&dyn Directory>) -> R) -> R {
    scope(|scope| read(scope.map(|s| s.directory)))
}

/// The request line (host, path, query) of the rewrite or access call
/// running on this thread, if any.
pub(crate) fn line<R>(read: impl FnOnce(Option<(&str, &str, &str)>) -> R) -> R {
    scope(|scope| read(scope.map(|s| (s.host, s.uri.path(), s.uri.query().unwrap_or("")))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scope_is_seen_only_inside_its_call() {
        let directory = strait_plugins::EmptyDirectory;
        let uri = http::Uri::from_static("/a?b=1");
        let scope = Scope {
            directory: &directory,
            host: "example.test",
            uri: &uri,
        };
        assert!(directory_seen().is_none());
        let inside = with_scope(&scope, directory_seen);
        assert_eq!(inside, Some(true));
        assert!(directory_seen().is_none(), "restored after the call");
        let nested = with_scope(&scope, || with_scope(&scope, directory_seen));
        assert_eq!(nested, Some(true));
        assert!(directory_seen().is_none());
        let read = with_scope(&scope, || line(|line| line.map(|(h, p, q)| format!("{h} {p} {q}"))));
        assert_eq!(read.as_deref(), Some("example.test /a b=1"));
    }

    fn directory_seen() -> Option<bool> {
        directory(|found| found.map(|d| d.consumer(uuid_nil()).is_none()))
    }

    fn uuid_nil() -> uuid::Uuid {
        uuid::Uuid::nil()
    }
}
