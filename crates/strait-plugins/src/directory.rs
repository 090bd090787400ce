//! [`Directory`]: how plugins find consumers, credentials and
//! consumer-scoped plugins during a request. The snapshot implements it with
//! indexes keyed by credential, so every lookup is O(1) whatever the number
//! of consumers.

use http::HeaderValue;
use strait_core::{
    BasicauthCredential, Consumer, HmacauthCredential, JwtSecret, KeyauthCredential, Oauth2Credential, Route, Service,
};
use uuid::Uuid;

use crate::chain::ConsumerPlugin;

/// What an authenticated request needs of its consumer, prepared when the
/// snapshot compiles so that a request copies header values instead of
/// formatting and validating them: Kong's `X-Consumer-*` headers and the
/// consumer's ACL groups with their `X-Consumer-Groups` value.
#[derive(Debug, Clone, Default)]
pub struct ConsumerView {
    /// The consumer row (None only for groups whose consumer row is not
    /// there yet: a view without it is never used to identify a request).
    pub consumer: Option<Consumer>,
    /// `X-Consumer-ID`.
    pub id_header: Option<HeaderValue>,
    /// `X-Consumer-Username` (None: no username, or not a valid header value).
    pub username_header: Option<HeaderValue>,
    /// `X-Consumer-Custom-ID`.
    pub custom_id_header: Option<HeaderValue>,
    /// ACL groups in the order they were added.
    pub groups: Vec<String>,
    /// The ids of the `acls` rows holding `groups` (same order).
    pub acl_ids: Vec<Uuid>,
    /// `groups` joined with ", " (None when there are none).
    pub groups_header: Option<HeaderValue>,
    /// The names of the consumer groups the consumer belongs to, sorted.
    pub consumer_groups: Vec<String>,
}

impl ConsumerView {
    /// The view of `consumer` with `groups` (and their `acls` row ids).
    pub fn new(consumer: &Consumer, groups: Vec<String>, acl_ids: Vec<Uuid>) -> ConsumerView {
        let value = |text: &str| HeaderValue::from_str(text).ok();
        let mut id_text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        ConsumerView {
            consumer: Some(consumer.clone()),
            id_header: value(consumer.id.hyphenated().encode_lower(&mut id_text)),
            username_header: consumer.username.as_deref().and_then(value),
            custom_id_header: consumer.custom_id.as_deref().and_then(value),
            groups_header: if groups.is_empty() {
                None
            } else {
                value(&groups.join(", "))
            },
            groups,
            acl_ids,
            consumer_groups: Vec::new(),
        }
    }
}

/// What key-auth needs of a credential, found by its key in one lookup.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyauthKey {
    pub credential: Uuid,
    pub consumer: Uuid,
    pub created_at: i64,
    pub ttl: Option<i64>,
    /// `X-Credential-Identifier` (the credential's id), made once.
    pub identifier: HeaderValue,
}

impl KeyauthKey {
    pub fn of(credential: &KeyauthCredential) -> KeyauthKey {
        let mut id_text = [0u8; uuid::fmt::Hyphenated::LENGTH];
        let id = credential.id.hyphenated().encode_lower(&mut id_text);
        KeyauthKey {
            credential: credential.id,
            consumer: credential.consumer.id,
            created_at: credential.created_at,
            ttl: credential.ttl,
            identifier: HeaderValue::from_str(id).expect("a hyphenated uuid is a header value"),
        }
    }
}

impl std::fmt::Debug for dyn Directory + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Directory")
    }
}

pub trait Directory: Sync {
    fn consumer(&self, id: Uuid) -> Option<&Consumer>;
    /// A consumer by id or, failing that, by username (Kong's `anonymous`).
    fn consumer_by_id_or_username(&self, value: &str) -> Option<&Consumer>;
    /// The PEM of the CA certificate entity `id`.
    fn ca_certificate_pem(&self, _id: Uuid) -> Option<&str> {
        None
    }
    /// The consumer with this `custom_id` (an index, not a scan).
    fn consumer_by_custom_id(&self, _custom_id: &str) -> Option<&Consumer> {
        None
    }
    fn keyauth_credential(&self, key: &str) -> Option<&KeyauthCredential>;
    /// The credential holding `key`, as key-auth needs it.
    fn keyauth_key(&self, key: &str) -> Option<KeyauthKey> {
        self.keyauth_credential(key).map(KeyauthKey::of)
    }
    fn basicauth_credential(&self, username: &str) -> Option<&BasicauthCredential>;
    fn jwt_secret(&self, key: &str) -> Option<&JwtSecret>;
    fn hmacauth_credential(&self, username: &str) -> Option<&HmacauthCredential>;
    /// The OAuth2 client application with this `client_id`.
    fn oauth2_credential(&self, _client_id: &str) -> Option<&Oauth2Credential> {
        None
    }
    /// The OAuth2 client application with this id (a token's credential).
    fn oauth2_credential_by_id(&self, _id: Uuid) -> Option<&Oauth2Credential> {
        None
    }
    /// The prepared view of `consumer` (headers and ACL groups).
    fn consumer_view(&self, consumer: Uuid) -> Option<&ConsumerView>;
    /// The ACL groups of `consumer`, in the order they were added; `None`
    /// when it has none.
    fn acl_groups(&self, consumer: Uuid) -> Option<&[String]> {
        self.consumer_view(consumer)
            .filter(|v| !v.groups.is_empty())
            .map(|v| v.groups.as_slice())
    }
    /// Plugins configured for `consumer` (any route or service scope).
    fn consumer_plugins(&self, consumer: Uuid) -> &[ConsumerPlugin];
    /// A route by id (log serializers report the matched route whole).
    fn route(&self, _id: Uuid) -> Option<&Route> {
        None
    }
    /// A service by id.
    fn service(&self, _id: Uuid) -> Option<&Service> {
        None
    }
}

/// A directory with nothing in it (plugins without consumers, unit tests).
#[derive(Debug, Default)]
pub struct EmptyDirectory;

impl Directory for EmptyDirectory {
    fn consumer(&self, _: Uuid) -> Option<&Consumer> {
        None
    }
    fn consumer_by_id_or_username(&self, _: &str) -> Option<&Consumer> {
        None
    }
    fn keyauth_credential(&self, _: &str) -> Option<&KeyauthCredential> {
        None
    }
    fn basicauth_credential(&self, _: &str) -> Option<&BasicauthCredential> {
        None
    }
    fn jwt_secret(&self, _: &str) -> Option<&JwtSecret> {
        None
    }
    fn hmacauth_credential(&self, _: &str) -> Option<&HmacauthCredential> {
        None
    }
    fn consumer_view(&self, _: Uuid) -> Option<&ConsumerView> {
        None
    }
    fn consumer_plugins(&self, _: Uuid) -> &[ConsumerPlugin] {
        &[]
    }
}
