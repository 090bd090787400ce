//! The OAuth2 token store: access tokens, refresh tokens and authorization
//! codes of the `oauth2` plugin. Runtime data, never configuration: saving
//! a token bumps no config version and rebuilds nothing.
//!
//! Every lookup the proxy makes is by primary key: the SHA-256 of the access
//! token (of the refresh token, of the code). Expired rows leave through a
//! TTL-ordered index in bounded batches, never a scan. Backends:
//! - [`lmdb::LmdbTokens`]: an LMDB environment of its own under the prefix,
//!   writes group-committed (one fsync for every save waiting at the time);
//! - [`redis::RedisTokens`]: a Redis server several nodes share.
//!
//! The node opens one store at start and [`install`]s it; the plugin and
//! the Admin API's `/oauth2_tokens` find it with [`installed`].

pub mod lmdb;
pub mod redis;
pub mod row;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// One access token (Kong's `oauth2_tokens` row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OauthToken {
    pub id: Uuid,
    /// Seconds since the epoch; `expires_in` counts from here.
    pub created_at: i64,
    /// The service the token is for; `None` for global credentials.
    pub service: Option<Uuid>,
    /// The `oauth2_credentials` (client application) it was issued to.
    pub credential: Uuid,
    pub token_type: String,
    /// Seconds the access token is valid; 0: never expires.
    pub expires_in: i64,
    pub access_token: String,
    pub refresh_token: Option<String>,
    pub authenticated_userid: Option<String>,
    pub scope: Option<String>,
    /// Seconds the row lives from `created_at` (Kong's row `ttl`: the
    /// refresh token's life); `None`: see [`OauthToken::purge_at`].
    pub ttl: Option<i64>,
}

impl OauthToken {
    /// When the row is removed: at its `ttl`; without one, the second after
    /// the access token expires if there is no refresh token to use
    /// afterwards; never otherwise.
    pub fn purge_at(&self) -> Option<i64> {
        match self.ttl {
            Some(ttl) if ttl > 0 => Some(self.created_at.saturating_add(ttl)),
            _ if self.expires_in > 0 && self.refresh_token.is_none() => {
                Some(self.created_at.saturating_add(self.expires_in).saturating_add(1))
            }
            _ => None,
        }
    }

    /// True once the access token no longer authenticates.
    pub fn expired(&self, now: i64) -> bool {
        self.expires_in > 0 && now - self.created_at > self.expires_in
    }
}

/// How long an authorization code lives (Kong's 300 s).
pub const CODE_TTL_SECONDS: i64 = 300;

/// An authorization code (Kong's `oauth2_authorization_codes` row).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuthCode {
    pub id: Uuid,
    pub created_at: i64,
    pub service: Option<Uuid>,
    pub credential: Uuid,
    pub code: String,
    pub authenticated_userid: Option<String>,
    pub scope: Option<String>,
    pub challenge: Option<String>,
    pub challenge_method: Option<String>,
    /// The plugin instance that issued it.
    pub plugin: Option<Uuid>,
}

