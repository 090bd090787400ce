//! lua-resty-session 4's cookie, as Kong 3.x's `session` plugin writes it:
//! a Kong-issued cookie opens here with the same secret, and the reverse.
//!
//! The cookie is base64url (no padding) of an 82-byte header, then (with
//! cookie storage) base64url of the ciphertext. Header, little-endian:
//! type 1 (1 byte), flags (2), session id (32 random bytes), creation time
//! (5), rolling offset (4), ciphertext size (3, of its base64url), GCM tag
//! (16), idling offset (3), MAC (16). Keys come from the initial key
//! material IKM = SHA-256(secret): HKDF-SHA-256 (empty salt) with
//! `encryption:<sid>` gives the AES-256-GCM key and IV (44 bytes; remember
//! cookies use PBKDF2-SHA-256, 10,000 rounds, salt `encryption:<sid>`),
//! the AAD being the header's first 47 bytes; `authentication:<sid>` gives
//! the HMAC-SHA-256 key of the MAC over the first 66 bytes, cut to 16. The
//! plaintext is JSON `[[data, audience, subject], ...]`, raw-deflated past
//! 1024 bytes. Past 4096 bytes a cookie continues in `<name>2` ... `<name>9`.

use std::io::{Read as _, Write as _};
use std::num::NonZeroU32;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
use ring::rand::SecureRandom as _;

pub const HEADER_SIZE: usize = 82;
/// base64url of the header, no padding.
pub const HEADER_ENCODED_SIZE: usize = 110;
const TAG_AT: usize = 47;
const IDLING_AT: usize = 63;
const MAC_AT: usize = 66;
const COOKIE_TYPE: u8 = 1;
const MAX_COOKIE_SIZE: usize = 4096;
const MAX_COOKIES: usize = 9;
const MAX_ROLLING_OFFSET: i64 = (1 << 32) - 1;
const MAX_IDLING_OFFSET: i64 = (1 << 24) - 1;
const MAX_DATA_SIZE: usize = (1 << 24) - 1;
const COMPRESSION_THRESHOLD: usize = 1024;
/// The longest a stored session lives (lua-resty-session's 400 days).
pub const MAX_TTL: i64 = 34_560_000;
const REMEMBER_ROUNDS: u32 = 10_000;

pub const FLAG_STORAGE: u16 = 0x0001;
pub const FLAG_FORGET: u16 = 0x0002;
pub const FLAG_DEFLATE: u16 = 0x0010;

pub fn random<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    if ring::rand::SystemRandom::new().fill(&mut bytes).is_err() {
        // Only a broken system lacks its random source; uuid's generator
        // (the same source through another path) is the fallback.
        for chunk in bytes.chunks_mut(16) {
            let id = uuid::Uuid::new_v4();
            chunk.copy_from_slice(&id.as_bytes()[..chunk.len()]);
        }
    }
    bytes
}

/// The initial key material of a secret.
pub fn ikm(secret: &str) -> [u8; 32] {
    let mut out = [0u8; 32];
    out.copy_from_slice(ring::digest::digest(&ring::digest::SHA256, secret.as_bytes()).as_ref());
    out
}

struct Len(usize);

impl ring::hkdf::KeyType for Len {
    fn len(&self) -> usize {
        self.0
    }
}

fn hkdf(ikm: &[u8; 32], usage: &str, sid: &[u8], out: &mut [u8]) {
    let prk = ring::hkdf::Salt::new(ring::hkdf::HKDF_SHA256, &[]).extract(ikm);
    let info = [usage.as_bytes(), b":", sid];
    // Lengths below 255 * 32 never fail.
    if let Ok(okm) = prk.expand(&info, Len(out.len())) {
        let _ = okm.fill(out);
    }
}

/// AES-256-GCM key and IV for a session id (`remember`: the slow PBKDF2
/// derivation of persistent cookies).
fn aes_key(ikm: &[u8; 32], sid: &[u8], remember: bool) -> (LessSafeKey, [u8; 12]) {
    let mut bytes = [0u8; 44];
    if remember {
        let mut salt = b"encryption:".to_vec();
        salt.extend_from_slice(sid);
        let rounds = NonZeroU32::new(REMEMBER_ROUNDS).unwrap_or(NonZeroU32::MIN);
        ring::pbkdf2::derive(ring::pbkdf2::PBKDF2_HMAC_SHA256, rounds, &salt, ikm, &mut bytes);
    } else {
        hkdf(ikm, "encryption", sid, &mut bytes);
    }
    let mut iv = [0u8; 12];
    iv.copy_from_slice(&bytes[32..]);
    // A 32-byte key always makes an AES-256 key.
    let key = UnboundKey::new(&AES_256_GCM, &bytes[..32]).map(LessSafeKey::new);
    (key.unwrap_or_else(|_| unreachable_key()), iv)
}

