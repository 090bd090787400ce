//! Hybrid mode: a control plane (`role = control_plane`) holds the
//! configuration and the Admin API; data planes (`role = data_plane`) hold
//! no database, follow the control plane over one mutually authenticated
//! TLS connection each, cache what they receive, and keep serving it when
//! the control plane is away. docs/hybrid.md is the guide; the protocol is
//! in [`frame`], the two sides in [`cp`] and [`dp`], certificates in
//! [`tls`].

pub mod cp;
pub mod dp;
pub mod frame;
pub mod tls;
