//! One Lua state per worker thread: made on the thread's first Lua call,
//! never shared or moved. It holds the PDK tables, the sandbox's
//! environment makers, and each plugin instance's compiled code, compiled
//! on the instance's first call on this thread and dropped when the
//! instance is (a configuration change makes new instances).
//!
//! **The time budget.** User code runs on LuaJIT's interpreter (the JIT is
//! switched off for every chunk it compiles here), and a phase call that
//! runs past `lua_max_run_time` has an error raised in its code by a hook
//! a watchdog thread sets (budget.rs), which ends that request with 500. Code that catches it (`pcall`, `xpcall`,
//! `coroutine.resume`) has it raised again as those return (sandbox.lua
//! wraps them in the state). Compiled traces never check hooks (LuaJIT issues #723, #1120),
//! hence the interpreter. A call stuck inside one C function (a huge
//! `string.rep`) is bounded by the memory limit, not the clock.
//!
//! **The memory cap.** A state holds at most `lua_memory_limit`; an
//! allocation past it fails that call (its request gets the phase's error),
//! then the state is collected, and when it still holds more than four
//! fifths of the cap (code keeping data in upvalues or globals) the worker
//! drops it and makes a fresh one on its next call.

use mlua::{Function, Lua, Table, Value};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use crate::budget::{self, Budget};
use crate::ctx;
pub(crate) use crate::ctx::Store;
use crate::custom::CustomPlugin;
use crate::pdk::{self, Call, Phase};
use crate::settings::{self, LuaSettings, UntrustedLua};

/// Kong's message when `untrusted_lua = off`.
pub(crate) const UNTRUSTED_OFF: &str =
    "loading of untrusted Lua code disabled because 'untrusted_lua' config option is set to 'off'";

/// A plugin instance's id, process-wide, taken when the instance is built:
/// what the workers key its compiled code and config table by. Dropping
/// it tells every worker to forget them.
#[derive(Debug)]
pub(crate) struct InstanceId(pub u64);

impl InstanceId {
    pub fn new() -> InstanceId {
        InstanceId(NEXT_ID.fetch_add(1, Ordering::Relaxed))
    }
}

impl Drop for InstanceId {
    fn drop(&mut self) {
        let mut retired = RETIRED.lock().unwrap_or_else(PoisonError::into_inner);
        retired.push(self.0);
        RETIRED_COUNT.store(retired.len(), Ordering::Release);
    }
}

/// A plugin instance's Lua code, per phase: what the workers compile.
#[derive(Debug)]
pub(crate) struct Code {
    pub id: InstanceId,
    pub plugin: &'static str,
    pub rewrite: Vec<String>,
    pub access: Vec<String>,
    pub header_filter: Vec<String>,
    pub body_filter: Vec<String>,
    pub log: Vec<String>,
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

impl Code {
    /// `phases` in [`Phase`]'s order: rewrite, access, header_filter,
    /// body_filter, log.
    pub fn new(plugin: &'static str, phases: [Vec<String>; 5]) -> Code {
        let [rewrite, access, header_filter, body_filter, log] = phases;
        Code {
            id: InstanceId::new(),
            plugin,
            rewrite,
            access,
            header_filter,
            body_filter,
            log,
        }
    }

