//! Plugins that keep unwanted traffic out: by client address, by browser
//! origin policy, by user agent, by request size.

pub mod bot_detection;
pub mod cors;
pub mod ip_restriction;
pub mod request_size_limiting;
