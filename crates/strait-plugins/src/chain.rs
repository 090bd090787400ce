//! [`PluginChain`]: the plugins that may run for one route, in Kong's
//! priority order, built when the snapshot compiles.
//!
//! Each plugin name has one slot. A slot holds the instance Kong's scope
//! precedence picks without a consumer (route+service > route > service >
//! global) and notes whether consumer-scoped instances of that name exist.
//! Once an authentication plugin identified the consumer, the slots after it
//! resolve against that consumer's plugins: a short list looked up by
//! consumer id, never a chain rebuilt per request. The full precedence is
//! route+service+consumer > route+consumer > service+consumer >
//! route+service > consumer > route > service > global.

use std::sync::Arc;

use uuid::Uuid;

use crate::context::{Protocol, ProtocolSet, RequestCtx, ResponseCtx};
use crate::phase::{CertificateCtx, CertificateFlow, Flow, Plugin, SuspendAccess};

/// Precedence ranks, higher wins: Kong's scope order (Kong Enterprise's,
/// consumer groups included).
pub mod rank {
    pub const GLOBAL: u8 = 0;
    pub const SERVICE: u8 = 1;
    pub const ROUTE: u8 = 2;
    pub const CONSUMER_GROUP: u8 = 3;
    pub const CONSUMER: u8 = 4;
    pub const ROUTE_SERVICE: u8 = 5;
    pub const SERVICE_CONSUMER_GROUP: u8 = 6;
    pub const ROUTE_CONSUMER_GROUP: u8 = 7;
    pub const SERVICE_CONSUMER: u8 = 8;
    pub const ROUTE_CONSUMER: u8 = 9;
    pub const ROUTE_SERVICE_CONSUMER_GROUP: u8 = 10;
    pub const ROUTE_SERVICE_CONSUMER: u8 = 11;

    /// The rank of a plugin scoped to the given parts.
    pub fn of(route: bool, service: bool, consumer: bool) -> u8 {
        match (route, service, consumer) {
            (true, true, true) => ROUTE_SERVICE_CONSUMER,
            (true, false, true) => ROUTE_CONSUMER,
            (false, true, true) => SERVICE_CONSUMER,
            (true, true, false) => ROUTE_SERVICE,
            (false, false, true) => CONSUMER,
            (true, false, false) => ROUTE,
            (false, true, false) => SERVICE,
            (false, false, false) => GLOBAL,
        }
    }

    /// The rank of a plugin scoped to a consumer group (and maybe a route
    /// and/or service).
    pub fn of_group(route: bool, service: bool) -> u8 {
        match (route, service) {
            (true, true) => ROUTE_SERVICE_CONSUMER_GROUP,
            (true, false) => ROUTE_CONSUMER_GROUP,
            (false, true) => SERVICE_CONSUMER_GROUP,
            (false, false) => CONSUMER_GROUP,
        }
    }
}

/// A built plugin with the protocols it runs on.
#[derive(Debug, Clone)]
pub struct ScopedPlugin {
    pub instance: Arc<dyn Plugin>,
    pub protocols: ProtocolSet,
    pub rank: u8,
}

/// A plugin configured for a consumer (and maybe a route and/or service).
#[derive(Debug, Clone)]
pub struct ConsumerPlugin {
    /// The plugin entity's id.
    pub id: Uuid,
    pub route: Option<Uuid>,
    pub service: Option<Uuid>,
    pub plugin: ScopedPlugin,
    /// The consumer group the plugin is scoped to, by name: of a consumer's
    /// groups with the same plugin at the same rank, the first by name wins.
    pub group: Option<std::sync::Arc<str>>,
}

impl ConsumerPlugin {
    fn applies(&self, route: Option<Uuid>, service: Option<Uuid>) -> bool {
        self.route.is_none_or(|r| Some(r) == route) && self.service.is_none_or(|s| Some(s) == service)
    }
}

/// One plugin name in a chain.
#[derive(Debug, Clone)]
pub struct ChainSlot {
    name: &'static str,
    priority: i32,
    default: Option<ScopedPlugin>,
    /// Consumer-scoped instances of this name exist somewhere.
    consumer_scoped: bool,
    /// An instance of this name (the default or a consumer-scoped one),
    /// telling which phases the plugin type implements.
    sample: Arc<dyn Plugin>,
    /// The plugin entity's `ordering` for the access phase: names this
    /// plugin runs before, and names it runs after.
    before: Vec<String>,
    after: Vec<String>,
}