#[cold]
fn unreachable_key() -> LessSafeKey {
    LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &[0u8; 32]).unwrap_or_else(|_| unreachable!("a 32-byte key")))
}

fn mac(ikm: &[u8; 32], sid: &[u8], message: &[u8]) -> [u8; 16] {
    let mut key = [0u8; 32];
    hkdf(ikm, "authentication", sid, &mut key);
    let tag = ring::hmac::sign(&ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &key), message);
    let mut out = [0u8; 16];
    out.copy_from_slice(&tag.as_ref()[..16]);
    out
}

fn pack(out: &mut Vec<u8>, value: u64, size: usize) {
    out.extend_from_slice(&value.to_le_bytes()[..size]);
}

fn unpack(bytes: &[u8]) -> i64 {
    bytes.iter().rev().fold(0i64, |n, b| (n << 8) | i64::from(*b))
}

pub fn base64_size(size: usize) -> usize {
    (4 * size).div_ceil(3)
}

/// How many cookies carry `data_size` bytes of ciphertext (None: too big).
pub fn chunks(name_size: usize, data_size: usize) -> Option<usize> {
    let mut needed = name_size + 1 + HEADER_ENCODED_SIZE + data_size;
    if needed > MAX_COOKIES * MAX_COOKIE_SIZE {
        return None;
    }
    if needed <= MAX_COOKIE_SIZE {
        return Some(1);
    }
    for i in 2..=MAX_COOKIES {
        needed += name_size + 2;
        if needed > MAX_COOKIES * MAX_COOKIE_SIZE {
            return None;
        }
        if needed <= MAX_COOKIE_SIZE * i {
            return Some(i);
        }
    }
    None
}

/// A session's header fields as read or written.
#[derive(Debug, Clone)]
pub struct Meta {
    pub flags: u16,
    pub sid: [u8; 32],
    pub creation_time: i64,
    pub rolling_offset: i64,
    /// Length of the ciphertext's base64url.
    pub data_size: usize,
    pub idling_offset: i64,
    pub header: [u8; HEADER_SIZE],
    /// When the session was opened or saved.
    pub timestamp: i64,
}

/// The timeouts a cookie is checked against.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub idling: i64,
    pub rolling: i64,
    pub absolute: i64,
}

