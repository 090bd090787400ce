//! `kong.ctx.shared`, `kong.ctx.plugin` and `ngx.ctx`: per-request Lua
//! tables, made on first use. Most Lua code never touches them, so a
//! phase call makes nothing: it only notes which request and plugin it
//! runs for ([`enter`]); the tables are made when code first reads one,
//! and only then does the request get a slot in its store (a
//! [`LuaRequest`]) that frees them when the request ends.
//!
//! The tables live in a thread-local beside the worker's Lua state (the
//! PDK's callbacks cannot reach the worker, which is borrowed while code
//! runs); [`reset`] drops them with the state.

use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use mlua::{Lua, Table};
use strait_plugins::SharedStore;

/// Where a call finds its request's Lua tables: the request's store (the
/// slot noted there, or noted after the call when the phase may write it).
pub(crate) enum Store<'a> {
    Write(&'a mut SharedStore),
    Read(&'a SharedStore),
}

/// One request's Lua tables, kept across its phases and plugins.
struct RequestTables {
    shared: Option<Table>,
    ngx: Option<Table>,
    plugins: Vec<(&'static str, Table)>,
}

/// Slots of requests that ended ([`LuaRequest`]'s drop, on any thread).
#[derive(Debug, Default)]
struct Freed {
    slots: Mutex<Vec<u64>>,
    count: AtomicUsize,
}

/// A request's slot in its worker's tables, kept in the request's store;
/// dropping it with the request frees the tables.
#[derive(Debug)]
struct LuaRequest {
    slot: u64,
    freed: Arc<Freed>,
}

impl Drop for LuaRequest {
    fn drop(&mut self) {
        self.freed
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(self.slot);
        self.freed.count.fetch_add(1, Ordering::Release);
    }
}

static NEXT_SLOT: AtomicU64 = AtomicU64::new(1);

#[derive(Default)]
struct Tables {
    requests: HashMap<u64, RequestTables, foldhash::fast::RandomState>,
    /// The running call: its request's slot (if it has one yet) and plugin.
    current: Option<(Option<u64>, &'static str)>,
    /// A slot the running call's code made (tables made on a request that
    /// had none).
    made: Option<u64>,
    freed: Arc<Freed>,
}

thread_local! {
    static TABLES: RefCell<Tables> = RefCell::new(Tables::default());
}

/// Before a call of `plugin`: which request's tables code may reach, and
/// the tables of ended requests freed.
pub(crate) fn enter(store: &Store<'_>, plugin: &'static str) {
    TABLES.with(|cell| {
        let mut tables = cell.borrow_mut();
        if tables.freed.count.load(Ordering::Acquire) > 0 {
            let slots = std::mem::take(&mut *tables.freed.slots.lock().unwrap_or_else(PoisonError::into_inner));
            tables.freed.count.fetch_sub(slots.len(), Ordering::AcqRel);
            for slot in slots {
                tables.requests.remove(&slot);
            }
        }
        let shared = match store {
            Store::Write(store) => &**store,
            Store::Read(store) => *store,
        };
        let slot = shared
            .get::<LuaRequest>()
            .filter(|request| Arc::ptr_eq(&request.freed, &tables.freed))
            .map(|request| request.slot);
        tables.current = Some((slot, plugin));
        tables.made = None;
    });
}

/// After a call: a slot its code made is noted in the request's store
/// (or, for a phase that cannot write it, the tables dropped now).
pub(crate) fn leave(store: Store<'_>) {
    TABLES.with(|cell| {
        let mut tables = cell.borrow_mut();
        tables.current = None;
        let Some(slot) = tables.made.take() else { return };
        match store {
            Store::Write(store) => store.insert(LuaRequest {
                slot,
                freed: tables.freed.clone(),
            }),
            Store::Read(_) => {
                tables.requests.remove(&slot);
            }
        }
    });
}

/// Which table `kong.ctx.<name>` or `ngx.ctx` names.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Which {
    Shared,
    Plugin,
    Ngx,
}

/// The running call's request table `which`, made on first use.
pub(crate) fn table(lua: &Lua, which: Which) -> mlua::Result<Table> {
    TABLES.with(|cell| {
        let mut tables = cell.borrow_mut();
        let Some((slot, plugin)) = tables.current else {
            return Err(mlua::Error::runtime(
                "kong.ctx can only be used while a request is handled",
            ));
        };
        let slot = match slot {
            Some(slot) => slot,
            None => {
                let slot = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
                tables.current = Some((Some(slot), plugin));
                tables.made = Some(slot);
                slot
            }
        };
        let request = tables.requests.entry(slot).or_insert_with(|| RequestTables {
            shared: None,
            ngx: None,
            plugins: Vec::new(),
        });
        let found = match which {
            Which::Shared => &mut request.shared,
            Which::Ngx => &mut request.ngx,
            Which::Plugin => {
                if let Some((_, table)) = request.plugins.iter().find(|(name, _)| *name == plugin) {
                    return Ok(table.clone());
                }
                let table = lua.create_table()?;
                request.plugins.push((plugin, table.clone()));
                return Ok(table);
            }
        };
        match found {
            Some(table) => Ok(table.clone()),
            None => {
                let table = lua.create_table()?;
                *found = Some(table.clone());
                Ok(table)
            }
        }
    })
}

/// Drops every request's tables (the worker's state is being dropped).
pub(crate) fn reset() {
    TABLES.with(|cell| {
        let mut tables = cell.borrow_mut();
        tables.requests.clear();
        tables.current = None;
        tables.made = None;
    });
}

/// How many requests have tables on this thread (tests).
#[cfg(test)]
pub(crate) fn live() -> usize {
    TABLES.with(|cell| cell.borrow().requests.len())
}
