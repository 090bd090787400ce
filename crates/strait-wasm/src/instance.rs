//! A filter's instance on one worker thread: its store (memory, limits,
//! what the current callback sees), the callbacks it exports, and its root
//! contexts (one per configuration it was given). Each worker thread makes
//! its own instance on its first request for the filter, so requests on a
//! thread share it without contention; the request holds the instance it
//! started on (an `Arc`), so a request that moves between threads (the
//! work-stealing worker model) still finds its HTTP context. A trap leaves
//! the instance `broken`: its requests fail, and the thread makes a new one.

use std::cell::RefCell;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use wasmtime::{Instance, Memory, Store, StoreLimits, StoreLimitsBuilder, TypedFunc, WasmParams, WasmResults};

use crate::chain::Configuration;
use crate::exchange::{Exchange, Phase};
use crate::filter::Filter;

/// What a filter's store holds besides its instance.
pub(crate) struct HostState {
    pub limits: StoreLimits,
    pub memory: Option<Memory>,
    pub allocate: Option<TypedFunc<i32, i32>>,
    pub filter: Arc<str>,
    pub exchange: Exchange,
    /// The last HTTP call's token.
    pub next_call_token: u32,
}

impl HostState {
    /// A state for a store that runs nothing (probing a linker).
    pub(crate) fn idle() -> HostState {
        HostState {
            limits: StoreLimits::default(),
            memory: None,
            allocate: None,
            filter: Arc::from(""),
            exchange: Exchange::default(),
            next_call_token: 0,
        }
    }
}

/// Why a callback did not return.
#[derive(Debug)]
pub(crate) enum Fault {
    /// It trapped (a panic, `proc_exit`, an out-of-bounds access, memory
    /// past the limit) or ran past the request's time budget.
    Trapped(String),
    /// The instance trapped before, in another request.
    Broken,
    /// `proxy_on_configure` refused the filter's configuration.
    Refused,
}

/// `proxy_on_http_call_response(root, token, headers, body size, trailers)`.
type CallResponseCallback = TypedFunc<(i32, i32, i32, i32, i32), ()>;

/// The exported callbacks this host calls (ABI 0.2.x signatures).
struct Callbacks {
    context_create: TypedFunc<(i32, i32), ()>,
    vm_start: Option<TypedFunc<(i32, i32), i32>>,
    configure: Option<TypedFunc<(i32, i32), i32>>,
    request_headers: Option<TypedFunc<(i32, i32, i32), i32>>,
    response_headers: Option<TypedFunc<(i32, i32, i32), i32>>,
    call_response: Option<CallResponseCallback>,
    response_body: Option<TypedFunc<(i32, i32, i32), i32>>,
    done: Option<TypedFunc<i32, i32>>,
    tick: Option<TypedFunc<i32, ()>>,
    log: Option<TypedFunc<i32, ()>>,
    delete: Option<TypedFunc<i32, ()>>,
}

pub(crate) struct FilterInstance {
    store: Store<HostState>,
    callbacks: Callbacks,
    /// By configuration number: the root context configured with it
    /// (`Some(None)`: `proxy_on_configure` refused it; `None`: not yet made).
    roots: Vec<Option<Option<i32>>>,
    next_context: i32,
    broken: bool,
    /// Root contexts that asked for ticks (with the period) since the
    /// owner last took them ([`FilterInstance::take_tick_requests`]).
    tick_requests: Vec<(i32, Duration)>,
}

/// A filter's instance as requests share it.
pub(crate) type Shared = Arc<Mutex<FilterInstance>>;

thread_local! {
    /// This thread's instance of each filter, by filter index.
    static INSTANCES: RefCell<Vec<Option<Shared>>> = const { RefCell::new(Vec::new()) };
}

/// This thread's instance of `filter`, made when there is none or the last
/// one broke.
pub(crate) fn for_thread(filter: &Filter) -> Result<Shared, String> {
    INSTANCES.with(|cell| {
        let mut slots = cell.borrow_mut();
        if slots.len() <= filter.index {
            slots.resize(filter.index + 1, None);
        }
        if let Some(shared) = &slots[filter.index] {
            if !lock(shared).broken {
                return Ok(shared.clone());
            }
        }
        let made = Arc::new(Mutex::new(FilterInstance::new(filter)?));
        slots[filter.index] = Some(made.clone());
        Ok(made)
    })
}

/// Runs `proxy_on_tick` of `root` every `period` on the runtime of the
/// calling worker (its thread, in the thread-per-core model), for as long
/// as the instance is this thread's and unbroken. A tick that traps or runs
/// past `budget` breaks the instance, as a request's would.
pub(crate) fn start_ticks(shared: &Shared, root: i32, period: Duration, budget: Duration) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::warn!(filter = %lock(shared).store.data().filter, "no runtime to run the filter's ticks on");
        return;
    };
    let instance = Arc::downgrade(shared);
    runtime.spawn(async move {
        let mut clock = tokio::time::interval(period.max(Duration::from_millis(1)));
        clock.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        clock.tick().await;
        loop {
            clock.tick().await;
            let Some(shared) = instance.upgrade() else { return };
            let mut guard = lock(&shared);
            if guard.broken {
                return;
            }
            let deadline = crate::runtime::epoch() + crate::runtime::ticks(budget);
            if let Err(fault) = guard.on_tick(root, deadline) {
                let filter = guard.store.data().filter.clone();
                tracing::error!(filter = %filter, fault = ?fault, "wasm filter failed in proxy_on_tick");
                return;
            }
        }
    });
}

