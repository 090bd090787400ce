//! Bytes the router allocates per route, counted by a global allocator
//! wrapper: `cargo bench -p strait-router --bench router_memory`.

mod routes;

use routes::Scenario;
use strait_router::Router;

mod counting {
    //! The one `unsafe` in the router's benches: a global allocator must be
    //! an `unsafe impl`. It forwards every call to `System` unchanged and
    //! only counts bytes.
    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicIsize, Ordering};

    pub static LIVE: AtomicIsize = AtomicIsize::new(0);

    pub struct Counting;

    // SAFETY: every method delegates to `System` with the caller's own
    // arguments, so `System`'s contract is the caller's contract; the
    // counter has no effect on the memory returned.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
            // SAFETY: same layout the caller gave us.
            unsafe { System.alloc(layout) }
        }
        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
            // SAFETY: `ptr` came from `System.alloc` with this layout.
            unsafe { System.dealloc(ptr, layout) }
        }
        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            LIVE.fetch_add(new_size as isize - layout.size() as isize, Ordering::Relaxed);
            // SAFETY: `ptr`/`layout` came from this allocator; forwarded as is.
            unsafe { System.realloc(ptr, layout, new_size) }
        }
    }
}

#[global_allocator]
static ALLOCATOR: counting::Counting = counting::Counting;

fn live() -> isize {
    counting::LIVE.load(std::sync::atomic::Ordering::Relaxed)
}

fn main() {
    // `cargo bench` passes `--bench`; anything else is ignored.
    println!("| routes | scenario | router bytes | bytes per route |");
    println!("|---|---|---|---|");
    for size in [50_000usize, 100_000] {
        for scenario in Scenario::ALL {
            let routes = scenario.routes(size);
            let before = live();
            let router = Router::build(&routes).expect("routes build");
            let bytes = live() - before;
            println!("| {size} | {} | {bytes} | {} |", scenario.name(), bytes / size as isize);
            drop(router);
        }
    }
}
