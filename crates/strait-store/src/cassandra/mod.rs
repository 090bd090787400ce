//! The Cassandra dialect (`database = cassandra`): Kong 2.x's settings
//! ([`CassandraConfig`]), the schema and its migrations ([`schema`]) and
//! the [`Store`](crate::Store) over it ([`CassandraStore`]).
//!
//! The rule the Kong-on-Cassandra field report taught (token saves of 5 to
//! 30 s through secondary indexes): every statement Strait sends names a
//! partition key. The configuration of a cluster lives in one partition per
//! *generation* (`config`), its entities, unique-key rows, foreign-key rows
//! and change log as clustering rows, so every lookup is a primary-key read
//! and every write is one conditional batch on one partition: Paxos makes it
//! all or nothing and serialises writers across every node and datacenter.
//! A whole replacement (`POST /config`) writes a new generation beside the
//! old one and switches to it with one lightweight transaction
//! (docs/architecture.md#cassandra-store).

mod counters;
mod kv;
pub mod schema;
mod store;
mod tls;
mod tokens;
mod write;

pub use counters::CassandraCounters;
pub use kv::CassandraKv;
pub use store::CassandraStore;
pub use tokens::CassandraTokens;

use std::time::Duration;

use scylla::client::caching_session::CachingSession;
use scylla::client::session::Session;
use scylla::client::session_builder::SessionBuilder;
use scylla::statement::Consistency;

use crate::StoreError;

/// Kong's `cassandra_lb_policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LbPolicy {
    RoundRobin,
    RequestRoundRobin,
    DcAwareRoundRobin,
    RequestDcAwareRoundRobin,
}

impl LbPolicy {
    pub fn parse(value: &str) -> Option<LbPolicy> {
        match value {
            "RoundRobin" => Some(LbPolicy::RoundRobin),
            "RequestRoundRobin" => Some(LbPolicy::RequestRoundRobin),
            "DCAwareRoundRobin" => Some(LbPolicy::DcAwareRoundRobin),
            "RequestDCAwareRoundRobin" => Some(LbPolicy::RequestDcAwareRoundRobin),
            _ => None,
        }
    }

    pub fn dc_aware(self) -> bool {
        matches!(self, LbPolicy::DcAwareRoundRobin | LbPolicy::RequestDcAwareRoundRobin)
    }
}

/// Kong's `cassandra_repl_strategy` with its factors: what `strait
/// migrations bootstrap` creates the keyspace with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// `SimpleStrategy` with `cassandra_repl_factor`.
    Simple(u32),
    /// `NetworkTopologyStrategy` with `cassandra_data_centers` (`dc:factor`).
    NetworkTopology(Vec<(String, u32)>),
}

/// Kong 2.x's `cassandra_*` settings that reach the driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CassandraConfig {
    /// `cassandra_contact_points` with `cassandra_port`, as `host:port`.
    pub contact_points: Vec<String>,
    pub keyspace: String,
    /// `cassandra_consistency`: the consistency of reads and of the commit of
    /// writes (configuration writes are Paxos transactions at `SERIAL`
    /// whatever this says).
    pub consistency: Consistency,
    pub lb_policy: LbPolicy,
    /// `cassandra_local_datacenter`, required by the DC-aware policies.
    pub local_datacenter: Option<String>,
    pub replication: Replication,
    pub username: Option<String>,
    pub password: Option<String>,
    /// `cassandra_timeout`: connecting, and each statement, at most this long.
    pub timeout: Duration,
    /// `cassandra_schema_consensus_timeout`: how long migrations wait for
    /// every node to agree on the schema.
    pub schema_consensus_timeout: Duration,
    /// `cassandra_ssl` (with `cassandra_ssl_verify`): TLS to every node.
    pub tls: Option<crate::ClientTls>,
}

impl CassandraConfig {
    /// `user@host:port/keyspace`, for logs and messages (no password).
    pub fn label(&self) -> String {
        format!(
            "{}@{}/{}",
            self.username.as_deref().unwrap_or("anonymous"),
            self.contact_points.join(","),
            self.keyspace
        )
    }
}

/// Kong's consistency names.
pub fn parse_consistency(value: &str) -> Option<Consistency> {
    Some(match value {
        "ALL" => Consistency::All,
        "EACH_QUORUM" => Consistency::EachQuorum,
        "QUORUM" => Consistency::Quorum,
        "LOCAL_QUORUM" => Consistency::LocalQuorum,
        "ONE" => Consistency::One,
        "TWO" => Consistency::Two,
        "THREE" => Consistency::Three,
        "LOCAL_ONE" => Consistency::LocalOne,
        _ => return None,
    })
}