/// A header checked: its fields, or why the cookie does not open.
pub fn read_header(
    encoded: &str,
    ikm: &[u8; 32],
    storage: bool,
    limits: Timeouts,
    remember: bool,
    now: i64,
) -> Result<Meta, &'static str> {
    let encoded = encoded.get(..HEADER_ENCODED_SIZE).ok_or("invalid session header")?;
    let bytes = URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| "unable to base64url decode session header")?;
    let header: [u8; HEADER_SIZE] = bytes.try_into().map_err(|_| "invalid session header")?;
    if header[0] != COOKIE_TYPE {
        return Err("invalid session cookie type");
    }
    let flags = unpack(&header[1..3]) as u16;
    if (flags & FLAG_STORAGE != 0) != storage {
        return Err("invalid session flags");
    }
    let mut sid = [0u8; 32];
    sid.copy_from_slice(&header[3..35]);
    let creation_time = unpack(&header[35..40]);
    let absolute_elapsed = now - creation_time;
    if absolute_elapsed > MAX_ROLLING_OFFSET {
        return Err("session lifetime exceeded");
    }
    if limits.absolute != 0 && absolute_elapsed > limits.absolute {
        return Err("session absolute timeout exceeded");
    }
    let rolling_offset = unpack(&header[40..44]);
    let rolling_elapsed = now - creation_time - rolling_offset;
    if limits.rolling != 0 && rolling_elapsed > limits.rolling {
        return Err("session rolling timeout exceeded");
    }
    let data_size = unpack(&header[44..TAG_AT]) as usize;
    let idling_offset = unpack(&header[IDLING_AT..MAC_AT]);
    if remember && idling_offset != 0 {
        return Err("invalid session idling offset");
    }
    if !remember && limits.idling != 0 && rolling_elapsed - idling_offset > limits.idling {
        return Err("session idling timeout exceeded");
    }
    let expected = mac(ikm, &sid, &header[..MAC_AT]);
    if !constant_time_eq(&expected, &header[MAC_AT..]) {
        return Err("invalid session message authentication code");
    }
    Ok(Meta {
        flags,
        sid,
        creation_time,
        rolling_offset,
        data_size,
        idling_offset,
        header,
        timestamp: now,
    })
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// The session entries of a ciphertext (base64url) under `meta`.
pub fn decrypt(meta: &Meta, ikm: &[u8; 32], payload: &str, remember: bool) -> Result<Vec<u8>, &'static str> {
    if payload.len() != meta.data_size {
        return Err("invalid session payload");
    }
    let mut data = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| "unable to base64url decode session data")?;
    data.extend_from_slice(&meta.header[TAG_AT..IDLING_AT]);
    let (key, iv) = aes_key(ikm, &meta.sid, remember);
    let plain = key
        .open_in_place(
            Nonce::assume_unique_for_key(iv),
            Aad::from(&meta.header[..TAG_AT]),
            &mut data,
        )
        .map_err(|_| "unable to decrypt session data")?;
    if meta.flags & FLAG_DEFLATE == 0 {
        return Ok(plain.to_vec());
    }
    let mut inflated = Vec::new();
    flate2::read::DeflateDecoder::new(&plain[..])
        .take(MAX_DATA_SIZE as u64)
        .read_to_end(&mut inflated)
        .map_err(|_| "unable to inflate session data")?;
    Ok(inflated)
}

/// A new header and ciphertext (base64url) for `plaintext`.
pub struct Sealed {
    pub meta: Meta,
    pub header: String,
    pub payload: String,
}

/// Seal `plaintext` as a new session id, keeping `creation_time` (None: a
/// new session, created now).
pub fn seal(
    ikm: &[u8; 32],
    plaintext: &[u8],
    mut flags: u16,
    creation_time: Option<i64>,
    remember: bool,
    now: i64,
) -> Result<Sealed, &'static str> {
    let (creation_time, rolling_offset) = match creation_time {
        Some(created) => (created, now - created),
        None => (now, 0),
    };
    if !(0..=MAX_ROLLING_OFFSET).contains(&rolling_offset) {
        return Err("session maximum rolling offset exceeded");
    }
    let mut data = plaintext.to_vec();
    flags &= !FLAG_DEFLATE;
    if data.len() > COMPRESSION_THRESHOLD {
        let mut encoder = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
        if encoder.write_all(&data).is_ok() {
            if let Ok(deflated) = encoder.finish() {
                if deflated.len() < data.len() {
                    data = deflated;
                    flags |= FLAG_DEFLATE;
                }
            }
        }
    }
    let data_size = base64_size(data.len());
    if data_size > MAX_DATA_SIZE {
        return Err("session maximum data size exceeded");
    }
    let sid = random::<32>();
    let mut header = Vec::with_capacity(HEADER_SIZE);
    header.push(COOKIE_TYPE);
    pack(&mut header, u64::from(flags), 2);
    header.extend_from_slice(&sid);
    pack(&mut header, creation_time.max(0) as u64, 5);
    pack(&mut header, rolling_offset as u64, 4);
    pack(&mut header, data_size as u64, 3);
    let (key, iv) = aes_key(ikm, &sid, remember);
    let tag = key
        .seal_in_place_separate_tag(Nonce::assume_unique_for_key(iv), Aad::from(&header[..]), &mut data)
        .map_err(|_| "unable to encrypt session data")?;
    header.extend_from_slice(tag.as_ref());
    pack(&mut header, 0, 3);
    let mac = mac(ikm, &sid, &header);
    header.extend_from_slice(&mac);
    let header: [u8; HEADER_SIZE] = header.try_into().map_err(|_| "invalid session header")?;
    Ok(Sealed {
        header: URL_SAFE_NO_PAD.encode(header),
        payload: URL_SAFE_NO_PAD.encode(&data),
        meta: Meta {
            flags,
            sid,
            creation_time,
            rolling_offset,
            data_size,
            idling_offset: 0,
            header,
            timestamp: now,
        },
    })
}