    fn phase(&self, phase: Phase) -> &[String] {
        match phase {
            Phase::Rewrite => &self.rewrite,
            Phase::Access => &self.access,
            Phase::HeaderFilter => &self.header_filter,
            Phase::BodyFilter => &self.body_filter,
            Phase::Log => &self.log,
        }
    }
}

/// Ids of dropped instances, in order; each worker forgets their code when
/// it next runs Lua (one atomic load when nothing was dropped). Eight bytes
/// per instance ever dropped.
static RETIRED: Mutex<Vec<u64>> = Mutex::new(Vec::new());
static RETIRED_COUNT: AtomicUsize = AtomicUsize::new(0);

/// One compiled piece of code (one string of a phase's array), run as
/// Kong runs it: the chunk's first run returning a function makes that
/// function what runs from then on (its upvalues kept between requests);
/// otherwise the chunk itself runs on every request.
struct Entry {
    chunk: Function,
    resolved: RefCell<Option<Function>>,
}

impl Entry {
    fn run(&self) -> mlua::Result<()> {
        if let Some(function) = &*self.resolved.borrow() {
            return function.call(());
        }
        match self.chunk.call::<Value>(()) {
            Ok(Value::Function(function)) => {
                *self.resolved.borrow_mut() = Some(function.clone());
                function.call(())
            }
            Ok(_) => {
                *self.resolved.borrow_mut() = Some(self.chunk.clone());
                Ok(())
            }
            Err(error) => {
                // Ended early (an error, `kong.response.exit`): the chunk
                // itself runs next time, as in Kong.
                *self.resolved.borrow_mut() = Some(self.chunk.clone());
                Err(error)
            }
        }
    }
}

type Hasher = foldhash::fast::RandomState;

/// A custom plugin's phase method, called as `handler:method(conf)`.
struct Method {
    function: Function,
    handler: Table,
    conf: Table,
}

/// A phase's compiled code, or why it could not be compiled.
type Compiled = Rc<Result<Vec<Entry>, String>>;

struct Worker {
    /// Dropped before the state (it tells the watchdog first).
    budget: Option<Budget>,
    lua: Lua,
    settings: Arc<LuaSettings>,
    /// Makes one chunk's environment under `sandbox` (sandbox.lua).
    sandboxed: Function,
    /// Makes one chunk's environment under `on`.
    open: Function,
    /// Custom plugins' handler modules, required on first use.
    handlers: HashMap<&'static str, Table, Hasher>,
    /// Custom plugin instances' config tables, by instance id.
    confs: HashMap<u64, Table, Hasher>,
    /// Custom plugin instances' phase methods, with their handler and
    /// config, by instance id and phase: looked up once.
    methods: HashMap<(u64, u8), Rc<Method>, Hasher>,
    compiled: HashMap<(u64, u8), Compiled, Hasher>,
    retired_seen: usize,
    /// Set when a call ran out of memory and collecting did not free
    /// enough: the state is dropped after the call.
    spent: bool,
}

thread_local! {
    static WORKER: RefCell<Option<Worker>> = const { RefCell::new(None) };
}

impl Worker {
    fn new(settings: Arc<LuaSettings>) -> mlua::Result<Worker> {
        let lua = Lua::new();
        if settings.memory_limit > 0 {
            if let Err(error) = lua.set_memory_limit(settings.memory_limit) {
                tracing::warn!("lua_memory_limit cannot apply to this LuaJIT build: {error}");
            }
        }
        let tables = pdk::install(&lua)?;
        let (kong, ngx) = (tables.kong.clone(), tables.ngx.clone());
        // Custom plugins' handlers read `kong` and `ngx` as globals.
        lua.globals().set("kong", kong.clone())?;
        lua.globals().set("ngx", ngx.clone())?;
        let expired = lua.create_function(|_, ()| Ok(budget::expired()))?;
        let requires = settings.sandbox_requires.clone();
        let environment = settings.sandbox_environment.clone();
        let (sandboxed, open): (Function, Function) = lua
            .load(include_str!("sandbox.lua"))
            .set_name("=strait/sandbox.lua")
            .call((requires, environment, kong, ngx, expired))?;
        // Hooks never fire in compiled traces: user code runs on the
        // interpreter, so the budget holds.
        let jit: Table = lua.globals().get("jit")?;
        jit.get::<Function>("off")?.call::<()>(())?;
        crate::custom::prepare(&lua, &settings)?;
        let budget = Budget::new(&lua, settings.max_run_time)?;
        Ok(Worker {
            budget,
            lua,
            settings,
            sandboxed,
            open,
            handlers: HashMap::default(),
            confs: HashMap::default(),
            methods: HashMap::default(),
            compiled: HashMap::default(),
            retired_seen: 0,
            spent: false,
        })
    }

