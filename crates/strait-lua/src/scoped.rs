//! The request's directory (the snapshot's consumers, routes and services)
//! for PDK functions, during one synchronous rewrite or access call:
//! `kong.client.load_consumer`, `kong.client.authenticate` and
//! `kong.router.*` read it. A phase call moves the request's parts into a
//! thread-local `Call` (pdk.rs); the directory is a borrow that cannot be
//! moved there, so its address is kept in a thread-local for exactly the
//! length of the call.
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

use strait_plugins::Directory;

type Erased = NonNull<dyn Directory + 'static>;

thread_local! {
    static DIRECTORY: Cell<Option<Erased>> = const { Cell::new(None) };
}

/// Runs `run` with `directory` readable through [`directory`].
pub(crate) fn with_directory<R>(directory: &dyn Directory, run: impl FnOnce() -> R) -> R {
    struct Restore(Option<Erased>);
    impl Drop for Restore {
        fn drop(&mut self) {
            DIRECTORY.with(|cell| cell.set(self.0));
        }
    }
    let borrowed: NonNull<dyn Directory + '_> = NonNull::from(directory);
    // SAFETY: only the lifetime is changed (same pointer, same vtable).
    // The value is removed by `Restore` before `directory`'s borrow ends.
    let erased: Erased = unsafe { std::mem::transmute::<NonNull<dyn Directory + '_>, Erased>(borrowed) };
    let _restore = Restore(DIRECTORY.with(|cell| cell.replace(Some(erased))));
    run()
}

/// The directory of the call running on this thread, if any.
pub(crate) fn directory<R>(read: impl FnOnce(Option<&dyn Directory>) -> R) -> R {
    let stored = DIRECTORY.with(Cell::get);
    // SAFETY: a stored address is that of a borrow alive for the whole of
    // the `with_directory` call now running on this thread (see the
    // module's note); `read` cannot keep the reference past its return.
    read(stored.map(|pointer| unsafe { pointer.as_ref() }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_directory_is_seen_only_inside_its_call() {
        let directory = strait_plugins::EmptyDirectory;
        assert!(directory_seen().is_none());
        let inside = with_directory(&directory, directory_seen);
        assert_eq!(inside, Some(true));
        assert!(directory_seen().is_none(), "restored after the call");
        let nested = with_directory(&directory, || with_directory(&directory, directory_seen));
        assert_eq!(nested, Some(true));
        assert!(directory_seen().is_none());
    }

    fn directory_seen() -> Option<bool> {
        directory(|found| found.map(|d| d.consumer(uuid_nil()).is_none()))
    }

    fn uuid_nil() -> uuid::Uuid {
        uuid::Uuid::nil()
    }
}