impl AuthCode {
    pub fn expired(&self, now: i64) -> bool {
        now - self.created_at >= CODE_TTL_SECONDS
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenStoreError {
    /// A unique field already names another token.
    #[error("UNIQUE violation detected on '{{{field}=\"{value}\"}}'")]
    Conflict { field: &'static str, value: String },
    #[error("no such token")]
    NotFound,
    #[error("invalid offset")]
    BadCursor,
    #[error("token store unavailable: {0}")]
    Unavailable(String),
    #[error("token store error: {0}")]
    Failed(String),
}

pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, TokenStoreError>> + Send + 'a>>;

/// What every backend offers. Saves resolve only once durable.
pub trait TokenStore: Send + Sync + std::fmt::Debug {
    /// Which backend, for `/status` and logs (`embedded`, `redis`).
    fn backend(&self) -> &'static str;
    /// Save a new token; refused when its id, access or refresh token is taken.
    fn insert_token(&self, token: OauthToken) -> StoreFuture<'_, ()>;
    /// [`TokenStore::insert_token`] for a token some of whose keys this node
    /// just drew ([`Drawn`]); a backend whose uniqueness check costs a round
    /// of consensus (Cassandra's lightweight transactions) skips it for
    /// those. The others check every key anyway.
    fn insert_drawn_token(&self, token: OauthToken, drawn: Drawn) -> StoreFuture<'_, ()> {
        let _ = drawn;
        self.insert_token(token)
    }
    /// Replace the token with `token.id` (Kong's update): indexes follow.
    fn replace_token(&self, token: OauthToken) -> StoreFuture<'_, ()>;
    fn token_by_access(&self, access_token: &str) -> StoreFuture<'_, Option<OauthToken>>;
    fn token_by_refresh(&self, refresh_token: &str) -> StoreFuture<'_, Option<OauthToken>>;
    fn token_by_id(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>>;
    /// Remove a token and its indexes; the token removed, if it was there.
    fn delete_token(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>>;
    /// About `size` tokens from `cursor` (None: the start) and the cursor of
    /// the next page (None: the last). Admin API pages, never a proxy path.
    fn list_tokens(&self, cursor: Option<&str>, size: usize) -> StoreFuture<'_, TokenPage>;
    fn insert_code(&self, code: AuthCode) -> StoreFuture<'_, ()>;
    /// Remove and return a code that has not expired (a code is used once).
    fn take_code(&self, code: &str) -> StoreFuture<'_, Option<AuthCode>>;
}

/// Which of a new token's unique keys this node drew from its CSPRNG (a
/// v4 UUID, [`random_token`]'s 192 bits) rather than took from a client:
/// no other token can hold those, so checking them is wasted work.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drawn {
    pub id: bool,
    pub access_token: bool,
    pub refresh_token: bool,
}

impl Drawn {
    /// Every key drawn here (the plugin's token endpoint).
    pub const ALL: Drawn = Drawn {
        id: true,
        access_token: true,
        refresh_token: true,
    };
}

/// One page of [`TokenStore::list_tokens`].
#[derive(Debug, Clone, Default)]
pub struct TokenPage {
    pub tokens: Vec<OauthToken>,
    /// Opaque; hand it back for the next page.
    pub next: Option<String>,
}

static STORE: OnceLock<Arc<dyn TokenStore>> = OnceLock::new();

/// Make `store` the node's token store; false when one already is.
pub fn install(store: Arc<dyn TokenStore>) -> bool {
    STORE.set(store).is_ok()
}

/// The node's token store, when it has one.
pub fn installed() -> Option<&'static Arc<dyn TokenStore>> {
    STORE.get()
}

/// The primary key of a secret: its SHA-256 (the secret itself is never a
/// key, so a key listing reveals no token).
pub fn key_of(secret: &str) -> [u8; 32] {
    let digest = ring::digest::digest(&ring::digest::SHA256, secret.as_bytes());
    let mut key = [0u8; 32];
    key.copy_from_slice(digest.as_ref());
    key
}

/// A [`TokenStore::list_tokens`] cursor of the stores that page by token
/// id: the last id of the page before (None: the first page).
pub fn id_cursor(cursor: Option<&str>) -> Result<Option<Uuid>, TokenStoreError> {
    cursor
        .map(|text| Uuid::parse_str(text).map_err(|_| TokenStoreError::BadCursor))
        .transpose()
}

/// Seconds since the epoch.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// A random token as Kong's `random_string`: 32 URL-safe characters.
pub fn random_token() -> String {
    use ring::rand::SecureRandom as _;
    let mut bytes = [0u8; 24];
    // The OS random source fails only on a broken system; a v4 UUID's
    // generator (also the OS source) is the fallback.
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        bytes[..16].copy_from_slice(Uuid::new_v4().as_bytes());
        bytes[16..].copy_from_slice(&Uuid::new_v4().as_bytes()[..8]);
    }
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(32);
    for chunk in bytes.chunks(3) {
        let n = (u32::from(chunk[0]) << 16) | (u32::from(chunk[1]) << 8) | u32::from(chunk[2]);
        for shift in [18, 12, 6, 0] {
            out.push(ALPHABET[((n >> shift) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests;