pub(crate) fn cql_error(error: impl std::fmt::Display) -> StoreError {
    let text = error.to_string();
    // The cluster is away (no connection, no answer, not enough replicas
    // alive): nothing the request did; the caller may try again.
    let away = [
        "connect",
        "Connection",
        "timed out",
        "Timeout",
        "Unavailable",
        "unavailable",
        "No connections",
        "broken pipe",
    ];
    if away.iter().any(|word| text.contains(word)) {
        StoreError::Unavailable(format!("Cassandra: {text}"))
    } else {
        StoreError::Cassandra(text)
    }
}

/// A session to the cluster (the keyspace not chosen: statements name it).
pub async fn connect(config: &CassandraConfig) -> Result<Session, StoreError> {
    let forwarders = config
        .tls
        .clone()
        .map(|tls| std::sync::Arc::new(tls::Forwarders::new(tls)));
    connect_via(config, forwarders).await
}

/// [`connect`], through `forwarders` when `cassandra_ssl` is on (kept by a
/// store across its tries, so a cluster that stays away does not make a
/// forwarder per try).
async fn connect_via(
    config: &CassandraConfig,
    forwarders: Option<std::sync::Arc<tls::Forwarders>>,
) -> Result<Session, StoreError> {
    use scylla::client::execution_profile::ExecutionProfile;
    use scylla::policies::load_balancing::DefaultPolicy;
    let mut policy = DefaultPolicy::builder().token_aware(true);
    if config.lb_policy.dc_aware() {
        if let Some(dc) = &config.local_datacenter {
            policy = policy.prefer_datacenter(dc.clone()).permit_dc_failover(false);
        }
    }
    let profile = ExecutionProfile::builder()
        .consistency(config.consistency)
        .request_timeout(Some(config.timeout))
        .load_balancing_policy(policy.build())
        .build();
    let mut builder = SessionBuilder::new();
    let mut tls_forwarders = None;
    match forwarders {
        None => builder = builder.known_nodes(&config.contact_points),
        Some(forwarders) => {
            // Each contact point through a TLS forwarder of its own; the
            // nodes the driver learns of are translated to theirs.
            for point in &config.contact_points {
                let name = tls::host_name(point).ok_or_else(|| {
                    StoreError::Cassandra(format!(
                        "cassandra_contact_points: {point} is not a host name TLS can check"
                    ))
                })?;
                let addresses = tokio::net::lookup_host(point.as_str())
                    .await
                    .map_err(|e| StoreError::Unavailable(format!("Cassandra at {point}: {e}")))?;
                for address in addresses {
                    let local = forwarders
                        .local_for(address, name.clone())
                        .await
                        .map_err(|e| StoreError::Unavailable(format!("a TLS forwarder to {address}: {e}")))?;
                    builder = builder.known_node_addr(local);
                }
            }
            builder = builder.address_translator(forwarders.clone());
            tls_forwarders = Some(forwarders);
        }
    }
    let mut builder = builder
        .connection_timeout(config.timeout)
        .schema_agreement_timeout(config.schema_consensus_timeout)
        .default_execution_profile_handle(profile.into_handle());
    if let Some(user) = &config.username {
        builder = builder.user(user, config.password.clone().unwrap_or_default());
    }
    match tokio::time::timeout(config.timeout * 2, builder.build()).await {
        Ok(Ok(session)) => Ok(session),
        Ok(Err(error)) => {
            let tls = tls_forwarders
                .and_then(|f| f.last_error())
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            Err(StoreError::Unavailable(format!(
                "Cassandra at {}: {error}{tls}",
                config.contact_points.join(",")
            )))
        }
        Err(_) => Err(StoreError::Unavailable(format!(
            "Cassandra at {} did not answer within {:?}",
            config.contact_points.join(","),
            config.timeout * 2
        ))),
    }
}

/// A session opened on first use, its prepared statements cached (a node
/// may start while its cluster is away: the first statement connects).
#[derive(Default)]
pub(crate) struct LazySession {
    session: tokio::sync::OnceCell<CachingSession>,
    /// `cassandra_ssl`'s forwarders, made at the first try and kept.
    forwarders: std::sync::OnceLock<std::sync::Arc<tls::Forwarders>>,
}

impl LazySession {
    pub(crate) async fn get(&self, config: &CassandraConfig) -> Result<&CachingSession, StoreError> {
        self.session
            .get_or_try_init(|| async {
                let forwarders = config.tls.as_ref().map(|tls| {
                    self.forwarders
                        .get_or_init(|| std::sync::Arc::new(tls::Forwarders::new(tls.clone())))
                        .clone()
                });
                let session = connect_via(config, forwarders).await?;
                Ok::<_, StoreError>(CachingSession::from(session, 256))
            })
            .await
    }
}

