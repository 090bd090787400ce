//! The shared token store: a Redis server every node of a cluster points
//! at (the same settings as rate-limiting's `redis` record). A token saved
//! through one node authenticates on all of them.
//!
//! Keys, each a primary-key lookup (`<hash>`: hex SHA-256):
//! - `strait:oauth2:t:<hash of access token>` -> the token (JSON);
//! - `strait:oauth2:i:<id>` -> `<access hash>[:<refresh hash>]`;
//! - `strait:oauth2:r:<hash of refresh token>` -> `<access hash>`;
//! - `strait:oauth2:c:<hash of code>` -> the code (JSON), 300 s.
//!
//! Rows expire with Redis's own `EXPIREAT` at the token's purge time, so
//! nothing ever scans for them. Every write is one Lua script: checks and
//! writes are atomic, and a refused write changes nothing. Durability is
//! the server's (`appendonly yes` with `appendfsync` as the operator sets).

use uuid::Uuid;

use super::{key_of, AuthCode, OauthToken, StoreFuture, TokenPage, TokenStore, TokenStoreError};
use crate::redis::{Redis, RedisError, Script, Value};

const PREFIX: &str = "strait:oauth2:";

static INSERT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('EXISTS', KEYS[2]) == 1 then return 'id' end
if redis.call('EXISTS', KEYS[1]) == 1 then return 'access_token' end
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 1 then return 'refresh_token' end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[3]) end
if ARGV[4] ~= '0' then
  for i = 1, #KEYS do redis.call('EXPIREAT', KEYS[i], ARGV[4]) end
end
return 'ok'
"#,
    )
});

static REPLACE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r#"
local v = redis.call('GET', KEYS[1])
if not v then return 'missing' end
local sep = string.find(v, ':', 1, true)
local old_t = ARGV[5] .. 't:' .. (sep and string.sub(v, 1, sep - 1) or v)
local old_r = sep and (ARGV[5] .. 'r:' .. string.sub(v, sep + 1)) or nil
if KEYS[2] ~= old_t and redis.call('EXISTS', KEYS[2]) == 1 then return 'access_token' end
if KEYS[3] and KEYS[3] ~= old_r and redis.call('EXISTS', KEYS[3]) == 1 then return 'refresh_token' end
redis.call('DEL', old_t)
if old_r then redis.call('DEL', old_r) end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('SET', KEYS[1], ARGV[2])
if KEYS[3] then redis.call('SET', KEYS[3], ARGV[3]) end
if ARGV[4] ~= '0' then
  for i = 1, #KEYS do redis.call('EXPIREAT', KEYS[i], ARGV[4]) end
end
return 'ok'
"#,
    )
});

static DELETE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r#"
local v = redis.call('GET', KEYS[1])
if not v then return false end
local sep = string.find(v, ':', 1, true)
local t = ARGV[1] .. 't:' .. (sep and string.sub(v, 1, sep - 1) or v)
local token = redis.call('GET', t)
redis.call('DEL', KEYS[1], t)
if sep then redis.call('DEL', ARGV[1] .. 'r:' .. string.sub(v, sep + 1)) end
return token
"#,
    )
});

/// GET one key; `ARGV[1]` set: the key holds an index entry, follow it.
static GET: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r#"
local v = redis.call('GET', KEYS[1])
if not v or not ARGV[1] then return v end
local sep = string.find(v, ':', 1, true)
return redis.call('GET', ARGV[1] .. 't:' .. (sep and string.sub(v, 1, sep - 1) or v))
"#,
    )
});

static PUT_CODE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r#"
if redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2], 'NX') then return 'ok' end
return 'code'
"#,
    )
});

static TAKE: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r#"
local v = redis.call('GET', KEYS[1])
if v then redis.call('DEL', KEYS[1]) end
return v
"#,
    )
});

