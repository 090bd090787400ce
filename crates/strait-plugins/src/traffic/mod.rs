//! Plugins that decide how traffic is served: caching and rate limiting.

pub mod proxy_cache;
pub mod rate_limiting;
pub mod response_ratelimiting;