    /// Forgets the code of instances dropped since the last look.
    fn forget_retired(&mut self) {
        let count = RETIRED_COUNT.load(Ordering::Acquire);
        if count == self.retired_seen {
            return;
        }
        let retired = RETIRED.lock().unwrap_or_else(PoisonError::into_inner);
        for id in &retired[self.retired_seen..] {
            for phase in 0..5 {
                self.compiled.remove(&(*id, phase));
                self.methods.remove(&(*id, phase));
            }
            self.confs.remove(id);
        }
        self.retired_seen = retired.len();
    }

    fn compiled(&mut self, code: &Code, phase: Phase) -> Compiled {
        let key = (code.id.0, phase as u8);
        if let Some(compiled) = self.compiled.get(&key) {
            return compiled.clone();
        }
        let compiled = Rc::new(self.compile(code.phase(phase)));
        self.compiled.insert(key, compiled.clone());
        compiled
    }

    fn compile(&self, sources: &[String]) -> Result<Vec<Entry>, String> {
        sources
            .iter()
            .map(|source| {
                let env: Table = match self.settings.untrusted_lua {
                    UntrustedLua::Off => return Err(UNTRUSTED_OFF.to_string()),
                    UntrustedLua::Sandbox => self.sandboxed.call(()),
                    UntrustedLua::On => self.open.call(()),
                }
                .map_err(|e| e.to_string())?;
                let chunk = self
                    .lua
                    .load(source.as_str())
                    .set_name(source.as_str())
                    .set_mode(mlua::ChunkMode::Text)
                    .set_environment(env)
                    .into_function()
                    .map_err(|e| e.to_string())?;
                Ok(Entry {
                    chunk,
                    resolved: RefCell::new(None),
                })
            })
            .collect()
    }

    fn run(&mut self, code: &Code, phase: Phase, store: Store<'_>, call: Box<Call>) -> (Result<(), String>, Box<Call>) {
        self.forget_retired();
        let compiled = self.compiled(code, phase);
        let entries = match compiled.as_ref() {
            Ok(entries) => entries,
            Err(error) => return (Err(error.clone()), call),
        };
        ctx::enter(&store, code.plugin);
        let (result, call) = self.bounded(|| {
            pdk::with_current(call, || {
                for entry in entries {
                    entry.run()?;
                }
                Ok::<(), mlua::Error>(())
            })
        });
        ctx::leave(store);
        self.finish(result, call)
    }

    /// Runs one phase call under the time budget (budget.rs).
    fn bounded<R>(&self, run: impl FnOnce() -> R) -> R {
        match &self.budget {
            Some(budget) => budget.call(run),
            None => run(),
        }
    }

    /// After a phase call: a memory error handled.
    fn finish(&mut self, result: mlua::Result<()>, call: Box<Call>) -> (Result<(), String>, Box<Call>) {
        if let Err(error) = &result {
            self.after_error(error);
        }
        (result.map_err(|e| e.to_string()), call)
    }

    /// A custom plugin's handler in this state: required on first use, its
    /// `init_worker` run then (an error there is logged, as Kong does).
    fn handler(&mut self, name: &'static str) -> mlua::Result<Table> {
        if let Some(handler) = self.handlers.get(name) {
            return Ok(handler.clone());
        }
        let require: Function = self.lua.globals().get("require")?;
        let handler: Table = require.call(crate::custom::module(name, "handler"))?;
        if let Ok(init) = handler.get::<Function>("init_worker") {
            if let Err(error) = init.call::<()>(handler.clone()) {
                tracing::error!(target: "strait::lua", "[{name}] init_worker: {error}");
            }
        }
        self.handlers.insert(name, handler.clone());
        Ok(handler)
    }

    /// A custom plugin instance's config as a Lua table, made once (nulls
    /// left out, as Kong's are).
    fn conf(&mut self, plugin: &CustomPlugin) -> mlua::Result<Table> {
        if let Some(conf) = self.confs.get(&plugin.id.0) {
            return Ok(conf.clone());
        }
        let options = mlua::SerializeOptions::new()
            .serialize_none_to_null(false)
            .serialize_unit_to_null(false);
        let value = mlua::LuaSerdeExt::to_value_with(&self.lua, &*plugin.config, options)?;
        let Value::Table(conf) = value else {
            return Err(mlua::Error::runtime("a plugin's config is a record"));
        };
        self.confs.insert(plugin.id.0, conf.clone());
        Ok(conf)
    }

