//! [`IdentityFields`]: Kong's identity fields on the upstream request
//! (`X-Consumer-ID`, `-Custom-ID`, `-Username`, `X-Credential-Identifier`,
//! `X-Anonymous-Consumer`, `X-Consumer-Groups`, `X-Authenticated-Groups`),
//! which authentication plugins and `acl` set.
//!
//! On the proxy's requests they are held beside the request's header map:
//! an HTTP/1.1 upstream gets them from the encoder after the client's fields
//! (as it gets the forwarding headers), an HTTP/2 upstream in the map. Four
//! to six map inserts fewer per authenticated request, each a hashed name,
//! a probe and, at the encoder, another walk. A client's field of the same
//! name is removed from the map when the field is set, as an insert would
//! have replaced it. Before the `access` of a plugin that may read or change
//! them ([`crate::Plugin::reads_identity_fields`], true unless a plugin says
//! otherwise) the chain moves them into the map, so every plugin sees the
//! request as Kong's `kong.service.request.set_header` would have left it.
//!
//! Other fields a plugin adds to the upstream request under a name the map
//! does not hold ([`IdentityFields::add_absent`]: zipkin's trace context)
//! are held beside the map the same way, as finished header lines, and
//! moved into it with the identity fields. The names such a plugin may
//! hold there are in [`is_identity_name`], so a plugin that says it never
//! reads the identity fields has looked at them too.
//!
//! Outside the proxy (a plugin's unit tests) a context starts with the
//! fields in the map: [`IdentityFields::default`].

use http::header::{HeaderMap, HeaderName, HeaderValue};

use crate::added_headers::AddedHeaders;

/// One of Kong's identity fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentityField {
    ConsumerId = 0,
    ConsumerCustomId,
    ConsumerUsername,
    CredentialIdentifier,
    AnonymousConsumer,
    ConsumerGroups,
    AuthenticatedGroups,
}

const COUNT: usize = 7;

/// How many of the fields an authentication sets ([`IdentityFields::set_authenticated`]).
pub const AUTHENTICATED: usize = 5;

/// The fields' names, by [`IdentityField`], in the order they are written
/// (the order the plugins set them in: authentication, then `acl`).
static NAMES: [HeaderName; COUNT] = [
    HeaderName::from_static("x-consumer-id"),
    HeaderName::from_static("x-consumer-custom-id"),
    HeaderName::from_static("x-consumer-username"),
    HeaderName::from_static("x-credential-identifier"),
    HeaderName::from_static("x-anonymous-consumer"),
    HeaderName::from_static("x-consumer-groups"),
    HeaderName::from_static("x-authenticated-groups"),
];

impl IdentityField {
    pub fn name(self) -> &'static HeaderName {
        &NAMES[self as usize]
    }
}

/// The identity fields of one upstream request, in its header map or
/// beside it. Small: a request's context and futures move it several
/// times, so the values are boxed (allocated when the first is set).
#[derive(Debug, Clone, Default)]
pub struct IdentityFields {
    /// Held beside the map (the proxy's requests) rather than in it.
    beside: bool,
    /// The map was looked through for the client's fields of these names.
    scanned: bool,
    /// Bit `i`: the map holds a field named `NAMES[i]`.
    in_map: u8,
    values: Option<Box<[Option<HeaderValue>; COUNT]>>,
    /// Fields of names the map does not hold, added by plugins
    /// ([`IdentityFields::add_absent`]), as HTTP/1.1 lines.
    added: AddedHeaders,
}

impl IdentityFields {
    /// Fields held beside the map until a plugin reads them or the request
    /// goes upstream.
    pub fn beside() -> IdentityFields {
        IdentityFields {
            beside: true,
            ..IdentityFields::default()
        }
    }

    /// Sets `field` (`Some`) or removes it (`None`), replacing what the
    /// client sent under its name.
    #[inline]
    pub fn set(&mut self, headers: &mut HeaderMap, field: IdentityField, value: Option<HeaderValue>) {
        let name = field.name();
        if !self.beside {
            set_in_map(headers, name, value);
            return;
        }
        self.scan(headers);
        let bit = 1 << field as usize;
        if self.in_map & bit != 0 {
            headers.remove(name);
            self.in_map &= !bit;
        }
        match (&mut self.values, value) {
            (Some(values), value) => values[field as usize] = value,
            (None, None) => {}
            (values @ None, Some(value)) => {
                values.get_or_insert_with(Box::default)[field as usize] = Some(value);
            }
        }
    }