impl ChainSlot {
    /// A slot with the instance precedence picked without a consumer.
    pub fn new(default: ScopedPlugin, consumer_scoped: bool) -> ChainSlot {
        ChainSlot {
            name: default.instance.name(),
            priority: default.instance.priority(),
            sample: default.instance.clone(),
            default: Some(default),
            consumer_scoped,
            before: Vec::new(),
            after: Vec::new(),
        }
    }

    /// The slot with its entity's dynamic ordering of the access phase
    /// (Kong Enterprise's `ordering.before.access` / `after.access`).
    pub fn ordered(mut self, before: Vec<String>, after: Vec<String>) -> ChainSlot {
        self.before = before;
        self.after = after;
        self
    }

    /// A slot for a plugin configured only for consumers; `sample` is any
    /// of its instances.
    pub fn consumer_only(sample: Arc<dyn Plugin>) -> ChainSlot {
        ChainSlot {
            name: sample.name(),
            priority: sample.priority(),
            sample,
            default: None,
            consumer_scoped: true,
            before: Vec::new(),
            after: Vec::new(),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The instance that runs for this request, if any. Inline for the
    /// common slot, one with no consumer-scoped instances (six calls per
    /// request through three plugins).
    #[inline]
    fn resolve<'s>(
        &'s self,
        consumer_plugins: &'s [ConsumerPlugin],
        route: Option<Uuid>,
        service: Option<Uuid>,
        protocol: Protocol,
    ) -> Option<&'s Arc<dyn Plugin>> {
        if !self.consumer_scoped {
            let default = self.default.as_ref()?;
            return default.protocols.contains(protocol).then_some(&default.instance);
        }
        self.resolve_scoped(consumer_plugins, route, service, protocol)
    }

    /// [`ChainSlot::resolve`] for a slot with consumer-scoped instances.
    fn resolve_scoped<'s>(
        &'s self,
        consumer_plugins: &'s [ConsumerPlugin],
        route: Option<Uuid>,
        service: Option<Uuid>,
        protocol: Protocol,
    ) -> Option<&'s Arc<dyn Plugin>> {
        let mut best = self.default.as_ref();
        for candidate in consumer_plugins {
            if candidate.plugin.instance.name() != self.name || !candidate.applies(route, service) {
                continue;
            }
            if best.is_none_or(|b| candidate.plugin.rank > b.rank) {
                best = Some(&candidate.plugin);
            }
        }
        best.filter(|p| p.protocols.contains(protocol)).map(|p| &p.instance)
    }
}

/// The instances whose body filter or log phase follow a response body,
/// in chain order.
pub type Followers = Arc<[Arc<dyn Plugin>]>;

/// The plugins that may run for one route, highest priority first.
#[derive(Debug, Clone, Default)]
pub struct PluginChain {
    slots: Vec<ChainSlot>,
    /// The access phase's order as indexes into `slots`, when a slot's
    /// `ordering` moved a plugin from its priority's place.
    access_order: Option<Box<[usize]>>,
    /// Each protocol's [`Followers`], for a chain whose slots resolve the
    /// same for every consumer (made once, not collected per request).
    followers: [Followers; 4],
    reads_request_body: bool,
    serves_grpc_streams: bool,
    keeps_request_headers: bool,
    keeps_consumer: bool,
    consumer_scoped: bool,
    rewrites: bool,
    filters_headers: bool,
    filters_body: bool,
    /// Every header and body filter takes a lazy head (lazy_head.rs), and
    /// nothing serializes or traces.
    lazy_heads: bool,
    /// A plugin may suspend its access ([`Plugin::suspends`]).
    suspends: bool,
    logs: bool,
    serializes: bool,
    reads_entities: bool,
    serializes_on_demand: bool,
    traces: bool,
    /// The access phase never waits: no instance waits on the network, no
    /// slot resolves per consumer, the request body is not read first.
    inline: bool,
}

/// What [`PluginChain::access_now`] came to.
pub enum Inline {
    Done(Flow),
    /// A plugin must wait: [`PluginChain::resume`] goes on from it.
    Suspended(Suspended),
}

