//! Shared data, shared queues and metrics: per worker thread, as in Kong
//! (each nginx worker has its own Wasm VM), so that no lock is taken on a
//! request's path. Shared data is keyed across the thread's filters.
//! Queues hold values until a filter dequeues them (`proxy_on_queue_ready`
//! is not called). Metrics are kept per thread; they are not exported yet.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};

use wasmtime::{Caller, Linker, Result};

use super::memory::{give, read, read_text, write_u32, write_u64};
use super::status;
use crate::instance::HostState;

type Host<'a> = Caller<'a, HostState>;

/// At most this many values wait in one queue; more are refused.
const QUEUE_LIMIT: usize = 10_000;

#[derive(Default)]
struct Worker {
    data: HashMap<Vec<u8>, (Vec<u8>, u32)>,
    queue_ids: HashMap<String, u32>,
    queues: Vec<VecDeque<Vec<u8>>>,
    metric_ids: HashMap<String, u32>,
    metrics: Vec<i64>,
}

thread_local! {
    static WORKER: RefCell<Worker> = RefCell::new(Worker::default());
}

pub(super) fn define(linker: &mut Linker<HostState>) -> Result<()> {
    linker.func_wrap("env", "proxy_get_shared_data", get_shared_data)?;
    linker.func_wrap("env", "proxy_set_shared_data", set_shared_data)?;
    linker.func_wrap("env", "proxy_register_shared_queue", register_queue)?;
    linker.func_wrap("env", "proxy_resolve_shared_queue", resolve_queue)?;
    linker.func_wrap("env", "proxy_enqueue_shared_queue", enqueue)?;
    linker.func_wrap("env", "proxy_dequeue_shared_queue", dequeue)?;
    linker.func_wrap("env", "proxy_define_metric", define_metric)?;
    linker.func_wrap("env", "proxy_increment_metric", |_: Host<'_>, id: i32, offset: i64| {
        metric(id, |value| *value = value.saturating_add(offset))
    })?;
    linker.func_wrap("env", "proxy_record_metric", |_: Host<'_>, id: i32, value: i64| {
        metric(id, |slot| *slot = value)
    })?;
    linker.func_wrap("env", "proxy_get_metric", |mut caller: Host<'_>, id: i32, out: i32| {
        let mut found = 0;
        match metric(id, |value| found = *value) {
            status::OK => write_u64(&mut caller, out, found as u64).map(|()| status::OK),
            code => Ok(code),
        }
    })?;
    Ok(())
}

fn get_shared_data(mut caller: Host<'_>, key: i32, key_len: i32, out: i32, out_len: i32, cas: i32) -> Result<i32> {
    let key = read(&mut caller, key, key_len)?;
    let found = WORKER.with(|w| w.borrow().data.get(&key).cloned());
    match found {
        Some((value, version)) => {
            give(&mut caller, &value, out, out_len)?;
            write_u32(&mut caller, cas, version)?;
            Ok(status::OK)
        }
        None => Ok(status::NOT_FOUND),
    }
}

/// `cas` 0 sets unconditionally; otherwise it must be the value's
/// current version.
fn set_shared_data(mut caller: Host<'_>, key: i32, key_len: i32, value: i32, value_len: i32, cas: i32) -> Result<i32> {
    let key = read(&mut caller, key, key_len)?;
    let value = read(&mut caller, value, value_len)?;
    Ok(WORKER.with(|w| {
        let mut worker = w.borrow_mut();
        let entry = worker.data.entry(key).or_insert_with(|| (Vec::new(), 0));
        if cas != 0 && cas as u32 != entry.1 {
            return status::CAS_MISMATCH;
        }
        *entry = (value, entry.1.wrapping_add(1).max(1));
        status::OK
    }))
}

fn register_queue(mut caller: Host<'_>, name: i32, name_len: i32, out: i32) -> Result<i32> {
    let name = read_text(&mut caller, name, name_len)?;
    let id = WORKER.with(|w| {
        let mut worker = w.borrow_mut();
        let next = worker.queues.len() as u32 + 1;
        let id = *worker.queue_ids.entry(name).or_insert(next);
        if id == next {
            worker.queues.push(VecDeque::new());
        }
        id
    });
    write_u32(&mut caller, out, id).map(|()| status::OK)
}

fn resolve_queue(mut caller: Host<'_>, _vm: i32, _vm_len: i32, name: i32, name_len: i32, out: i32) -> Result<i32> {
    let name = read_text(&mut caller, name, name_len)?;
    match WORKER.with(|w| w.borrow().queue_ids.get(&name).copied()) {
        Some(id) => write_u32(&mut caller, out, id).map(|()| status::OK),
        None => Ok(status::NOT_FOUND),
    }
}

fn enqueue(mut caller: Host<'_>, id: i32, value: i32, value_len: i32) -> Result<i32> {
    let value = read(&mut caller, value, value_len)?;
    Ok(WORKER.with(|w| {
        let mut worker = w.borrow_mut();
        match worker.queues.get_mut((id as u32 as usize).wrapping_sub(1)) {
            Some(queue) if queue.len() < QUEUE_LIMIT => {
                queue.push_back(value);
                status::OK
            }
            Some(_) => status::BAD_ARGUMENT,
            None => status::NOT_FOUND,
        }
    }))
}

fn dequeue(mut caller: Host<'_>, id: i32, out: i32, out_len: i32) -> Result<i32> {
    let taken = WORKER.with(|w| {
        let mut worker = w.borrow_mut();
        match worker.queues.get_mut((id as u32 as usize).wrapping_sub(1)) {
            Some(queue) => queue.pop_front().ok_or(status::EMPTY),
            None => Err(status::NOT_FOUND),
        }
    });
    match taken {
        Ok(value) => give(&mut caller, &value, out, out_len).map(|()| status::OK),
        Err(code) => Ok(code),
    }
}

fn define_metric(mut caller: Host<'_>, _kind: i32, name: i32, name_len: i32, out: i32) -> Result<i32> {
    let name = read_text(&mut caller, name, name_len)?;
    let id = WORKER.with(|w| {
        let mut worker = w.borrow_mut();
        let next = worker.metrics.len() as u32 + 1;
        let id = *worker.metric_ids.entry(name).or_insert(next);
        if id == next {
            worker.metrics.push(0);
        }
        id
    });
    write_u32(&mut caller, out, id).map(|()| status::OK)
}

fn metric(id: i32, change: impl FnOnce(&mut i64)) -> i32 {
    WORKER.with(|w| {
        let mut worker = w.borrow_mut();
        match worker.metrics.get_mut((id as u32 as usize).wrapping_sub(1)) {
            Some(value) => {
                change(value);
                status::OK
            }
            None => status::NOT_FOUND,
        }
    })
}