static SCAN: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r#"
local page = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2] .. 'i:*', 'COUNT', ARGV[3])
local out = { page[1] }
for _, key in ipairs(page[2]) do
  local v = redis.call('GET', key)
  if v then
    local sep = string.find(v, ':', 1, true)
    local token = redis.call('GET', ARGV[2] .. 't:' .. (sep and string.sub(v, 1, sep - 1) or v))
    if token then out[#out + 1] = token end
  end
end
return out
"#,
    )
});

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The token store in Redis.
#[derive(Debug, Clone)]
pub struct RedisTokens {
    redis: Redis,
}

fn unavailable(error: RedisError) -> TokenStoreError {
    TokenStoreError::Unavailable(error.to_string())
}

fn outcome(value: Value) -> Result<(), TokenStoreError> {
    match value {
        Value::Bulk(b) if b == b"ok" => Ok(()),
        Value::Status(s) if s == "ok" => Ok(()),
        Value::Bulk(b) if b == b"missing" => Err(TokenStoreError::NotFound),
        Value::Bulk(b) => {
            let field = match b.as_slice() {
                b"id" => "id",
                b"access_token" => "access_token",
                b"refresh_token" => "refresh_token",
                _ => "code",
            };
            Err(TokenStoreError::Conflict {
                field,
                value: String::new(),
            })
        }
        other => Err(TokenStoreError::Failed(format!("unexpected reply {other:?}"))),
    }
}

fn decode<T: serde::de::DeserializeOwned>(value: Value) -> Result<Option<T>, TokenStoreError> {
    match value {
        Value::Bulk(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| TokenStoreError::Failed(format!("a stored row does not decode: {e}"))),
        Value::Nil => Ok(None),
        other => Err(TokenStoreError::Failed(format!("unexpected reply {other:?}"))),
    }
}

impl RedisTokens {
    pub fn new(redis: Redis) -> RedisTokens {
        RedisTokens { redis }
    }

    /// Keys and arguments of an insert or replace of `token`.
    fn write(&self, script: &'static Script, token: OauthToken, replace: bool) -> StoreFuture<'_, ()> {
        let redis = self.redis.clone();
        Box::pin(async move {
            let access = hex(&key_of(&token.access_token));
            let refresh = token.refresh_token.as_deref().map(|r| hex(&key_of(r)));
            let id_value = match &refresh {
                Some(r) => format!("{access}:{r}"),
                None => access.clone(),
            };
            let json = serde_json::to_string(&token).map_err(|e| TokenStoreError::Failed(e.to_string()))?;
            let expire_at = token.purge_at().map_or("0".to_string(), |at| at.to_string());
            let t_key = format!("{PREFIX}t:{access}");
            let i_key = format!("{PREFIX}i:{}", token.id);
            let r_key = refresh.as_ref().map(|r| format!("{PREFIX}r:{r}"));
            let mut keys: Vec<&[u8]> = match replace {
                false => vec![t_key.as_bytes(), i_key.as_bytes()],
                true => vec![i_key.as_bytes(), t_key.as_bytes()],
            };
            if let Some(r) = &r_key {
                keys.push(r.as_bytes());
            }
            let args: Vec<&[u8]> = match replace {
                false => vec![
                    json.as_bytes(),
                    id_value.as_bytes(),
                    access.as_bytes(),
                    expire_at.as_bytes(),
                ],
                true => vec![
                    json.as_bytes(),
                    id_value.as_bytes(),
                    access.as_bytes(),
                    expire_at.as_bytes(),
                    PREFIX.as_bytes(),
                ],
            };
            let value = redis.eval(script, &keys, &args).await.map_err(unavailable)?;
            outcome(value).map_err(|e| match e {
                TokenStoreError::Conflict { field, .. } => TokenStoreError::Conflict {
                    field,
                    value: match field {
                        "id" => token.id.to_string(),
                        "refresh_token" => token.refresh_token.clone().unwrap_or_default(),
                        _ => token.access_token.clone(),
                    },
                },
                other => other,
            })
        })
    }

    fn get<T: serde::de::DeserializeOwned + Send + 'static>(
        &self,
        key: String,
        follow: bool,
    ) -> StoreFuture<'_, Option<T>> {
        let redis = self.redis.clone();
        Box::pin(async move {
            let args: Vec<&[u8]> = if follow { vec![PREFIX.as_bytes()] } else { vec![] };
            let value = redis.eval(&GET, &[key.as_bytes()], &args).await.map_err(unavailable)?;
            decode(value)
        })
    }
}