/// Where an inline access phase stopped to wait.
pub struct Suspended {
    /// The plugin's place in the chain's access order.
    at: usize,
    plugin: Arc<dyn Plugin>,
    start: Option<std::time::Instant>,
}

impl PluginChain {
    /// Order by Kong priority, highest first; equal priorities by name in
    /// descending order, as Kong 3.9 sorts its handlers
    /// (`kong/db/dao/plugins.lua`, `sort_by_handler_priority`), so the order
    /// never depends on how the configuration was listed.
    pub fn new(mut slots: Vec<ChainSlot>) -> PluginChain {
        slots.sort_by(|a, b| b.priority.cmp(&a.priority).then(b.name.cmp(a.name)));
        let any = |f: fn(&dyn Plugin) -> bool| slots.iter().any(|s| f(s.sample.as_ref()));
        let followers = |protocol| collect_followers(&slots, &[], None, None, protocol);
        let reads_request_body = any(|p| p.reads_request_body());
        let consumer_scoped = slots.iter().any(|s| s.consumer_scoped);
        let waits = slots
            .iter()
            .any(|s| s.default.as_ref().is_some_and(|d| d.instance.waits()));
        PluginChain {
            followers: [Protocol::Http, Protocol::Https, Protocol::Grpc, Protocol::Grpcs].map(followers),
            inline: !(consumer_scoped || reads_request_body || waits),
            reads_request_body,
            serves_grpc_streams: any(|p| p.serves_grpc_streams()),
            keeps_request_headers: any(|p| p.reads_request_headers_in_response()),
            keeps_consumer: any(|p| p.reads_consumer_in_response()),
            consumer_scoped,
            rewrites: any(|p| p.rewrites()),
            filters_headers: any(|p| p.filters_headers()),
            lazy_heads: any(|p| p.filters_headers() || p.filters_body())
                && !any(|p| (p.filters_headers() || p.filters_body()) && !p.filters_lazy_heads())
                && !any(|p| p.filters_body() && !p.removes_content_length())
                && !any(|p| p.serializes() || p.traces()),
            filters_body: any(|p| p.filters_body()),
            suspends: any(|p| p.suspends()),
            logs: any(|p| p.logs()),
            serializes: any(|p| p.serializes()),
            reads_entities: any(|p| p.reads_entities()),
            serializes_on_demand: any(|p| p.serializes_on_demand()),
            traces: any(|p| p.traces()),
            access_order: None,
            slots,
        }
    }

    /// [`PluginChain::new`], then the slots' dynamic ordering applied to
    /// the access phase: each plugin runs after those it must follow and
    /// otherwise in priority order. A cycle is an error naming it.
    pub fn ordered(slots: Vec<ChainSlot>) -> Result<PluginChain, String> {
        let mut chain = PluginChain::new(slots);
        if chain.slots.iter().all(|s| s.before.is_empty() && s.after.is_empty()) {
            return Ok(chain);
        }
        let order = access_order(&chain.slots)?;
        if order.iter().enumerate().any(|(at, index)| at != *index) {
            chain.access_order = Some(order.into_boxed_slice());
        }
        Ok(chain)
    }

    /// The slots in the access phase's order.
    fn access_slots(&self) -> impl Iterator<Item = &ChainSlot> {
        let order = self.access_order.as_deref();
        (0..self.slots.len()).map(move |at| &self.slots[order.map_or(at, |o| o[at])])
    }

