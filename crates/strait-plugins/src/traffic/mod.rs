//! Plugins that decide how traffic is served: caching (and, later, rate
//! limiting).

pub mod proxy_cache;
