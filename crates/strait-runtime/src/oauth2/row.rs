//! The embedded store's row format for a token: a version byte, the fixed
//! fields, then length-prefixed strings. Decoding it costs a few copies
//! where JSON cost a parse (every bearer request decodes one row), and a
//! row is about a third of its JSON size.
//!
//! ```text
//! 0x01 | id (16) | credential (16) | flags (1) | service (16, if flag 1)
//!      | created_at (i64 LE) | expires_in (i64 LE) | ttl (i64 LE, if flag 2)
//!      | token_type | access_token | refresh_token (if flag 4)
//!      | authenticated_userid (if flag 8) | scope (if flag 16)
//! string: length (u32 LE) | UTF-8 bytes
//! ```
//!
//! Rows that start with `{` are the JSON rows of earlier builds and still
//! decode.

use uuid::Uuid;

use super::OauthToken;

const VERSION: u8 = 1;
const SERVICE: u8 = 1;
const TTL: u8 = 2;
const REFRESH: u8 = 4;
const USERID: u8 = 8;
const SCOPE: u8 = 16;

pub fn encode(token: &OauthToken) -> Vec<u8> {
    let strings = [
        Some(&token.token_type),
        Some(&token.access_token),
        token.refresh_token.as_ref(),
        token.authenticated_userid.as_ref(),
        token.scope.as_ref(),
    ];
    let text: usize = strings.iter().flatten().map(|s| 4 + s.len()).sum();
    let mut out = Vec::with_capacity(1 + 16 + 16 + 1 + 16 + 24 + text);
    let flags = [
        (token.service.is_some(), SERVICE),
        (token.ttl.is_some(), TTL),
        (token.refresh_token.is_some(), REFRESH),
        (token.authenticated_userid.is_some(), USERID),
        (token.scope.is_some(), SCOPE),
    ]
    .iter()
    .filter(|(set, _)| *set)
    .fold(0u8, |all, (_, bit)| all | bit);
    out.push(VERSION);
    out.extend_from_slice(token.id.as_bytes());
    out.extend_from_slice(token.credential.as_bytes());
    out.push(flags);
    if let Some(service) = token.service {
        out.extend_from_slice(service.as_bytes());
    }
    out.extend_from_slice(&token.created_at.to_le_bytes());
    out.extend_from_slice(&token.expires_in.to_le_bytes());
    if let Some(ttl) = token.ttl {
        out.extend_from_slice(&ttl.to_le_bytes());
    }
    for s in strings.into_iter().flatten() {
        // A string over 4 GiB cannot reach here: the Admin API and the
        // plugin take bodies of a few megabytes at most.
        out.extend_from_slice(&(s.len() as u32).to_le_bytes());
        out.extend_from_slice(s.as_bytes());
    }
    out
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err("the row is cut short".into());
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn uuid(&mut self) -> Result<Uuid, String> {
        let bytes: [u8; 16] = self.take(16)?.try_into().map_err(|_| "bad uuid")?;
        Ok(Uuid::from_bytes(bytes))
    }

    fn i64(&mut self) -> Result<i64, String> {
        let bytes: [u8; 8] = self.take(8)?.try_into().map_err(|_| "bad integer")?;
        Ok(i64::from_le_bytes(bytes))
    }

    fn string(&mut self) -> Result<String, String> {
        let len: [u8; 4] = self.take(4)?.try_into().map_err(|_| "bad length")?;
        let bytes = self.take(u32::from_le_bytes(len) as usize)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| "a string is not UTF-8".to_string())
    }
}

pub fn decode(bytes: &[u8]) -> Result<OauthToken, String> {
    match bytes.first() {
        Some(b'{') => return serde_json::from_slice(bytes).map_err(|e| e.to_string()),
        Some(&VERSION) => {}
        Some(other) => return Err(format!("unknown row version {other}")),
        None => return Err("the row is empty".into()),
    }
    let mut r = Reader { bytes: &bytes[1..] };
    let id = r.uuid()?;
    let credential = r.uuid()?;
    let flags = r.take(1)?[0];
    let has = |bit: u8| flags & bit != 0;
    let service = if has(SERVICE) { Some(r.uuid()?) } else { None };
    let created_at = r.i64()?;
    let expires_in = r.i64()?;
    let ttl = if has(TTL) { Some(r.i64()?) } else { None };
    let token_type = r.string()?;
    let access_token = r.string()?;
    let mut optional = |bit: u8| if has(bit) { r.string().map(Some) } else { Ok(None) };
    let refresh_token = optional(REFRESH)?;
    let authenticated_userid = optional(USERID)?;
    let scope = optional(SCOPE)?;
    if !r.bytes.is_empty() {
        return Err("the row has bytes past its last field".into());
    }
    Ok(OauthToken {
        id,
        created_at,
        service,
        credential,
        token_type,
        expires_in,
        access_token,
        refresh_token,
        authenticated_userid,
        scope,
        ttl,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token(full: bool) -> OauthToken {
        OauthToken {
            id: Uuid::new_v4(),
            created_at: 1_795_000_000,
            service: full.then(Uuid::new_v4),
            credential: Uuid::new_v4(),
            token_type: "bearer".into(),
            expires_in: 7200,
            access_token: "access-ü".into(),
            refresh_token: full.then(|| "refresh".to_string()),
            authenticated_userid: full.then(|| "user 1".to_string()),
            scope: full.then(|| "email profile".to_string()),
            ttl: full.then_some(1_209_600),
        }
    }

    #[test]
    fn rows_round_trip_with_and_without_every_optional_field() {
        for full in [true, false] {
            let token = token(full);
            assert_eq!(decode(&encode(&token)).unwrap(), token);
        }
        let mut partial = token(true);
        partial.authenticated_userid = None;
        partial.ttl = None;
        assert_eq!(decode(&encode(&partial)).unwrap(), partial);
    }

    #[test]
    fn json_rows_of_earlier_builds_still_decode() {
        let token = token(true);
        assert_eq!(decode(&serde_json::to_vec(&token).unwrap()).unwrap(), token);
    }

    #[test]
    fn damaged_rows_are_errors_not_panics() {
        let row = encode(&token(true));
        for cut in 0..row.len() {
            assert!(decode(&row[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = row.clone();
        longer.push(0);
        assert!(decode(&longer).unwrap_err().contains("past its last field"));
        let mut version = row;
        version[0] = 9;
        assert!(decode(&version).unwrap_err().contains("version 9"));
    }
}