pub(crate) fn lock(shared: &Shared) -> std::sync::MutexGuard<'_, FilterInstance> {
    shared.lock().unwrap_or_else(PoisonError::into_inner)
}

impl FilterInstance {
    /// Instantiates `filter` and runs its start-up (`_initialize`, then
    /// `main` when exported, or `_start`).
    pub(crate) fn new(filter: &Filter) -> Result<FilterInstance, String> {
        let state = HostState {
            limits: StoreLimitsBuilder::new()
                .memory_size(filter.limits.max_memory)
                .instances(1)
                .build(),
            memory: None,
            allocate: None,
            filter: filter.name.clone(),
            exchange: Exchange::default(),
            next_call_token: 0,
        };
        let mut store = Store::new(filter.pre.module().engine(), state);
        store.limiter(|state| &mut state.limits);
        // Start-up (a Go runtime's initialisation) gets ten budgets.
        store.set_epoch_deadline(crate::runtime::ticks(filter.limits.max_run_time * 10));
        let fail = |e: wasmtime::Error| format!("filter {}: {e:#}", filter.name);
        let instance = filter.pre.instantiate(&mut store).map_err(fail)?;
        store.data_mut().memory = instance.get_memory(&mut store, "memory");
        store.data_mut().allocate = instance
            .get_typed_func::<i32, i32>(&mut store, "proxy_on_memory_allocate")
            .or_else(|_| instance.get_typed_func::<i32, i32>(&mut store, "malloc"))
            .ok();
        for start in ["_initialize", "_start"] {
            if let Ok(run) = instance.get_typed_func::<(), ()>(&mut store, start) {
                run.call(&mut store, ()).map_err(fail)?;
                break;
            }
        }
        if let Ok(main) = instance.get_typed_func::<(i32, i32), i32>(&mut store, "main") {
            main.call(&mut store, (0, 0)).map_err(fail)?;
        }
        let callbacks = Callbacks::find(&instance, &mut store)
            .ok_or_else(|| format!("filter {}: exports no proxy_on_context_create", filter.name))?;
        Ok(FilterInstance {
            store,
            callbacks,
            roots: Vec::new(),
            next_context: 1,
            broken: false,
            tick_requests: Vec::new(),
        })
    }

    fn next_id(&mut self) -> i32 {
        let id = self.next_context;
        self.next_context = self.next_context.wrapping_add(1).max(1);
        id
    }

    /// The root context configured with `configuration`, made (and
    /// `proxy_on_vm_start` / `proxy_on_configure` run) on first use.
    pub(crate) fn root(&mut self, configuration: &Configuration, deadline: u64) -> Result<i32, Fault> {
        match self.roots.get(configuration.id) {
            Some(Some(Some(root))) => return Ok(*root),
            Some(Some(None)) => return Err(Fault::Refused),
            _ => {}
        }
        if self.roots.len() <= configuration.id {
            self.roots.resize(configuration.id + 1, None);
        }
        let (id, configuration) = (configuration.id, &configuration.bytes);
        let root = self.next_id();
        self.call(|c| Some(&c.context_create), (), (root, 0), deadline, Phase::Configure)?;
        self.call(|c| c.vm_start.as_ref(), 1, (root, 0), deadline, Phase::Configure)?;
        self.store
            .data_mut()
            .exchange
            .configuration
            .extend_from_slice(configuration);
        let size = configuration.len() as i32;
        let accepted = self.call(|c| c.configure.as_ref(), 1, (root, size), deadline, Phase::Configure)?;
        if accepted == 0 {
            self.roots[id] = Some(None);
            return Err(Fault::Refused);
        }
        self.roots[id] = Some(Some(root));
        if let Some(period) = self.store.data_mut().exchange.tick_period.take().filter(|p| *p > 0) {
            self.tick_requests
                .push((root, Duration::from_millis(u64::from(period))));
        }
        Ok(root)
    }

    /// The root contexts that asked for ticks since the last call.
    pub(crate) fn take_tick_requests(&mut self) -> Vec<(i32, Duration)> {
        std::mem::take(&mut self.tick_requests)
    }

    /// `proxy_on_tick` of root context `root`.
    pub(crate) fn on_tick(&mut self, root: i32, deadline: u64) -> Result<(), Fault> {
        self.exchange().clear();
        self.call(|c| c.tick.as_ref(), (), root, deadline, Phase::Configure)
    }

    /// A new HTTP context under `root`.
    pub(crate) fn http_context(&mut self, root: i32, deadline: u64) -> Result<i32, Fault> {
        let id = self.next_id();
        self.call(|c| Some(&c.context_create), (), (id, root), deadline, Phase::Idle)?;
        Ok(id)
    }