    fn run_custom(
        &mut self,
        plugin: &CustomPlugin,
        phase: Phase,
        store: Store<'_>,
        call: Box<Call>,
    ) -> (Result<(), String>, Box<Call>) {
        self.forget_retired();
        let name = plugin.definition.name;
        let key = (plugin.id.0, phase as u8);
        let method = match self.methods.get(&key) {
            Some(method) => method.clone(),
            None => {
                let prepared = self.handler(name).and_then(|handler| {
                    let function: Function = handler.get(phase.name())?;
                    Ok(Rc::new(Method {
                        function,
                        handler,
                        conf: self.conf(plugin)?,
                    }))
                });
                match prepared {
                    Ok(method) => {
                        self.methods.insert(key, method.clone());
                        method
                    }
                    Err(error) => return (Err(error.to_string()), call),
                }
            }
        };
        ctx::enter(&store, name);
        let (result, call) =
            self.bounded(|| pdk::with_current(call, || method.function.call::<()>((&method.handler, &method.conf))));
        ctx::leave(store);
        self.finish(result, call)
    }

    /// After a failed call: a state out of memory is collected, and marked
    /// spent when that leaves it nearly full.
    fn after_error(&mut self, error: &mlua::Error) {
        let limit = self.settings.memory_limit;
        if limit == 0 || !error.to_string().contains("not enough memory") {
            return;
        }
        if self.lua.gc_collect().is_err() || self.lua.used_memory() > limit / 5 * 4 {
            self.spent = true;
        }
    }
}

/// Runs `code`'s `phase` functions on this thread's state, on `call`, with
/// the request's Lua tables found through `store`.
pub(crate) fn run(code: &Code, phase: Phase, store: Store<'_>, call: Box<Call>) -> (Result<(), String>, Box<Call>) {
    with_worker(code.plugin, call, |worker, call| worker.run(code, phase, store, call))
}

/// Runs a custom plugin's `phase` method on this thread's state.
pub(crate) fn run_custom(
    plugin: &CustomPlugin,
    phase: Phase,
    store: Store<'_>,
    call: Box<Call>,
) -> (Result<(), String>, Box<Call>) {
    with_worker(plugin.definition.name, call, |worker, call| {
        worker.run_custom(plugin, phase, store, call)
    })
}

/// This thread's worker state (made on first use), for one call.
fn with_worker(
    plugin: &str,
    call: Box<Call>,
    run: impl FnOnce(&mut Worker, Box<Call>) -> (Result<(), String>, Box<Call>),
) -> (Result<(), String>, Box<Call>) {
    WORKER.with(|cell| {
        let mut worker = cell.borrow_mut();
        if worker.is_none() {
            match Worker::new(settings::current()) {
                Ok(made) => *worker = Some(made),
                Err(error) => return (Err(format!("the worker's Lua state could not be made: {error}")), call),
            }
        }
        let made = worker.as_mut().expect("made above");
        let ran = run(made, call);
        if made.spent {
            tracing::warn!(
                plugin,
                "this worker's Lua state stayed near lua_memory_limit after a collection: made anew"
            );
            *worker = None;
            ctx::reset();
        }
        ran
    })
}

/// Whether `source` parses as a Lua chunk (the pre-/post-function schema's
/// check): the parser's message when it does not.
pub(crate) fn syntax_error(source: &str) -> Option<String> {
    thread_local! {
        static PARSER: Lua = Lua::new();
    }
    PARSER.with(|lua| {
        lua.load(source)
            .set_name(source)
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .err()
            .map(|error| match error {
                mlua::Error::SyntaxError { message, .. } => message,
                other => other.to_string(),
            })
    })
}

#[cfg(test)]
mod tests;
