//! strait-plugins: the plugin phase trait, the per-request contexts, the
//! chains that order plugins by Kong's priority and scope precedence, the
//! registry that builds plugin instances from configuration, and the bundled
//! plugins (one folder each under `bundled/`, with what several of them
//! share in `auth`, `grpc`, `observability`, `transform` and
//! `config_fields`).
//!
//! Plugins are built when a snapshot is compiled, never per request. This
//! crate knows nothing of sockets or stores: phases take a context and
//! return a [`Flow`]; consumers and credentials come through [`Directory`].
#![forbid(unsafe_code)]

mod added_headers;
pub mod ai;
pub mod auth;
pub mod body;
pub mod bundled;
mod chain;
mod config;
mod config_fields;
mod context;
mod directory;
pub mod filters;
pub mod form;
pub mod grpc;
mod identity;
mod kafka;
mod lazy_head;
mod lua_number;
pub mod observability;
mod phase;
mod registry;
pub mod transform;

pub use added_headers::{AddedHeaders, FieldLine, FieldStart};
pub use chain::{rank, ChainSlot, ConsumerPlugin, Followers, Inline, PluginChain, ScopedPlugin, Suspended};
pub use context::{
    AuthenticatedCredential, BodyChunk, BodyLimit, LogDetails, LogRecord, PhaseTiming, PhaseTimings, Protocol,
    ProtocolSet, RequestCtx, RequestSummary, ResponseCtx, ResponseIdentity, ResponseSource, SharedStore, TimedPhase,
    UpstreamTiming, UpstreamTry,
};
pub use directory::{ConsumerView, Directory, EmptyDirectory, KeyauthKey};
pub use identity::{is_identity_name, IdentityField, IdentityFields};
pub use lazy_head::{HeadParts, LazyHeaders, LazyResponseCtx};
pub use phase::{
    kong_error_message, AccessFuture, BufferResponseBody, BufferUpstreamResponse, CertificateCtx, CertificateFlow,
    DropResponseBody, FailedTry, Failover, FailoverPlan, Flow, NextTry, Plugin, PluginResponse, ResponseRewriter,
    RewriteFuture, RewriteResponse, ServeFuture, ServeHere, ServiceResponseBody, StreamBody, StreamResponse,
    SuspendAccess, UpstreamResponse, UpstreamTarget, WantsLogDetails,
};
pub use registry::{
    add, add_dynamic, add_versioned, available, build_plugin, build_scoped_plugin, install, priority_of, version_of,
    BundledPlugin, DynamicFactory, PluginFactory, PluginScope, AVAILABLE,
};

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PluginError {
    #[error("config.{field}: {message}")]
    InvalidConfig { field: String, message: String },
    #[error("plugin '{0}' is not implemented by this version of Strait")]
    NotImplemented(String),
}

impl PluginError {
    pub(crate) fn invalid(field: &str, message: impl Into<String>) -> PluginError {
        PluginError::InvalidConfig {
            field: field.to_string(),
            message: message.into(),
        }
    }
}