    pub(crate) fn exchange(&mut self) -> &mut Exchange {
        &mut self.store.data_mut().exchange
    }

    /// `proxy_on_request_headers`; the action (0 continue, 1 pause).
    pub(crate) fn on_request_headers(&mut self, id: i32, count: i32, end: bool, deadline: u64) -> Result<i32, Fault> {
        let params = (id, count, end as i32);
        self.call(
            |c| c.request_headers.as_ref(),
            0,
            params,
            deadline,
            Phase::RequestHeaders,
        )
    }

    /// `proxy_on_http_call_response` for the answer in the exchange, to
    /// the root context `root`.
    pub(crate) fn on_http_call_response(&mut self, root: i32, token: u32, deadline: u64) -> Result<(), Fault> {
        let answer = &self.exchange().call_response;
        let params = (
            root,
            token as i32,
            answer.headers.len() as i32,
            answer.body.len() as i32,
            0,
        );
        self.call(|c| c.call_response.as_ref(), (), params, deadline, Phase::CallResponse)
    }

    pub(crate) fn on_response_headers(&mut self, id: i32, count: i32, deadline: u64) -> Result<i32, Fault> {
        self.call(
            |c| c.response_headers.as_ref(),
            0,
            (id, count, 0),
            deadline,
            Phase::ResponseHeaders,
        )
    }

    pub(crate) fn exports_response_headers(&self) -> bool {
        self.callbacks.response_headers.is_some()
    }

    pub(crate) fn exports_response_body(&self) -> bool {
        self.callbacks.response_body.is_some()
    }

    pub(crate) fn on_response_body(&mut self, id: i32, size: i32, end: bool, deadline: u64) -> Result<i32, Fault> {
        let params = (id, size, end as i32);
        self.call(|c| c.response_body.as_ref(), 0, params, deadline, Phase::ResponseBody)
    }

    /// `proxy_on_done`, `proxy_on_log`, `proxy_on_delete`: the request is
    /// over (in that order, as ngx_wasm_module calls them).
    pub(crate) fn finish(&mut self, id: i32, deadline: u64) -> Result<(), Fault> {
        self.call(|c| c.done.as_ref(), 1, id, deadline, Phase::Log)?;
        self.call(|c| c.log.as_ref(), (), id, deadline, Phase::Log)?;
        self.call(|c| c.delete.as_ref(), (), id, deadline, Phase::Idle)
    }

    /// Runs one callback (chosen from the exports by `pick`, without
    /// cloning it: a clone of a typed function registers its type again)
    /// within what is left of the request's budget; a trap breaks the
    /// instance. A callback the filter does not export returns `absent`.
    fn call<P: WasmParams, R: WasmResults>(
        &mut self,
        pick: impl FnOnce(&Callbacks) -> Option<&TypedFunc<P, R>>,
        absent: R,
        params: P,
        deadline: u64,
        phase: Phase,
    ) -> Result<R, Fault> {
        if self.broken {
            return Err(Fault::Broken);
        }
        let Some(f) = pick(&self.callbacks) else {
            return Ok(absent);
        };
        let now = crate::runtime::epoch();
        if now >= deadline {
            return Err(Fault::Trapped("the request's time budget was spent".into()));
        }
        self.store.set_epoch_deadline(deadline - now);
        self.store.data_mut().exchange.phase = phase;
        let outcome = f.call(&mut self.store, params);
        self.store.data_mut().exchange.phase = Phase::Idle;
        outcome.map_err(|error| {
            self.broken = true;
            let reason = match error.downcast_ref::<wasmtime::Trap>() {
                Some(wasmtime::Trap::Interrupt) => "ran past the request's time budget".to_string(),
                _ => format!("{error:#}"),
            };
            Fault::Trapped(reason)
        })
    }
}

impl Callbacks {
    fn find(instance: &Instance, store: &mut Store<HostState>) -> Option<Callbacks> {
        Some(Callbacks {
            context_create: instance.get_typed_func(&mut *store, "proxy_on_context_create").ok()?,
            vm_start: instance.get_typed_func(&mut *store, "proxy_on_vm_start").ok(),
            configure: instance.get_typed_func(&mut *store, "proxy_on_configure").ok(),
            request_headers: instance.get_typed_func(&mut *store, "proxy_on_request_headers").ok(),
            response_headers: instance.get_typed_func(&mut *store, "proxy_on_response_headers").ok(),
            call_response: instance.get_typed_func(&mut *store, "proxy_on_http_call_response").ok(),
            response_body: instance.get_typed_func(&mut *store, "proxy_on_response_body").ok(),
            done: instance.get_typed_func(&mut *store, "proxy_on_done").ok(),
            tick: instance.get_typed_func(&mut *store, "proxy_on_tick").ok(),
            log: instance.get_typed_func(&mut *store, "proxy_on_log").ok(),
            delete: instance.get_typed_func(&mut *store, "proxy_on_delete").ok(),
        })
    }
}