    /// The fields an authentication sets together, in [`IdentityField`]'s
    /// order: consumer id, custom id, username, credential identifier and
    /// anonymous. As five [`IdentityFields::set`] calls would, in one pass.
    pub fn set_authenticated(&mut self, headers: &mut HeaderMap, values: [Option<HeaderValue>; AUTHENTICATED]) {
        if !self.beside {
            for (name, value) in NAMES.iter().zip(values) {
                set_in_map(headers, name, value);
            }
            return;
        }
        self.scan(headers);
        const MASK: u8 = (1 << AUTHENTICATED) - 1;
        if self.in_map & MASK != 0 {
            for (at, name) in NAMES[..AUTHENTICATED].iter().enumerate() {
                if self.in_map & (1 << at) != 0 {
                    headers.remove(name);
                }
            }
            self.in_map &= !MASK;
        }
        let slots = match &mut self.values {
            Some(slots) => slots,
            None if values.iter().all(Option::is_none) => return,
            values @ None => values.get_or_insert_with(Box::default),
        };
        for (slot, value) in slots.iter_mut().zip(values) {
            *slot = value;
        }
    }

    /// Notes, once, which of the names the client sent.
    fn scan(&mut self, headers: &HeaderMap) {
        if !self.scanned {
            self.scanned = true;
            self.in_map = present(headers);
        }
    }

    /// True when no field waits beside the map.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty()
            && self
                .values
                .as_deref()
                .is_none_or(|values| values.iter().all(Option::is_none))
    }

    /// Adds fields to the upstream request whose names the caller knows
    /// the map does not hold (a plugin that looked through the names), as
    /// HTTP/1.1 lines (`name: value` and CRLF each, the name in lower case
    /// and one [`is_identity_name`] knows, the value a valid header value):
    /// beside the map on the proxy's requests, else into the map.
    pub fn add_absent_lines(&mut self, headers: &mut HeaderMap, lines: &[u8]) {
        let mut added = AddedHeaders::default();
        let target = match self.beside {
            true => &mut self.added,
            false => &mut added,
        };
        target.push_lines(lines);
        debug_assert!(target.iter().all(|(name, _)| is_identity_name(name)), "{lines:?}");
        if !self.beside {
            added.append_to(headers);
        }
    }

    /// The fields [`IdentityFields::add_absent_lines`] held beside the map, as
    /// HTTP/1.1 lines each ending in CRLF.
    pub fn added_lines(&self) -> &[u8] {
        self.added.as_lines()
    }

    /// The fields waiting beside the map, in the order they are written.
    pub fn iter(&self) -> impl Iterator<Item = (&'static HeaderName, &HeaderValue)> + '_ {
        let values = self.values.as_deref().map_or(&[][..], |values| &values[..]);
        NAMES
            .iter()
            .zip(values)
            .filter_map(|(name, value)| Some((name, value.as_ref()?)))
    }

    /// Moves the fields waiting beside the map into it: before a plugin
    /// that reads them, and for an upstream that is not sent HTTP/1.1.
    pub fn move_into(&mut self, headers: &mut HeaderMap) {
        if !self.added.is_empty() {
            std::mem::take(&mut self.added).append_to(headers);
        }
        let Some(values) = self.values.as_deref_mut() else {
            return;
        };
        for (at, value) in values.iter_mut().enumerate() {
            if let Some(value) = value.take() {
                headers.insert(&NAMES[at], value);
                self.in_map |= 1 << at;
            }
        }
    }
}

/// Sets a field in the map (`Some`) or removes the client's (`None`).
fn set_in_map(headers: &mut HeaderMap, name: &HeaderName, value: Option<HeaderValue>) {
    match value {
        Some(value) => {
            headers.insert(name, value);
        }
        None => remove_if_sent(headers, name),
    }
}

/// Removes a field the client may have sent (to pass itself off as a
/// consumer). Almost no request has it: the names are compared first, which
/// costs less than the hashing of the name a removal does.
pub(crate) fn remove_if_sent(headers: &mut HeaderMap, name: &HeaderName) {
    if headers.keys().any(|sent| sent == name) {
        headers.remove(name);
    }
}

