//! The shared runtime store: a Redis server every node of a cluster points
//! at (`oauth2_token_store = redis` and its `oauth2_redis_*` settings).
//! Each entry is one key, `strait:kv:<table>:<key>`, expiring with Redis's
//! own `EXPIREAT`; nothing ever scans for expired entries. Listing (Admin
//! API pages, renewals) walks the table's keys with `SCAN`.

use super::{expiry, KvError, KvFuture, KvPage, KvStore, Table};
use crate::redis::{Redis, RedisError, Script, Value};

const PREFIX: &str = "strait:kv:";

static GET: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| Script::new("return redis.call('GET', KEYS[1])"));

static PUT: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r#"
redis.call('SET', KEYS[1], ARGV[1])
if ARGV[2] ~= '' then redis.call('EXPIREAT', KEYS[1], ARGV[2]) end
return 1
"#,
    )
});

static DELETE: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new("return redis.call('DEL', KEYS[1])"));

/// One `SCAN` step and the values of the keys it found: `{cursor, key1,
/// value1, ...}`.
static SCAN: std::sync::LazyLock<Script> = std::sync::LazyLock::new(|| {
    Script::new(
        r#"
local found = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', ARGV[3])
local out = { found[1] }
for _, key in ipairs(found[2]) do
  local value = redis.call('GET', key)
  if value then
    out[#out + 1] = key
    out[#out + 1] = value
  end
end
return out
"#,
    )
});

/// The Redis runtime store.
#[derive(Debug, Clone)]
pub struct RedisKv {
    redis: Redis,
}

impl RedisKv {
    pub fn new(redis: Redis) -> RedisKv {
        RedisKv { redis }
    }
}

fn key_of(table: Table, key: &str) -> String {
    format!("{PREFIX}{}:{key}", table.name())
}

fn failed(error: RedisError) -> KvError {
    match error {
        RedisError::Reply(_, message) => KvError::Failed(message),
        other => KvError::Unavailable(other.to_string()),
    }
}

/// A glob pattern matching `text` literally, then anything.
fn glob_prefix(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 1);
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('*');
    out
}

impl KvStore for RedisKv {
    fn backend(&self) -> &'static str {
        "redis"
    }

    fn get(&self, table: Table, key: &str) -> KvFuture<'_, Option<Vec<u8>>> {
        let key = key_of(table, key);
        Box::pin(async move {
            match self.redis.eval(&GET, &[key.as_bytes()], &[]).await.map_err(failed)? {
                Value::Bulk(value) => Ok(Some(value)),
                _ => Ok(None),
            }
        })
    }

    fn put(&self, table: Table, key: &str, value: Vec<u8>, ttl: Option<i64>) -> KvFuture<'_, ()> {
        let key = key_of(table, key);
        // EXPIREAT in the past deletes the key at once, as a TTL of zero asks.
        let at = expiry(ttl).map(|at| at.to_string()).unwrap_or_default();
        Box::pin(async move {
            self.redis
                .eval(&PUT, &[key.as_bytes()], &[&value, at.as_bytes()])
                .await
                .map_err(failed)?;
            Ok(())
        })
    }

    fn delete(&self, table: Table, key: &str) -> KvFuture<'_, bool> {
        let key = key_of(table, key);
        Box::pin(async move {
            let removed = self.redis.eval(&DELETE, &[key.as_bytes()], &[]).await.map_err(failed)?;
            Ok(matches!(removed, Value::Int(n) if n > 0))
        })
    }

    fn list(&self, table: Table, prefix: &str, cursor: Option<&str>, size: usize) -> KvFuture<'_, KvPage> {
        let pattern = glob_prefix(&key_of(table, prefix));
        let strip = key_of(table, "").len();
        let cursor = cursor.unwrap_or("0").to_string();
        let size = size.max(1);
        Box::pin(async move {
            if cursor.parse::<u64>().is_err() {
                return Err(KvError::BadCursor);
            }
            let count = size.to_string();
            let mut page = KvPage::default();
            let mut at = cursor;
            // SCAN may answer few keys a step: take steps until the page
            // has about `size` entries or the walk ends.
            loop {
                let reply = self
                    .redis
                    .eval(&SCAN, &[], &[at.as_bytes(), pattern.as_bytes(), count.as_bytes()])
                    .await
                    .map_err(failed)?;
                let Value::Array(items) = reply else {
                    return Err(KvError::Failed("SCAN answered no array".into()));
                };
                let mut items = items.into_iter();
                at = match items.next() {
                    Some(Value::Bulk(next)) => String::from_utf8_lossy(&next).into_owned(),
                    _ => return Err(KvError::Failed("SCAN answered no cursor".into())),
                };
                while let (Some(Value::Bulk(key)), Some(Value::Bulk(value))) = (items.next(), items.next()) {
                    let key = String::from_utf8_lossy(&key);
                    page.entries
                        .push((key.get(strip..).unwrap_or_default().to_string(), value));
                }
                if at == "0" {
                    return Ok(page);
                }
                if page.entries.len() >= size {
                    page.next = Some(at);
                    return Ok(page);
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_patterns_match_the_prefix_literally() {
        assert_eq!(glob_prefix("strait:kv:acme:a*b"), "strait:kv:acme:a\\*b*");
        assert_eq!(key_of(Table::Sessions, "x"), "strait:kv:sessions:x");
    }
}