    /// A chain of plain instances, each at the given rank (tests, global rewrite).
    pub fn from_instances(instances: Vec<Arc<dyn Plugin>>) -> PluginChain {
        let slots = instances
            .into_iter()
            .map(|instance| {
                ChainSlot::new(
                    ScopedPlugin {
                        instance,
                        protocols: ProtocolSet::ALL,
                        rank: rank::GLOBAL,
                    },
                    false,
                )
            })
            .collect();
        PluginChain::new(slots)
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Some slot may resolve to a consumer-scoped instance.
    pub fn has_consumer_scoped(&self) -> bool {
        self.consumer_scoped
    }

    pub fn reads_request_body(&self) -> bool {
        self.reads_request_body
    }

    /// Some plugin may serve a gRPC call itself ([`crate::ServeHere`]): a
    /// gRPC request's body is then not read before access.
    pub fn serves_grpc_streams(&self) -> bool {
        self.serves_grpc_streams
    }

    /// Some plugin's `header_filter` reads the request headers.
    pub fn keeps_request_headers(&self) -> bool {
        self.keeps_request_headers
    }

    /// Some plugin's `header_filter` reads who the request authenticated as.
    pub fn keeps_consumer(&self) -> bool {
        self.keeps_consumer
    }

    /// Some plugin of the chain has a body filter or a log phase.
    /// Some plugin's `log` needs [`crate::LogRecord::details`].
    pub fn serializes_log(&self) -> bool {
        self.serializes
    }

    /// Some plugin's `log` needs [`crate::LogRecord::details`] for the
    /// requests that ask ([`crate::WantsLogDetails`]).
    pub fn serializes_on_demand(&self) -> bool {
        self.serializes_on_demand
    }

    /// Some plugin's `log` needs [`crate::LogRecord::entities`].
    pub fn reads_entities(&self) -> bool {
        self.reads_entities || self.serializes
    }

    pub fn follows_response_body(&self) -> bool {
        self.filters_body || self.logs
    }

    /// No plugin of the chain reads or changes the response head (no
    /// header or body filter, no serialized log, no trace): the proxy may
    /// pass the upstream's head on in its own bytes, adding only the
    /// headers `access` asked for.
    pub fn leaves_response_head(&self) -> bool {
        !(self.filters_headers || self.filters_body || self.serializes || self.traces)
    }

    /// The chain filters the response head or body, and every plugin that
    /// does takes a lazy head ([`PluginChain::header_filter_lazy`]): an
    /// upstream's head may be passed on in its own bytes.
    pub fn filters_lazy_heads(&self) -> bool {
        self.lazy_heads
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.slots.iter().map(|s| s.name).collect()
    }

    /// Run `certificate` of every plugin (the global chain's) until one
    /// decides.
    pub fn certificate(&self, ctx: &CertificateCtx<'_>) -> CertificateFlow {
        for slot in &self.slots {
            if let Some(plugin) = slot.default.as_ref().filter(|p| p.instance.handles_certificate()) {
                let flow = plugin.instance.certificate(ctx);
                if !matches!(flow, CertificateFlow::Continue) {
                    return flow;
                }
            }
        }
        CertificateFlow::Continue
    }

    /// The access phase can run as a plain call ([`PluginChain::access_now`]):
    /// no plugin of the chain waits, reads the request body first or is
    /// scoped to consumers.
    pub fn runs_inline(&self) -> bool {
        self.inline
    }

    /// [`PluginChain::access`] as a plain call, for a chain that
    /// [`PluginChain::runs_inline`]: the flow, or where a plugin that
    /// [`Plugin::suspends`] must wait ([`PluginChain::resume`] goes on).
    pub fn access_now(&self, ctx: &mut RequestCtx<'_>) -> Inline {
        debug_assert!(self.inline, "a chain whose access may wait, run inline");
        if let Flow::Respond(response) = self.begin_access(ctx) {
            return Inline::Done(Flow::Respond(response));
        }
        for (at, slot) in self.access_slots().enumerate() {
            let Some(plugin) = slot.resolve(&[], ctx.route_id, ctx.service_id, ctx.protocol) else {
                continue;
            };
            let start = self.before_step(plugin.as_ref(), ctx);
            let flow = plugin.access(ctx);
            if self.suspends && plugin.suspends() && ctx.shared.remove::<SuspendAccess>().is_some() {
                return Inline::Suspended(Suspended {
                    at,
                    plugin: plugin.clone(),
                    start,
                });
            }
            self.after_step(plugin.as_ref(), ctx, start);
            if let Flow::Respond(response) = flow {
                return Inline::Done(Flow::Respond(response));
            }
        }
        Inline::Done(Flow::Continue)
    }

    /// The access phase after [`Inline::Suspended`]: the plugin's
    /// [`Plugin::access_resume`], then the slots after it.
    pub async fn resume(&self, ctx: &mut RequestCtx<'_>, suspended: Suspended) -> Flow {
        let Suspended { at, plugin, start } = suspended;
        let flow = plugin.access_resume(ctx).await;
        self.after_step(plugin.as_ref(), ctx, start);
        if let Flow::Respond(response) = flow {
            return Flow::Respond(response);
        }
        self.access_from(ctx, at + 1).await
    }

    /// Run `access` of every plugin until one responds. Slots after an
    /// authentication plugin resolve against the consumer it identified.
    pub async fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if let Flow::Respond(response) = self.begin_access(ctx) {
            return Flow::Respond(response);
        }
        self.access_from(ctx, 0).await
    }