/// The rows `statement` answers with, typed.
pub(crate) async fn rows_of<R>(
    session: &CachingSession,
    statement: scylla::statement::Statement,
    values: impl scylla::serialize::row::SerializeRow,
) -> Result<Vec<R>, StoreError>
where
    R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
{
    let result = session
        .execute_unpaged(statement, values)
        .await
        .map_err(cql_error)?
        .into_rows_result()
        .map_err(cql_error)?;
    let rows = result.rows::<R>().map_err(cql_error)?;
    rows.collect::<Result<Vec<R>, _>>().map_err(cql_error)
}

/// Cassandra's longest TTL (20 years): an expiry further away is kept in
/// the row and checked on read, the row itself kept.
pub(crate) const MAX_TTL: i64 = 630_720_000;

/// The TTL a row expiring at `at` (seconds since the epoch) is written
/// with: 0 (none) for never or beyond [`MAX_TTL`]; at least 1 second.
pub(crate) fn ttl_until(at: Option<i64>, now: i64) -> i32 {
    match at {
        None => 0,
        Some(at) if at.saturating_sub(now) > MAX_TTL => 0,
        Some(at) => at.saturating_sub(now).max(1) as i32,
    }
}

/// What the runtime stores ([`CassandraTokens`], [`CassandraKv`],
/// [`CassandraCounters`]) share: a
/// runtime of their own with its session, so a slow cluster holds only the
/// requests waiting for it, never a proxy worker's thread.
pub(crate) struct Client {
    runtime: tokio::runtime::Runtime,
    conn: std::sync::Arc<Conn>,
}

pub(crate) struct Conn {
    pub(crate) config: CassandraConfig,
    session: LazySession,
}

impl Conn {
    pub(crate) async fn session(&self) -> Result<&CachingSession, StoreError> {
        self.session.get(&self.config).await
    }

    /// The rows a statement answers with.
    pub(crate) async fn rows<R>(
        &self,
        cql: &str,
        lwt: bool,
        values: impl scylla::serialize::row::SerializeRow,
    ) -> Result<Vec<R>, StoreError>
    where
        R: for<'f, 'm> scylla::deserialize::row::DeserializeRow<'f, 'm>,
    {
        rows_of(self.session().await?, self.statement(cql, lwt), values).await
    }

    /// `cql` as a statement; `lwt`: a lightweight transaction, its Paxos
    /// round at `SERIAL` (unique across every datacenter).
    pub(crate) fn statement(&self, cql: &str, lwt: bool) -> scylla::statement::Statement {
        let mut statement = scylla::statement::Statement::new(cql.to_string());
        if lwt {
            statement.set_serial_consistency(Some(scylla::statement::SerialConsistency::Serial));
        }
        statement
    }
}

impl Client {
    pub(crate) fn new(config: CassandraConfig, thread: &str) -> Result<Client, StoreError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name(thread)
            .enable_all()
            .build()?;
        Ok(Client {
            runtime,
            conn: std::sync::Arc::new(Conn {
                config,
                session: LazySession::default(),
            }),
        })
    }

    pub(crate) fn config(&self) -> &CassandraConfig {
        &self.conn.config
    }

    /// Run `work` on the store's runtime, at most `cassandra_timeout` twice
    /// over (a lightweight transaction is several round trips).
    pub(crate) fn call<T, E, F, Fut>(
        &self,
        work: F,
        timed_out: fn(String) -> E,
        stopped: fn(String) -> E,
    ) -> crate::Answer<T, E>
    where
        T: Send + 'static,
        E: Send + 'static,
        F: FnOnce(std::sync::Arc<Conn>) -> Fut,
        Fut: std::future::Future<Output = Result<T, E>> + Send + 'static,
    {
        crate::run_within(
            &self.runtime,
            self.conn.config.timeout * 2,
            work(self.conn.clone()),
            timed_out,
            stopped,
        )
    }

    /// Refuse a keyspace this build cannot use (not bootstrapped, pending
    /// migrations); [`StoreError::Unavailable`] when the cluster is away.
    /// Waited for on the calling thread (start-up).
    pub(crate) fn check_schema(&self) -> Result<(), StoreError> {
        let conn = self.conn.clone();
        let work = async move {
            let session = conn.session().await?;
            schema::refusal(session.get_session(), &conn.config).await
        };
        let (reply, answer) = std::sync::mpsc::sync_channel(1);
        self.runtime.spawn(async move {
            let _ = reply.send(work.await);
        });
        answer
            .recv()
            .unwrap_or_else(|_| Err(StoreError::Cassandra("the store's runtime stopped".into())))
    }
}