fn live(token: Option<OauthToken>) -> Option<OauthToken> {
    token.filter(|t| t.purge_at().is_none_or(|at| at > super::now()))
}

impl TokenStore for RedisTokens {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn insert_token(&self, token: OauthToken) -> StoreFuture<'_, ()> {
        self.write(&INSERT, token, false)
    }

    fn replace_token(&self, token: OauthToken) -> StoreFuture<'_, ()> {
        self.write(&REPLACE, token, true)
    }

    fn token_by_access(&self, access_token: &str) -> StoreFuture<'_, Option<OauthToken>> {
        let found = self.get(format!("{PREFIX}t:{}", hex(&key_of(access_token))), false);
        Box::pin(async move { found.await.map(live) })
    }

    fn token_by_refresh(&self, refresh_token: &str) -> StoreFuture<'_, Option<OauthToken>> {
        let found = self.get(format!("{PREFIX}r:{}", hex(&key_of(refresh_token))), true);
        Box::pin(async move { found.await.map(live) })
    }

    fn token_by_id(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>> {
        let found = self.get(format!("{PREFIX}i:{id}"), true);
        Box::pin(async move { found.await.map(live) })
    }

    fn delete_token(&self, id: Uuid) -> StoreFuture<'_, Option<OauthToken>> {
        let redis = self.redis.clone();
        Box::pin(async move {
            let key = format!("{PREFIX}i:{id}");
            let value = redis
                .eval(&DELETE, &[key.as_bytes()], &[PREFIX.as_bytes()])
                .await
                .map_err(unavailable)?;
            decode(value)
        })
    }

    fn list_tokens(&self, cursor: Option<&str>, size: usize) -> StoreFuture<'_, TokenPage> {
        let redis = self.redis.clone();
        let cursor = cursor.unwrap_or("0").to_string();
        Box::pin(async move {
            if cursor.parse::<u64>().is_err() {
                return Err(TokenStoreError::BadCursor);
            }
            let count = size.max(1).to_string();
            let value = redis
                .eval(&SCAN, &[], &[cursor.as_bytes(), PREFIX.as_bytes(), count.as_bytes()])
                .await
                .map_err(unavailable)?;
            let Value::Array(items) = value else {
                return Err(TokenStoreError::Failed("unexpected SCAN reply".into()));
            };
            let mut items = items.into_iter();
            let next = match items.next() {
                Some(Value::Bulk(c)) if c != b"0" => Some(String::from_utf8_lossy(&c).into_owned()),
                _ => None,
            };
            let mut tokens = Vec::new();
            for item in items {
                if let Some(token) = live(decode(item)?) {
                    tokens.push(token);
                }
            }
            Ok(TokenPage { tokens, next })
        })
    }

    fn insert_code(&self, code: AuthCode) -> StoreFuture<'_, ()> {
        let redis = self.redis.clone();
        Box::pin(async move {
            let key = format!("{PREFIX}c:{}", hex(&key_of(&code.code)));
            let json = serde_json::to_string(&code).map_err(|e| TokenStoreError::Failed(e.to_string()))?;
            let ttl = super::CODE_TTL_SECONDS.to_string();
            let value = redis
                .eval(&PUT_CODE, &[key.as_bytes()], &[json.as_bytes(), ttl.as_bytes()])
                .await
                .map_err(unavailable)?;
            outcome(value)
        })
    }

    fn take_code(&self, code: &str) -> StoreFuture<'_, Option<AuthCode>> {
        let redis = self.redis.clone();
        let key = format!("{PREFIX}c:{}", hex(&key_of(code)));
        Box::pin(async move {
            let value = redis.eval(&TAKE, &[key.as_bytes()], &[]).await.map_err(unavailable)?;
            Ok(decode::<AuthCode>(value)?.filter(|c| !c.expired(super::now())))
        })
    }
}
