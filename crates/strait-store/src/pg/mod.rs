//! The PostgreSQL dialect (`database = postgres`): connection settings,
//! the schema ([`schema`]) and its migrations ([`migrate`]).
//!
//! Several Strait nodes share one database, as Kong's traditional mode
//! does. The schema keeps every lookup on a primary key or a unique index
//! (docs/architecture.md#postgresql-store).

pub mod migrate;
pub mod schema;
mod store;

pub use store::{listen, CatchUp, Listener, PgStore, CHANNEL};

use std::time::Duration;

use tokio_postgres::{Client, NoTls};

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
            .connect_timeout(self.timeout);
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
pub async fn connect(config: &PgConfig) -> Result<Client, String> {
    let client_config = config.client_config();
    let (client, connection) = tokio::time::timeout(config.timeout, client_config.connect(NoTls))
        .await
        .map_err(|_| format!("connecting to {} timed out after {:?}", config.label(), config.timeout))?
        .map_err(|e| format!("connecting to {}: {e}", config.label()))?;
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(%error, "PostgreSQL connection closed");
        }
    });
    Ok(client)
}