/// `meta`'s header with the idling offset moved to now (lua-resty-session's
/// `touch`): base64url, MAC recomputed.
pub fn touch(meta: &mut Meta, ikm: &[u8; 32], now: i64) -> String {
    let offset = (now - meta.creation_time - meta.rolling_offset).clamp(0, MAX_IDLING_OFFSET);
    let mut header = meta.header[..IDLING_AT].to_vec();
    pack(&mut header, offset as u64, 3);
    let mac = mac(ikm, &meta.sid, &header);
    header.extend_from_slice(&mac);
    meta.header.copy_from_slice(&header);
    meta.idling_offset = offset;
    URL_SAFE_NO_PAD.encode(meta.header)
}

/// The storage key of a session id (Kong's `sessions.session_id`).
pub fn storage_key(sid: &[u8; 32]) -> String {
    URL_SAFE_NO_PAD.encode(sid)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Timeouts = Timeouts {
        idling: 900,
        rolling: 3600,
        absolute: 86400,
    };

    #[test]
    fn a_sealed_session_opens_with_its_secret_only() {
        let key = ikm("s3cr3t");
        let sealed = seal(&key, br#"[[["c","k"],"default","alice"]]"#, 0, None, false, 1_000_000).expect("seals");
        assert_eq!(sealed.header.len(), HEADER_ENCODED_SIZE);
        let meta = read_header(&sealed.header, &key, false, LIMITS, false, 1_000_010).expect("opens");
        assert_eq!(meta.creation_time, 1_000_000);
        let plain = decrypt(&meta, &key, &sealed.payload, false).expect("decrypts");
        assert_eq!(plain, br#"[[["c","k"],"default","alice"]]"#);
        let other = ikm("other");
        assert_eq!(
            read_header(&sealed.header, &other, false, LIMITS, false, 1_000_010).err(),
            Some("invalid session message authentication code")
        );
        assert_eq!(
            read_header(&sealed.header, &key, true, LIMITS, false, 1_000_010).err(),
            Some("invalid session flags")
        );
    }

    #[test]
    fn timeouts_are_checked_from_the_header() {
        let key = ikm("k");
        let sealed = seal(&key, b"[]", 0, None, false, 5_000).expect("seals");
        let at = |now| read_header(&sealed.header, &key, false, LIMITS, false, now).err();
        assert_eq!(at(5_000 + 900), None);
        assert_eq!(at(5_000 + 901), Some("session idling timeout exceeded"));
        let mut meta = read_header(&sealed.header, &key, false, LIMITS, false, 5_800).expect("opens");
        let touched = touch(&mut meta, &key, 5_800);
        let later = |now| read_header(&touched, &key, false, LIMITS, false, now).err();
        assert_eq!(later(6_600), None);
        assert_eq!(later(5_000 + 3601), Some("session rolling timeout exceeded"));
        // A renewed session keeps its creation time: the absolute limit holds.
        let renewed = seal(&key, b"[]", 0, Some(5_000), false, 5_000 + 86_000).expect("seals");
        let meta = read_header(&renewed.header, &key, false, LIMITS, false, 5_000 + 86_300).expect("opens");
        assert_eq!(meta.rolling_offset, 86_000);
        assert_eq!(
            read_header(&renewed.header, &key, false, LIMITS, false, 5_000 + 86_401).err(),
            Some("session absolute timeout exceeded")
        );
    }

    #[test]
    fn large_sessions_are_deflated_and_remember_keys_differ() {
        let key = ikm("k");
        let big = format!("[[\"{}\",\"default\"]]", "x".repeat(5000));
        let sealed = seal(&key, big.as_bytes(), 0, None, true, 100).expect("seals");
        assert!(sealed.meta.flags & FLAG_DEFLATE != 0);
        assert!(sealed.payload.len() < 1000);
        let meta = read_header(&sealed.header, &key, false, LIMITS, true, 100).expect("opens");
        assert_eq!(decrypt(&meta, &key, &sealed.payload, true).expect("decrypts"), big.as_bytes());
        assert!(decrypt(&meta, &key, &sealed.payload, false).is_err());
    }

    #[test]
    fn cookies_split_past_4096_bytes() {
        assert_eq!(chunks(7, 100), Some(1));
        assert_eq!(chunks(7, 4096 - 118), Some(1));
        assert_eq!(chunks(7, 4096 - 117), Some(2));
        assert_eq!(chunks(7, 40_000), None);
    }
}
