//! The PostgreSQL dialect (`database = postgres`): connection settings,
//! the schema ([`schema`]) and its migrations ([`migrate`]).
//!
//! Several Strait nodes share one database, as Kong's traditional mode
//! does. The schema keeps every lookup on a primary key or a unique index
//! (docs/architecture.md#postgresql-store).

mod kv;
pub mod migrate;
pub mod schema;
mod store;
mod tls;
mod tokens;

pub use kv::PgKv;
pub use store::{listen, CatchUp, Listener, PgStore, CHANNEL};
pub use tls::PgTls;
pub use tokens::PgTokens;

use std::time::Duration;

use tokio_postgres::Client;

use crate::StoreError;

/// Kong's `pg_*` settings that reach the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgConfig {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub database: String,
    /// `pg_schema`: the schema the tables live in; `None`: the server's
    /// `search_path` (normally `public`).
    pub schema: Option<String>,
    /// `pg_timeout`: connecting, and any one query, at most this long.
    pub timeout: Duration,
    /// `pg_ssl = on`: TLS is required (the server must accept it), with
    /// this client configuration; `None`: plaintext.
    pub tls: Option<PgTls>,
    /// `pg_max_concurrent_queries`: statements in flight at once, each on a
    /// connection of its own; 0: no limit.
    pub max_concurrent_queries: usize,
    /// `pg_semaphore_timeout`: how long a statement waits for one of those
    /// slots before it fails (503 on the Admin API).
    pub semaphore_timeout: Duration,
    /// `pg_pool_size`: idle connections kept for reuse.
    pub pool_size: usize,
}

impl PgConfig {
    /// `user@host:port/database`, for logs and messages (no password).
    pub fn label(&self) -> String {
        format!("{}@{}:{}/{}", self.user, self.host, self.port, self.database)
    }

    pub(crate) fn client_config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.database)
            .application_name("strait")
            .connect_timeout(self.timeout)
            .ssl_mode(match self.tls {
                Some(_) => tokio_postgres::config::SslMode::Require,
                None => tokio_postgres::config::SslMode::Disable,
            });
        if let Some(password) = &self.password {
            config.password(password);
        }
        if let Some(schema) = &self.schema {
            // Every statement of the session finds its tables there.
            config.options(format!("-c search_path={}", schema::ident(schema)));
        }
        config
    }
}

/// Connect; the connection's I/O runs as a task on the current runtime.
/// [`StoreError::Unavailable`] when the server cannot be reached (down,
/// starting, a timeout); [`StoreError::Postgres`] when it answered and
/// refused this node (credentials, pg_hba.conf, no such database, a TLS
/// certificate it fails to check), which waiting would not change.
pub async fn connect(config: &PgConfig) -> Result<Client, StoreError> {
    let client_config = config.client_config();
    let tls = tls::MakeRustls(config.tls.clone());
    let (client, connection) = tokio::time::timeout(config.timeout, client_config.connect(tls))
        .await
        .map_err(|_| {
            StoreError::Unavailable(format!(
                "connecting to {} timed out after {:?}",
                config.label(),
                config.timeout
            ))
        })?
        .map_err(|e| connect_error(config, &e))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "PostgreSQL connection closed");
        }
    });
    Ok(client)
}

/// What a failed connection attempt says, every cause included
/// (tokio-postgres's own message is only its kind, "db error"), and
/// whether it is the server being away or refusing this node.
pub(crate) fn connect_error(config: &PgConfig, error: &tokio_postgres::Error) -> StoreError {
    let mut detail = match error.as_db_error() {
        Some(db) => format!("{}: {} ({})", db.severity(), db.message(), db.code().code()),
        None => error.to_string(),
    };
    // TLS failing (a server without it, a certificate that fails the
    // check: tokio-postgres's "error performing TLS handshake") is the
    // server refusing this node's settings, not an outage.
    let tls_refused = error.to_string().contains("TLS");
    let mut source = std::error::Error::source(error);
    while let Some(cause) = source {
        if error.as_db_error().is_none() {
            detail.push_str(&format!(": {cause}"));
        }
        source = cause.source();
    }
    let detail = format!("connecting to {}: {detail}", config.label());
    let away = match error.as_db_error() {
        // Connection exceptions and a server shutting down or starting.
        Some(db) => db.code().code().starts_with("08") || db.code().code().starts_with("57P"),
        None => !tls_refused,
    };
    match away {
        true => StoreError::Unavailable(detail),
        false => StoreError::Postgres(detail),
    }
}