/// True when `name` is one of the identity fields' names, or a name a
/// plugin may hold beside the map with them (a trace context field,
/// [`IdentityFields::add_absent`]): a plugin that reads a header named by
/// its configuration says it reads the identity fields when one of those
/// names is among them.
pub fn is_identity_name(name: &str) -> bool {
    NAMES.iter().any(|ours| ours.as_str().eq_ignore_ascii_case(name))
        || crate::observability::propagation::names_trace(&name.to_ascii_lowercase())
}

/// Which identity names `headers` holds, as bits by [`IdentityField`]:
/// one pass over the names, most of which a first byte rules out.
fn present(headers: &HeaderMap) -> u8 {
    let mut bits = 0;
    for name in headers.keys() {
        let text = name.as_str();
        if text.len() < 13 || !text.starts_with("x-") {
            continue;
        }
        if let Some(at) = NAMES.iter().position(|ours| ours.as_str() == text) {
            bits |= 1 << at;
        }
    }
    bits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client_headers() -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("accept", HeaderValue::from_static("*/*"));
        headers.insert("x-consumer-id", HeaderValue::from_static("spoofed"));
        headers.insert("x-anonymous-consumer", HeaderValue::from_static("spoofed"));
        headers
    }

    fn fields_of(headers: &HeaderMap, fields: &IdentityFields) -> Vec<(String, String)> {
        let text = |(name, value): (&HeaderName, &HeaderValue)| (name.to_string(), value.to_str().unwrap().to_string());
        let mut all: Vec<(String, String)> = headers.iter().map(text).chain(fields.iter().map(text)).collect();
        all.sort();
        all
    }

    /// Held beside the map or set in it, the upstream request carries the
    /// same fields: the client's of those names replaced or removed.
    #[test]
    fn beside_the_map_and_in_it_agree() {
        let steps = |fields: &mut IdentityFields, headers: &mut HeaderMap| {
            fields.set(headers, IdentityField::ConsumerId, Some(HeaderValue::from_static("c1")));
            fields.set(headers, IdentityField::ConsumerCustomId, None);
            fields.set(headers, IdentityField::AnonymousConsumer, None);
            fields.set(
                headers,
                IdentityField::ConsumerGroups,
                Some(HeaderValue::from_static("a, b")),
            );
        };
        let mut in_map = IdentityFields::default();
        let mut map_headers = client_headers();
        steps(&mut in_map, &mut map_headers);
        assert!(in_map.is_empty());
        let mut beside = IdentityFields::beside();
        let mut beside_headers = client_headers();
        steps(&mut beside, &mut beside_headers);
        assert!(!beside.is_empty());
        assert!(beside_headers.get("x-consumer-id").is_none(), "the client's is gone");
        let expect = vec![
            ("accept".to_string(), "*/*".to_string()),
            ("x-consumer-groups".to_string(), "a, b".to_string()),
            ("x-consumer-id".to_string(), "c1".to_string()),
        ];
        assert_eq!(fields_of(&map_headers, &in_map), expect);
        assert_eq!(fields_of(&beside_headers, &beside), expect);
        // Moved into the map, then set again (a second authentication).
        beside.move_into(&mut beside_headers);
        assert!(beside.is_empty());
        assert_eq!(fields_of(&beside_headers, &beside), expect);
        beside.set(
            &mut beside_headers,
            IdentityField::ConsumerId,
            Some(HeaderValue::from_static("c2")),
        );
        assert!(beside_headers.get("x-consumer-id").is_none());
        assert_eq!(beside.iter().count(), 1);
    }

    /// The five fields set together land as five single sets would,
    /// beside the map or in it, the client's of those names removed.
    #[test]
    fn an_authentication_sets_its_fields_as_single_sets_would() {
        let values = || {
            [
                Some(HeaderValue::from_static("c1")),
                None,
                Some(HeaderValue::from_static("ann")),
                Some(HeaderValue::from_static("key-1")),
                None,
            ]
        };
        for beside in [false, true] {
            let fresh = || match beside {
                true => IdentityFields::beside(),
                false => IdentityFields::default(),
            };
            let (mut one_by_one, mut one_headers) = (fresh(), client_headers());
            let fields = [
                IdentityField::ConsumerId,
                IdentityField::ConsumerCustomId,
                IdentityField::ConsumerUsername,
                IdentityField::CredentialIdentifier,
                IdentityField::AnonymousConsumer,
            ];
            for (field, value) in fields.into_iter().zip(values()) {
                one_by_one.set(&mut one_headers, field, value);
            }
            let (mut together, mut together_headers) = (fresh(), client_headers());
            together.set_authenticated(&mut together_headers, values());
            assert_eq!(
                fields_of(&together_headers, &together),
                fields_of(&one_headers, &one_by_one),
                "beside: {beside}"
            );
            assert!(together_headers.get("x-anonymous-consumer").is_none());
            // A second authentication replaces all five (anonymous now set).
            together.set_authenticated(
                &mut together_headers,
                [None, None, None, None, Some(HeaderValue::from_static("true"))],
            );
            let after = fields_of(&together_headers, &together);
            assert_eq!(
                after,
                vec![
                    ("accept".to_string(), "*/*".to_string()),
                    ("x-anonymous-consumer".to_string(), "true".to_string()),
                ],
                "beside: {beside}"
            );
        }
    }

    /// A plugin that sets the consumer, as the authentication plugins do.
    #[derive(Debug)]
    struct Authenticates(uuid::Uuid);

    impl crate::Plugin for Authenticates {
        fn name(&self) -> &'static str {
            "authenticates"
        }
        fn priority(&self) -> i32 {
            2000
        }
        fn reads_identity_fields(&self) -> bool {
            false
        }
        fn access(&self, ctx: &mut crate::RequestCtx<'_>) -> crate::Flow {
            let consumer = ctx.directory.consumer(self.0);
            crate::auth::set_consumer(ctx, consumer, None);
            crate::Flow::Continue
        }
    }

    /// The upstream request's fields after a chain's access phase with the
    /// identity held beside the map: what the map holds, and what is beside.
    fn run_chain(
        plugins: Vec<std::sync::Arc<dyn crate::Plugin>>,
        directory: &dyn crate::Directory,
    ) -> (HeaderMap, Vec<String>) {
        let chain = crate::PluginChain::from_instances(plugins);
        let mut request = crate::auth::test_support::TestRequest::new("GET", "/")
            .header("x-consumer-id", "spoofed")
            .header("x-anonymous-consumer", "spoofed");
        let mut ctx = request.ctx(directory);
        ctx.identity = IdentityFields::beside();
        let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
        assert_eq!(runtime.block_on(chain.access(&mut ctx)), crate::Flow::Continue);
        let beside = ctx.identity.iter().map(|(name, _)| name.to_string()).collect();
        drop(ctx);
        (request.headers, beside)
    }

    /// A plugin that reads the request's fields (request-transformer here)
    /// finds the identity fields in the map; without one they stay beside it.
    #[test]
    fn a_plugin_that_reads_them_finds_them_in_the_map() {
        let mut directory = crate::auth::test_support::TestDirectory::default();
        let consumer = directory.consumer("alice");
        let transformer = crate::bundled::request_transformer::RequestTransformer::from_config(
            serde_json::json!({ "rename": { "headers": ["x-consumer-username:x-user"] } })
                .as_object()
                .unwrap(),
        )
        .unwrap();
        let (headers, beside) = run_chain(
            vec![
                std::sync::Arc::new(Authenticates(consumer)),
                std::sync::Arc::new(transformer),
            ],
            &directory,
        );
        assert_eq!(headers["x-user"], "alice");
        assert_eq!(headers["x-anonymous-consumer"], "true");
        assert!(headers.get("x-consumer-username").is_none());
        assert!(beside.is_empty(), "{beside:?}");

        // One that only adds a field of its own leaves them beside the map.
        let adds = crate::bundled::request_transformer::RequestTransformer::from_config(
            serde_json::json!({ "add": { "headers": ["x-added:1"] } })
                .as_object()
                .unwrap(),
        )
        .unwrap();
        let (headers, beside) = run_chain(
            vec![std::sync::Arc::new(Authenticates(consumer)), std::sync::Arc::new(adds)],
            &directory,
        );
        assert_eq!(headers["x-added"], "1");
        assert_eq!(beside, ["x-consumer-id", "x-consumer-username", "x-anonymous-consumer"]);

        let (headers, beside) = run_chain(vec![std::sync::Arc::new(Authenticates(consumer))], &directory);
        assert!(headers.get("x-consumer-id").is_none(), "the client's is removed");
        assert!(headers.get("x-anonymous-consumer").is_none());
        assert_eq!(beside, ["x-consumer-id", "x-consumer-username", "x-anonymous-consumer"]);
    }
}