    async fn access_from(&self, ctx: &mut RequestCtx<'_>, first: usize) -> Flow {
        for slot in self.access_slots().skip(first) {
            // Only slots with consumer-scoped instances look the consumer up.
            let consumer_plugins = if slot.consumer_scoped {
                ctx.consumer_plugins()
            } else {
                &[]
            };
            let Some(plugin) = slot.resolve(consumer_plugins, ctx.route_id, ctx.service_id, ctx.protocol) else {
                continue;
            };
            let start = self.before_step(plugin.as_ref(), ctx);
            let mut flow = if plugin.waits() {
                plugin.access_async(ctx).await
            } else {
                plugin.access(ctx)
            };
            if self.suspends && plugin.suspends() && ctx.shared.remove::<SuspendAccess>().is_some() {
                flow = plugin.access_resume(ctx).await;
            }
            self.after_step(plugin.as_ref(), ctx, start);
            if let Flow::Respond(response) = flow {
                return Flow::Respond(response);
            }
        }
        Flow::Continue
    }

    /// Before access: the `rewrite` of the chain's global instances (Kong
    /// runs rewrite handlers of global plugins only). Strait runs them once
    /// the route is known, so a rewrite does not re-route the request.
    fn global_rewrites(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        for slot in &self.slots {
            let Some(plugin) = slot.default.as_ref().filter(|p| p.rank == rank::GLOBAL) else {
                continue;
            };
            if plugin.instance.rewrites() && plugin.protocols.contains(ctx.protocol) {
                if let Flow::Respond(response) = plugin.instance.rewrite(ctx) {
                    return Flow::Respond(response);
                }
            }
        }
        Flow::Continue
    }

    fn begin_access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        if self.rewrites {
            if let Flow::Respond(response) = self.global_rewrites(ctx) {
                return Flow::Respond(response);
            }
        }
        if self.traces {
            ctx.shared.insert(crate::PhaseTimings {
                chain_started: std::time::Instant::now(),
                phases: Vec::with_capacity(self.slots.len() * 2),
            });
        }
        Flow::Continue
    }

    /// Before a plugin's access: the identity fields where it reads them,
    /// and the start of its timing when the chain traces.
    fn before_step(&self, plugin: &dyn Plugin, ctx: &mut RequestCtx<'_>) -> Option<std::time::Instant> {
        if plugin.reads_identity_fields() {
            ctx.identity.move_into(ctx.headers);
        }
        self.traces.then(std::time::Instant::now)
    }

    fn after_step(&self, plugin: &dyn Plugin, ctx: &mut RequestCtx<'_>, start: Option<std::time::Instant>) {
        if let Some(start) = start {
            record(&mut ctx.shared, plugin.name(), crate::TimedPhase::Access, start);
        }
    }

    /// Run `header_filter` of every plugin that applies to the request.
    pub fn header_filter(&self, consumer_plugins: &[ConsumerPlugin], ctx: &mut ResponseCtx<'_>) {
        // A traced chain times every plugin's (empty) header filter too.
        if !self.filters_headers && !self.traces {
            return;
        }
        let (route, service, protocol) = (ctx.request.route_id, ctx.request.service_id, ctx.request.protocol);
        for slot in &self.slots {
            if let Some(plugin) = slot.resolve(consumer_plugins, route, service, protocol) {
                let start = self.traces.then(std::time::Instant::now);
                plugin.header_filter(ctx);
                if let Some(start) = start {
                    record(ctx.shared, plugin.name(), crate::TimedPhase::HeaderFilter, start);
                }
            }
        }
    }

    /// [`PluginChain::header_filter`] on a lazy head, for a chain that
    /// [`PluginChain::filters_lazy_heads`]. A plugin without a lazy header
    /// filter (a consumer's instance of another kind, say) gets the map.
    pub fn header_filter_lazy(&self, consumer_plugins: &[ConsumerPlugin], ctx: &mut crate::LazyResponseCtx<'_>) {
        if !self.filters_headers {
            return;
        }
        let (route, service, protocol) = (ctx.request.route_id, ctx.request.service_id, ctx.request.protocol);
        for slot in &self.slots {
            let Some(plugin) = slot.resolve(consumer_plugins, route, service, protocol) else {
                continue;
            };
            if plugin.filters_lazy_heads() {
                plugin.header_filter_lazy(ctx);
            } else if plugin.filters_headers() {
                let mut eager = ResponseCtx {
                    status: &mut *ctx.status,
                    headers: ctx.headers.headers_mut(),
                    source: ctx.source,
                    request: ctx.request,
                    shared: &mut *ctx.shared,
                };
                plugin.header_filter(&mut eager);
            }
        }
    }

    /// The instances whose body filter or log phase follow the response
    /// body, in chain order: made when the chain was, unless a slot has
    /// consumer-scoped instances (then collected for this request).
    pub fn response_followers(
        &self,
        consumer_plugins: &[ConsumerPlugin],
        route: Option<Uuid>,
        service: Option<Uuid>,
        protocol: Protocol,
    ) -> Followers {
        if !self.consumer_scoped {
            return self.followers[protocol as usize].clone();
        }
        collect_followers(&self.slots, consumer_plugins, route, service, protocol)
    }
}

