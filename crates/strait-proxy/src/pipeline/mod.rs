//! The request pipeline: a request's walk from its head to its log line.
//! `handler` routes it and drives the walk, `phases` runs the plugin phases,
//! `forwarding` and `kong_headers` add Kong's headers, `relay` and `body`
//! carry the response back, `tunnel` carries upgraded connections,
//! `error` and `grpc` turn every failure into Kong's response in one place,
//! and `access_log` writes the line.

pub mod access_log;
pub mod body;
pub mod error;
pub(crate) mod forward;
pub(crate) mod forwarding;
pub mod grpc;
pub mod handler;
pub mod kong_headers;
pub(crate) mod phases;
pub(crate) mod prefetch;
pub(crate) mod relay;
pub(crate) mod tunnel;
