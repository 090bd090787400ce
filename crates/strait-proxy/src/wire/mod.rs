//! The wire: client connections and listeners (`conn`, `listen`), HTTP/1.1
//! on Strait's own codec both ways (`h1_codec`, `h1_server`, `h1_client`),
//! HTTP/2 on the h2 codec (`h2_server`, `h2_client`, `h2_body`,
//! `coalesce`), HTTP/3 on quinn and h3 (`h3_server`), TLS (`tls`, `tls_policy`) and the coarse clock behind every
//! timeout (`deadline`). Nothing here knows routes or plugins.

pub(crate) mod coalesce;
pub mod conn;
pub mod deadline;
pub mod h1_client;
pub(crate) mod h1_codec;
pub(crate) mod h1_names;
pub(crate) mod h1_server;
pub mod h2_body;
pub mod h2_client;
pub mod h2_server;
pub(crate) mod h3_memory;
pub mod h3_server;
pub mod listen;
pub mod ocsp;
pub mod tls;
pub mod tls_policy;