/// The access order of priority-sorted `slots` under their `ordering`:
/// in priority order, each plugin placed right after the plugins it must
/// follow (placed first, the same way), so a moved plugin lands just
/// before the one it names and nothing else moves.
fn access_order(slots: &[ChainSlot]) -> Result<Vec<usize>, String> {
    let count = slots.len();
    let index = |name: &str| slots.iter().position(|s| s.name == name);
    // must[j] holds every i that runs before j, in priority order.
    let mut must: Vec<Vec<usize>> = vec![Vec::new(); count];
    for (at, slot) in slots.iter().enumerate() {
        for other in slot.before.iter().filter_map(|n| index(n)) {
            must[other].push(at);
        }
        for other in slot.after.iter().filter_map(|n| index(n)) {
            must[at].push(other);
        }
    }
    for list in &mut must {
        list.sort_unstable();
        list.dedup();
    }
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        Visiting,
        Placed,
    }
    fn place(
        j: usize,
        must: &[Vec<usize>],
        marks: &mut [Mark],
        path: &mut Vec<usize>,
        order: &mut Vec<usize>,
    ) -> Result<(), Vec<usize>> {
        match marks[j] {
            Mark::Placed => return Ok(()),
            Mark::Visiting => {
                let from = path.iter().position(|&p| p == j).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(j);
                return Err(cycle);
            }
            Mark::New => {}
        }
        marks[j] = Mark::Visiting;
        path.push(j);
        for &i in &must[j] {
            place(i, must, marks, path, order)?;
        }
        path.pop();
        marks[j] = Mark::Placed;
        order.push(j);
        Ok(())
    }
    let mut marks = vec![Mark::New; count];
    let mut order = Vec::with_capacity(count);
    for j in 0..count {
        let mut path = Vec::new();
        if let Err(cycle) = place(j, &must, &mut marks, &mut path, &mut order) {
            // The walk went from each plugin to one that must run before
            // it: reversed, the cycle reads in running order.
            let names: Vec<&str> = cycle.iter().rev().map(|&i| slots[i].name).collect();
            return Err(format!("plugin ordering cycle: {}", names.join(" -> ")));
        }
    }
    Ok(order)
}

fn collect_followers(
    slots: &[ChainSlot],
    consumer_plugins: &[ConsumerPlugin],
    route: Option<Uuid>,
    service: Option<Uuid>,
    protocol: Protocol,
) -> Followers {
    slots
        .iter()
        .filter_map(|slot| slot.resolve(consumer_plugins, route, service, protocol))
        .filter(|p| p.filters_body() || p.logs())
        .cloned()
        .collect()
}

