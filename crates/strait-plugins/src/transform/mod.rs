//! Plugins that change what the request or response looks like.

pub mod correlation_id;
pub mod request_termination;
pub mod request_transformer;
pub mod response_transformer;
pub mod template;
