//! A proxied response head whose header map is made only when a header
//! filter asks for it ([`LazyHeaders`]), for plugins that implement
//! [`crate::Plugin::header_filter_lazy`].
//!
//! The proxy passes an HTTP/1.1 upstream's head on in its own bytes when
//! no plugin reads it (strait-proxy's relay.rs): no map parsed, walked and
//! written again. A header filter that looks at the head only sometimes (a
//! proxy-wasm filter's response-headers callback, which most filters leave
//! empty) would lose that for every response. With a lazy head, the map is
//! made the first time the filter reads it; when the filter changed
//! neither the map nor the status, the head is still passed on as the
//! upstream sent it.

use std::any::Any;

use http::HeaderMap;

use crate::context::{RequestSummary, ResponseSource, SharedStore};

/// What the proxy keeps of a head it has not made a map of.
pub trait HeadParts: Send {
    /// The map the head would have been parsed into, with what the proxy
    /// adds (the same fields in the same order as a header filter would
    /// otherwise have seen).
    fn unfold(&self) -> HeaderMap;

    /// How many fields [`HeadParts::unfold`] would give, without making it.
    fn count(&self) -> usize;

    /// The parts back, for the proxy that made them.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

/// A response's header map, made from [`HeadParts`] on first use.
#[derive(Default)]
pub struct LazyHeaders {
    parts: Option<Box<dyn HeadParts>>,
    map: Option<HeaderMap>,
    changed: bool,
}

impl std::fmt::Debug for LazyHeaders {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LazyHeaders")
            .field("lazy", &self.parts.is_some())
            .field("map", &self.map)
            .field("changed", &self.changed)
            .finish()
    }
}

impl LazyHeaders {
    /// A head already in a map.
    pub fn of_map(map: HeaderMap) -> LazyHeaders {
        LazyHeaders {
            parts: None,
            map: Some(map),
            changed: false,
        }
    }

    /// A head not made into a map yet.
    pub fn of_parts(parts: Box<dyn HeadParts>) -> LazyHeaders {
        LazyHeaders {
            parts: Some(parts),
            map: None,
            changed: false,
        }
    }

    /// The number of fields, without making the map.
    pub fn len(&self) -> usize {
        match (&self.map, &self.parts) {
            (Some(map), _) => map.len(),
            (None, Some(parts)) => parts.count(),
            (None, None) => 0,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The map to read (made now if it was not yet).
    pub fn headers(&mut self) -> &HeaderMap {
        self.made()
    }

    /// The map to change: the head is no longer the upstream's bytes.
    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        self.changed = true;
        self.made()
    }

    fn made(&mut self) -> &mut HeaderMap {
        let parts = &self.parts;
        self.map
            .get_or_insert_with(|| parts.as_ref().map(|p| p.unfold()).unwrap_or_default())
    }

    /// The head's parts, when it was never changed (whether or not it was
    /// read), else its map.
    pub fn into_result(self) -> Result<HeaderMap, Box<dyn HeadParts>> {
        match (self.parts, self.map) {
            (Some(parts), _) if !self.changed => Err(parts),
            (_, Some(map)) => Ok(map),
            (Some(parts), None) => Ok(parts.unfold()),
            (None, None) => Ok(HeaderMap::new()),
        }
    }

    /// The map, made if it was not.
    pub fn into_map(self) -> HeaderMap {
        match self.into_result() {
            Ok(map) => map,
            Err(parts) => parts.unfold(),
        }
    }
}

/// The response as [`crate::Plugin::header_filter_lazy`] sees and changes
/// it: [`ResponseCtx`](crate::ResponseCtx) with a lazy head.
#[derive(Debug)]
pub struct LazyResponseCtx<'a> {
    pub status: &'a mut http::StatusCode,
    pub headers: &'a mut LazyHeaders,
    pub source: ResponseSource,
    pub request: &'a RequestSummary,
    pub shared: &'a mut SharedStore,
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    struct Parts(Arc<AtomicUsize>);

    impl HeadParts for Parts {
        fn unfold(&self) -> HeaderMap {
            self.0.fetch_add(1, Ordering::Relaxed);
            let mut map = HeaderMap::new();
            map.insert("x-up", HeaderValue::from_static("1"));
            map
        }
        fn count(&self) -> usize {
            1
        }
        fn into_any(self: Box<Self>) -> Box<dyn Any> {
            self
        }
    }

    #[test]
    fn a_head_never_read_is_never_made() {
        let made = Arc::new(AtomicUsize::new(0));
        let lazy = LazyHeaders::of_parts(Box::new(Parts(made.clone())));
        assert_eq!(lazy.len(), 1);
        assert!(lazy.into_result().is_err());
        assert_eq!(made.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_head_read_but_unchanged_stays_the_upstreams() {
        let made = Arc::new(AtomicUsize::new(0));
        let mut lazy = LazyHeaders::of_parts(Box::new(Parts(made.clone())));
        assert_eq!(lazy.headers().get("x-up").unwrap(), "1");
        assert_eq!(lazy.headers().len(), 1);
        assert_eq!(made.load(Ordering::Relaxed), 1, "made once");
        assert!(lazy.into_result().is_err());
    }

    #[test]
    fn a_changed_head_is_its_map() {
        let made = Arc::new(AtomicUsize::new(0));
        let mut lazy = LazyHeaders::of_parts(Box::new(Parts(made)));
        lazy.headers_mut().insert("x-added", HeaderValue::from_static("2"));
        let map = lazy.into_result().ok().unwrap();
        assert_eq!(map.len(), 2);
        assert_eq!(map["x-up"], "1");
    }

    #[test]
    fn a_map_head_is_its_map() {
        let mut map = HeaderMap::new();
        map.insert("a", HeaderValue::from_static("b"));
        let lazy = LazyHeaders::of_map(map);
        assert_eq!(lazy.len(), 1);
        assert_eq!(lazy.into_map()["a"], "b");
    }
}