/// Appends one timed phase (ended now) to the request's [`crate::PhaseTimings`].
fn record(shared: &mut crate::SharedStore, plugin: &'static str, phase: crate::TimedPhase, start: std::time::Instant) {
    if let Some(timings) = shared.get_mut::<crate::PhaseTimings>() {
        timings.phases.push(crate::PhaseTiming {
            plugin,
            phase,
            start,
            end: std::time::Instant::now(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug)]
    struct Named(&'static str, i32);

    impl Plugin for Named {
        fn name(&self) -> &'static str {
            self.0
        }
        fn priority(&self) -> i32 {
            self.1
        }
    }

    /// Highest priority first; on a tie the name that sorts last runs
    /// first, as in Kong 3.9, whatever order the configuration listed.
    #[test]
    fn equal_priorities_run_by_name_descending() {
        let instances: Vec<Arc<dyn Plugin>> = vec![
            Arc::new(Named("alpha", 10)),
            Arc::new(Named("omega", 5)),
            Arc::new(Named("gamma", 10)),
            Arc::new(Named("beta", 10)),
        ];
        let chain = PluginChain::from_instances(instances);
        assert_eq!(chain.names(), ["gamma", "beta", "alpha", "omega"]);
    }

    fn slot(name: &'static str, priority: i32, before: &[&str], after: &[&str]) -> ChainSlot {
        let scoped = ScopedPlugin {
            instance: Arc::new(Named(name, priority)),
            protocols: ProtocolSet::ALL,
            rank: rank::ROUTE,
        };
        let list = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
        ChainSlot::new(scoped, false).ordered(list(before), list(after))
    }

    fn access_names(chain: &PluginChain) -> Vec<&'static str> {
        chain.access_slots().map(|s| s.name).collect()
    }

    /// `ordering` moves a plugin in the access phase only; the rest keeps
    /// priority order, and names not on the chain are ignored.
    #[test]
    fn ordering_moves_plugins_in_access_only() {
        let chain = PluginChain::ordered(vec![
            slot("key-auth", 1250, &[], &[]),
            slot("mine", 10, &["key-auth", "not-here"], &[]),
            slot("acl", 950, &[], &[]),
            slot("late", 1000, &[], &["acl"]),
        ])
        .unwrap();
        assert_eq!(access_names(&chain), ["mine", "key-auth", "acl", "late"]);
        assert_eq!(chain.names(), ["key-auth", "late", "acl", "mine"]);
        let plain = PluginChain::ordered(vec![slot("a", 2, &[], &["b"]), slot("b", 3, &[], &[])]).unwrap();
        assert!(plain.access_order.is_none(), "already in that order");
    }

    #[test]
    fn an_ordering_cycle_is_named() {
        let error = PluginChain::ordered(vec![
            slot("a", 3, &["b"], &[]),
            slot("b", 2, &["c"], &[]),
            slot("c", 1, &["a"], &[]),
        ])
        .unwrap_err();
        assert_eq!(error, "plugin ordering cycle: a -> b -> c -> a");
    }

    #[derive(Debug)]
    struct Logger(&'static str);

    impl Plugin for Logger {
        fn name(&self) -> &'static str {
            self.0
        }
        fn priority(&self) -> i32 {
            1
        }
        fn logs(&self) -> bool {
            true
        }
    }

    #[derive(Debug)]
    struct Waits;

    impl Plugin for Waits {
        fn name(&self) -> &'static str {
            "waits"
        }
        fn priority(&self) -> i32 {
            5
        }
        fn waits(&self) -> bool {
            true
        }
    }

    /// Sets `x-<name>` on access; suspends first when the request asks.
    #[derive(Debug)]
    struct Marks(&'static str, i32);

    impl Plugin for Marks {
        fn name(&self) -> &'static str {
            self.0
        }
        fn priority(&self) -> i32 {
            self.1
        }
        fn suspends(&self) -> bool {
            true
        }
        fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
            if ctx.headers.contains_key("x-wait") {
                ctx.shared.insert(SuspendAccess);
                return Flow::Continue;
            }
            ctx.headers.insert(
                format!("x-{}", self.0).parse::<http::HeaderName>().unwrap(),
                "now".parse().unwrap(),
            );
            Flow::Continue
        }
        fn access_resume<'a>(&'a self, ctx: &'a mut RequestCtx<'_>) -> crate::AccessFuture<'a> {
            Box::pin(async move {
                tokio::task::yield_now().await;
                ctx.headers.insert(
                    format!("x-{}", self.0).parse::<http::HeaderName>().unwrap(),
                    "resumed".parse().unwrap(),
                );
                Flow::Continue
            })
        }
    }

    /// A plugin that suspends keeps its chain inline; a request that does
    /// not wait is done in the plain call, one that waits stops at the
    /// plugin, which resumes, and the plugins after it run then.
    #[tokio::test]
    async fn a_suspending_plugin_waits_only_for_the_requests_that_need_it() {
        use crate::auth::test_support::TestRequest;
        let chain = PluginChain::from_instances(vec![Arc::new(Marks("first", 20)), Arc::new(Named("later", 10))]);
        assert!(chain.runs_inline());
        let chain = PluginChain::from_instances(vec![Arc::new(Marks("first", 20)), Arc::new(Marks("second", 10))]);
        let directory = crate::EmptyDirectory;

        let mut request = TestRequest::new("GET", "/");
        let mut ctx = request.ctx(&directory);
        assert!(matches!(chain.access_now(&mut ctx), Inline::Done(Flow::Continue)));
        assert_eq!(ctx.headers["x-first"], "now");
        assert_eq!(ctx.headers["x-second"], "now");

        let mut request = TestRequest::new("GET", "/").header("x-wait", "1");
        let mut ctx = request.ctx(&directory);
        let Inline::Suspended(suspended) = chain.access_now(&mut ctx) else {
            panic!("the first plugin suspends");
        };
        assert!(ctx.headers.get("x-second").is_none(), "nothing after it ran");
        assert!(ctx.shared.get::<SuspendAccess>().is_none(), "the mark is taken");
        assert!(matches!(chain.resume(&mut ctx, suspended).await, Flow::Continue));
        assert_eq!(ctx.headers["x-first"], "resumed");
        // The plugins after it run in the async phase, which resumes them too.
        assert_eq!(ctx.headers["x-second"], "resumed");
    }

    /// Only a chain whose access can never wait runs it as a plain call.
    #[test]
    fn a_chain_runs_inline_only_when_no_access_can_wait() {
        let plain = || -> Arc<dyn Plugin> { Arc::new(Named("ip-restriction", 990)) };
        assert!(PluginChain::from_instances(vec![plain()]).runs_inline());
        assert!(!PluginChain::from_instances(vec![plain(), Arc::new(Waits)]).runs_inline());
        let scoped = ScopedPlugin {
            instance: plain(),
            protocols: ProtocolSet::ALL,
            rank: rank::ROUTE,
        };
        assert!(!PluginChain::new(vec![ChainSlot::new(scoped, true)]).runs_inline());
    }

    fn names(followers: &Followers) -> Vec<&'static str> {
        followers.iter().map(|p| p.name()).collect()
    }

    /// The followers made with the chain are those of its protocol; a
    /// consumer's own instance replaces the default for that consumer only.
    #[test]
    fn followers_are_the_loggers_that_run_for_the_request() {
        let http_only = ScopedPlugin {
            instance: Arc::new(Logger("http-log")),
            protocols: ProtocolSet::from_names(["http"]),
            rank: rank::ROUTE,
        };
        let everywhere = ScopedPlugin {
            instance: Arc::new(Logger("file-log")),
            protocols: ProtocolSet::ALL,
            rank: rank::ROUTE,
        };
        let silent = ScopedPlugin {
            instance: Arc::new(Named("key-auth", 1250)),
            protocols: ProtocolSet::ALL,
            rank: rank::ROUTE,
        };
        let plain = PluginChain::new(vec![
            ChainSlot::new(http_only.clone(), false),
            ChainSlot::new(everywhere.clone(), false),
            ChainSlot::new(silent.clone(), false),
        ]);
        assert_eq!(
            names(&plain.response_followers(&[], None, None, Protocol::Http)),
            ["http-log", "file-log"]
        );
        assert_eq!(
            names(&plain.response_followers(&[], None, None, Protocol::Grpc)),
            ["file-log"]
        );

        let consumers_own = Arc::new(Logger("file-log"));
        let scoped = PluginChain::new(vec![ChainSlot::new(everywhere, true), ChainSlot::new(silent, false)]);
        let theirs = [ConsumerPlugin {
            id: Uuid::nil(),
            route: None,
            service: None,
            plugin: ScopedPlugin {
                instance: consumers_own.clone(),
                protocols: ProtocolSet::ALL,
                rank: rank::CONSUMER,
            },
            group: None,
        }];
        let followers = scoped.response_followers(&theirs, None, None, Protocol::Https);
        assert_eq!(followers.len(), 1);
        assert!(Arc::ptr_eq(&followers[0], &(consumers_own as Arc<dyn Plugin>)));
        let others = scoped.response_followers(&[], None, None, Protocol::Https);
        assert!(!Arc::ptr_eq(&others[0], &followers[0]));
    }
}
