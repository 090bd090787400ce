//! [`Directory`]: how plugins find consumers, credentials and
//! consumer-scoped plugins during a request. The snapshot implements it with
//! indexes keyed by credential, so every lookup is O(1) whatever the number
//! of consumers.

use strait_core::{BasicauthCredential, Consumer, HmacauthCredential, JwtSecret, KeyauthCredential};
use uuid::Uuid;

use crate::chain::ConsumerPlugin;

pub trait Directory: Sync {
    fn consumer(&self, id: Uuid) -> Option<&Consumer>;
    /// A consumer by id or, failing that, by username (Kong's `anonymous`).
    fn consumer_by_id_or_username(&self, value: &str) -> Option<&Consumer>;
    fn keyauth_credential(&self, key: &str) -> Option<&KeyauthCredential>;
    fn basicauth_credential(&self, username: &str) -> Option<&BasicauthCredential>;
    fn jwt_secret(&self, key: &str) -> Option<&JwtSecret>;
    fn hmacauth_credential(&self, username: &str) -> Option<&HmacauthCredential>;
    /// The ACL groups of `consumer`, in the order they were added; `None`
    /// when it has none.
    fn acl_groups(&self, consumer: Uuid) -> Option<&[String]>;
    /// Plugins configured for `consumer` (any route or service scope).
    fn consumer_plugins(&self, consumer: Uuid) -> &[ConsumerPlugin];
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
    fn acl_groups(&self, _: Uuid) -> Option<&[String]> {
        None
    }
    fn consumer_plugins(&self, _: Uuid) -> &[ConsumerPlugin] {
        &[]
    }
}
