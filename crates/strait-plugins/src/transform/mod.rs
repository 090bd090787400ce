//! What the transformer plugins share: Kong's template language.

pub mod template;
