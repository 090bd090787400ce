//! A relayed upstream head handed to lazy header filters
//! (strait-plugins' lazy_head.rs): the response's own map (what Strait
//! added) and Kong's fields with the upstream's lines, made into the map a
//! header filter would have seen only if the filter reads it.

use std::any::Any;

use http::HeaderMap;
use strait_plugins::{ConsumerPlugin, HeadParts, LazyHeaders, LazyResponseCtx, PluginChain, ResponseSource};

use super::PhaseState;
use crate::pipeline::forward::Proxied;
use crate::pipeline::kong_headers::KongFields;

struct Unfold {
    own: HeaderMap,
    fields: KongFields,
}

impl HeadParts for Unfold {
    fn unfold(&self) -> HeaderMap {
        let mut headers = self.own.clone();
        self.fields.put_into(&mut headers);
        headers
    }

    fn count(&self) -> usize {
        self.fields.count(&self.own)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Runs the chain's lazy header filters on a relayed head: the head stays
/// relayed (`beside` kept) unless a filter changed it or its status, when
/// it becomes the response's map as [`super::respond`] would have made it.
pub(super) fn header_filter(
    chain: &PluginChain,
    consumer_plugins: &[ConsumerPlugin],
    state: &mut PhaseState,
    head: &mut http::response::Parts,
    beside: &mut Option<(Proxied, KongFields)>,
    source: ResponseSource,
) {
    let Some((proxied, fields)) = beside.take() else {
        return;
    };
    let status = head.status;
    let own = std::mem::take(&mut head.headers);
    let mut headers = LazyHeaders::of_parts(Box::new(Unfold { own, fields }));
    let mut ctx = LazyResponseCtx {
        status: &mut head.status,
        headers: &mut headers,
        source,
        request: &state.summary,
        shared: &mut state.shared,
    };
    chain.header_filter_lazy(consumer_plugins, &mut ctx);
    let unchanged = head.status == status;
    match headers.into_result() {
        Err(parts) if unchanged => match parts.into_any().downcast::<Unfold>() {
            Ok(parts) => {
                let Unfold { own, fields } = *parts;
                head.headers = own;
                *beside = Some((proxied, fields));
            }
            // Only this module makes the parts.
            Err(_) => unreachable!("lazy head parts of another kind"),
        },
        Err(parts) => {
            head.headers = parts.unfold();
            head.extensions.insert(proxied);
        }
        Ok(map) => {
            head.headers = map;
            head.extensions.insert(proxied);
        }
    }
}
