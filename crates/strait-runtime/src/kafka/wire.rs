//! Kafka's wire protocol, the part a producer needs: request framing
//! (header v1), `Metadata` v4, `Produce` v7 with record batches (magic 2,
//! CRC-32C), `SaslHandshake` v1 and `SaslAuthenticate` v1. None of these
//! versions is "flexible" (no tagged fields), and every one is served by
//! Kafka 2.1 up to 4.x (Kafka 4.0 dropped only older versions, KIP-896).
//!
//! Decoding never panics: a short or malformed response is an error.

use bytes::{BufMut, Bytes, BytesMut};

pub const PRODUCE: i16 = 0;
pub const METADATA: i16 = 3;
pub const SASL_HANDSHAKE: i16 = 17;
pub const SASL_AUTHENTICATE: i16 = 36;

/// The versions this client speaks.
pub const PRODUCE_VERSION: i16 = 7;
pub const METADATA_VERSION: i16 = 4;
pub const SASL_HANDSHAKE_VERSION: i16 = 1;
pub const SASL_AUTHENTICATE_VERSION: i16 = 1;

/// The client id every request carries.
pub const CLIENT_ID: &str = "strait";

/// A response frame at most this large is read (a Metadata answer of a
/// large cluster is well under it).
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

/// A request: its size prefix, header v1 and `body`.
pub fn frame(api_key: i16, version: i16, correlation_id: i32, body: &[u8]) -> Bytes {
    let header_len = 2 + 2 + 4 + 2 + CLIENT_ID.len();
    let mut out = BytesMut::with_capacity(4 + header_len + body.len());
    out.put_i32((header_len + body.len()) as i32);
    out.put_i16(api_key);
    out.put_i16(version);
    out.put_i32(correlation_id);
    put_string(&mut out, CLIENT_ID);
    out.put_slice(body);
    out.freeze()
}

fn put_string(out: &mut BytesMut, value: &str) {
    out.put_i16(value.len() as i16);
    out.put_slice(value.as_bytes());
}

fn put_varint(out: &mut BytesMut, value: i64) {
    // Zig-zag, then 7 bits at a time, low first.
    let mut v = ((value << 1) ^ (value >> 63)) as u64;
    while v >= 0x80 {
        out.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    out.put_u8(v as u8);
}

/// CRC-32C (Castagnoli), the checksum of record batches.
pub fn crc32c(data: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u32; 256];
        for (i, slot) in table.iter_mut().enumerate() {
            let mut c = i as u32;
            for _ in 0..8 {
                c = if c & 1 != 0 { 0x82F6_3B78 ^ (c >> 1) } else { c >> 1 };
            }
            *slot = c;
        }
        table
    });
    let mut crc = !0u32;
    for &byte in data {
        crc = table[((crc ^ byte as u32) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

/// One message of a batch.
#[derive(Debug, Clone)]
pub struct Record {
    pub key: Option<Bytes>,
    pub value: Bytes,
}

/// A record batch (magic 2), uncompressed, with no producer id: what a
/// partition's `records` field carries.
pub fn record_batch(records: &[&Record], timestamp_ms: i64) -> Bytes {
    let mut body = BytesMut::new();
    for (delta, record) in records.iter().enumerate() {
        let mut one = BytesMut::with_capacity(record.value.len() + 16);
        one.put_i8(0); // attributes
        put_varint(&mut one, 0); // timestamp delta
        put_varint(&mut one, delta as i64); // offset delta
        match &record.key {
            Some(key) => {
                put_varint(&mut one, key.len() as i64);
                one.put_slice(key);
            }
            None => put_varint(&mut one, -1),
        }
        put_varint(&mut one, record.value.len() as i64);
        one.put_slice(&record.value);
        put_varint(&mut one, 0); // headers
        put_varint(&mut body, one.len() as i64);
        body.put_slice(&one);
    }
    // From `attributes` to the end: what the CRC covers.
    let mut checked = BytesMut::with_capacity(body.len() + 40);
    checked.put_i16(0); // attributes: no compression, create time
    checked.put_i32(records.len().saturating_sub(1) as i32); // last offset delta
    checked.put_i64(timestamp_ms); // first timestamp
    checked.put_i64(timestamp_ms); // max timestamp
    checked.put_i64(-1); // producer id
    checked.put_i16(-1); // producer epoch
    checked.put_i32(-1); // base sequence
    checked.put_i32(records.len() as i32);
    checked.put_slice(&body);
    let mut batch = BytesMut::with_capacity(checked.len() + 21);
    batch.put_i64(0); // base offset
    batch.put_i32((checked.len() + 4 + 1 + 4) as i32); // batch length: from the leader epoch on
    batch.put_i32(-1); // partition leader epoch
    batch.put_i8(2); // magic
    batch.put_u32(crc32c(&checked));
    batch.put_slice(&checked);
    batch.freeze()
}

/// A `Produce` v7 body: one topic, the given partitions' batches.
pub fn produce_body(acks: i16, timeout_ms: i32, topic: &str, partitions: &[(i32, Bytes)]) -> BytesMut {
    let size: usize = partitions.iter().map(|(_, b)| b.len() + 8).sum();
    let mut out = BytesMut::with_capacity(size + topic.len() + 32);
    out.put_i16(-1); // transactional id: null
    out.put_i16(acks);
    out.put_i32(timeout_ms);
    out.put_i32(1);
    put_string(&mut out, topic);
    out.put_i32(partitions.len() as i32);
    for (partition, batch) in partitions {
        out.put_i32(*partition);
        out.put_i32(batch.len() as i32);
        out.put_slice(batch);
    }
    out
}

/// A `Metadata` v4 body for `topics` (auto-creation allowed, as Kafka's
/// own producer asks).
pub fn metadata_body(topics: &[&str]) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_i32(topics.len() as i32);
    for topic in topics {
        put_string(&mut out, topic);
    }
    out.put_u8(1);
    out
}

pub fn sasl_handshake_body(mechanism: &str) -> BytesMut {
    let mut out = BytesMut::new();
    put_string(&mut out, mechanism);
    out
}

pub fn sasl_authenticate_body(auth: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    out.put_i32(auth.len() as i32);
    out.put_slice(auth);
    out
}

/// A malformed or truncated response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Malformed(pub &'static str);

impl std::fmt::Display for Malformed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "malformed Kafka response ({})", self.0)
    }
}

/// Reads a response body field by field.
pub struct Reader<'a> {
    data: &'a [u8],
    what: &'static str,
}

impl<'a> Reader<'a> {
    pub fn new(data: &'a [u8], what: &'static str) -> Reader<'a> {
        Reader { data, what }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], Malformed> {
        if self.data.len() < n {
            return Err(Malformed(self.what));
        }
        let (head, rest) = self.data.split_at(n);
        self.data = rest;
        Ok(head)
    }

    pub fn i8(&mut self) -> Result<i8, Malformed> {
        Ok(self.take(1)?[0] as i8)
    }

    pub fn i16(&mut self) -> Result<i16, Malformed> {
        let b = self.take(2)?;
        Ok(i16::from_be_bytes([b[0], b[1]]))
    }

    pub fn i32(&mut self) -> Result<i32, Malformed> {
        let b = self.take(4)?;
        Ok(i32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub fn i64(&mut self) -> Result<i64, Malformed> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(i64::from_be_bytes(a))
    }

    /// A nullable string (`None` for length -1).
    pub fn string(&mut self) -> Result<Option<String>, Malformed> {
        let len = self.i16()?;
        if len < 0 {
            return Ok(None);
        }
        let bytes = self.take(len as usize)?;
        Ok(Some(String::from_utf8_lossy(bytes).into_owned()))
    }

    pub fn bytes(&mut self) -> Result<Option<&'a [u8]>, Malformed> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(None);
        }
        self.take(len as usize).map(Some)
    }

    /// An array's length (a null array reads as empty), bounded by what is
    /// left so a hostile length cannot make us allocate.
    pub fn array_len(&mut self) -> Result<usize, Malformed> {
        let len = self.i32()?;
        if len < 0 {
            return Ok(0);
        }
        if len as usize > self.data.len() {
            return Err(Malformed(self.what));
        }
        Ok(len as usize)
    }
}

/// One broker of a `Metadata` answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub node_id: i32,
    pub host: String,
    pub port: u16,
}

/// One partition of a topic: its error and its leader (-1: none now).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub error: i16,
    pub id: i32,
    pub leader: i32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicMetadata {
    pub error: i16,
    pub name: String,
    pub partitions: Vec<Partition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metadata {
    pub brokers: Vec<Broker>,
    pub topics: Vec<TopicMetadata>,
}

pub fn parse_metadata(body: &[u8]) -> Result<Metadata, Malformed> {
    let mut r = Reader::new(body, "Metadata");
    r.i32()?; // throttle time
    let mut brokers = Vec::new();
    for _ in 0..r.array_len()? {
        let node_id = r.i32()?;
        let host = r.string()?.unwrap_or_default();
        let port = r.i32()?;
        r.string()?; // rack
        brokers.push(Broker {
            node_id,
            host,
            port: u16::try_from(port).map_err(|_| Malformed("Metadata broker port"))?,
        });
    }
    r.string()?; // cluster id
    r.i32()?; // controller id
    let mut topics = Vec::new();
    for _ in 0..r.array_len()? {
        let error = r.i16()?;
        let name = r.string()?.unwrap_or_default();
        r.i8()?; // is internal
        let mut partitions = Vec::new();
        for _ in 0..r.array_len()? {
            let error = r.i16()?;
            let id = r.i32()?;
            let leader = r.i32()?;
            for _ in 0..r.array_len()? {
                r.i32()?; // replicas
            }
            for _ in 0..r.array_len()? {
                r.i32()?; // in-sync replicas
            }
            partitions.push(Partition { error, id, leader });
        }
        partitions.sort_by_key(|p| p.id);
        topics.push(TopicMetadata {
            error,
            name,
            partitions,
        });
    }
    Ok(Metadata { brokers, topics })
}

/// Each partition's error code and base offset from a `Produce` v7 answer.
pub fn parse_produce(body: &[u8]) -> Result<Vec<(String, i32, i16, i64)>, Malformed> {
    let mut r = Reader::new(body, "Produce");
    let mut out = Vec::new();
    for _ in 0..r.array_len()? {
        let topic = r.string()?.unwrap_or_default();
        for _ in 0..r.array_len()? {
            let partition = r.i32()?;
            let error = r.i16()?;
            let base_offset = r.i64()?;
            r.i64()?; // log append time
            r.i64()?; // log start offset
            out.push((topic.clone(), partition, error, base_offset));
        }
    }
    Ok(out)
}

/// The mechanisms a broker offers, or its error.
pub fn parse_sasl_handshake(body: &[u8]) -> Result<(i16, Vec<String>), Malformed> {
    let mut r = Reader::new(body, "SaslHandshake");
    let error = r.i16()?;
    let mut mechanisms = Vec::new();
    for _ in 0..r.array_len()? {
        mechanisms.push(r.string()?.unwrap_or_default());
    }
    Ok((error, mechanisms))
}

/// `(error code, error message, auth bytes)`.
pub fn parse_sasl_authenticate(body: &[u8]) -> Result<(i16, Option<String>, Vec<u8>), Malformed> {
    let mut r = Reader::new(body, "SaslAuthenticate");
    let error = r.i16()?;
    let message = r.string()?;
    let auth = r.bytes()?.unwrap_or_default().to_vec();
    Ok((error, message, auth))
}

/// Kafka's name for an error code (the ones a producer meets), for logs.
pub fn error_name(code: i16) -> &'static str {
    match code {
        0 => "NONE",
        -1 => "UNKNOWN_SERVER_ERROR",
        1 => "OFFSET_OUT_OF_RANGE",
        2 => "CORRUPT_MESSAGE",
        3 => "UNKNOWN_TOPIC_OR_PARTITION",
        5 => "LEADER_NOT_AVAILABLE",
        6 => "NOT_LEADER_OR_FOLLOWER",
        7 => "REQUEST_TIMED_OUT",
        8 => "BROKER_NOT_AVAILABLE",
        10 => "MESSAGE_TOO_LARGE",
        13 => "NETWORK_EXCEPTION",
        17 => "INVALID_TOPIC_EXCEPTION",
        18 => "RECORD_LIST_TOO_LARGE",
        19 => "NOT_ENOUGH_REPLICAS",
        20 => "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
        21 => "INVALID_REQUIRED_ACKS",
        29 => "TOPIC_AUTHORIZATION_FAILED",
        31 => "CLUSTER_AUTHORIZATION_FAILED",
        33 => "UNSUPPORTED_SASL_MECHANISM",
        34 => "ILLEGAL_SASL_STATE",
        35 => "UNSUPPORTED_VERSION",
        58 => "SASL_AUTHENTICATION_FAILED",
        _ => "UNKNOWN",
    }
}

/// Errors after which the same message may succeed once the metadata is
/// fresh or the leader has moved (Kafka marks these retriable).
pub fn retriable(code: i16) -> bool {
    matches!(code, 3 | 5 | 6 | 7 | 8 | 13 | 14 | 15 | 19 | 20 | 56 | 74 | 75)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_rfc_3720_vectors() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(&[0u8; 32]), 0x8A91_36AA);
        assert_eq!(crc32c(&[0xffu8; 32]), 0x62A8_AB43);
    }

    #[test]
    fn varints_are_zigzag() {
        let mut out = BytesMut::new();
        for v in [0i64, -1, 1, 63, -64, 64, 300] {
            put_varint(&mut out, v);
        }
        assert_eq!(&out[..], &[0x00, 0x01, 0x02, 0x7e, 0x7f, 0x80, 0x01, 0xd8, 0x04]);
    }

    #[test]
    fn a_record_batch_has_kafkas_layout_and_a_valid_crc() {
        let a = Record {
            key: None,
            value: Bytes::from_static(b"hello"),
        };
        let b = Record {
            key: Some(Bytes::from_static(b"k")),
            value: Bytes::from_static(b"world!"),
        };
        let batch = record_batch(&[&a, &b], 1_700_000_000_000);
        let mut r = Reader::new(&batch, "test");
        assert_eq!(r.i64().unwrap(), 0);
        let length = r.i32().unwrap() as usize;
        assert_eq!(length, batch.len() - 12);
        assert_eq!(r.i32().unwrap(), -1);
        assert_eq!(r.i8().unwrap(), 2);
        let crc = r.i32().unwrap() as u32;
        assert_eq!(crc, crc32c(&batch[21..]));
        assert_eq!(r.i16().unwrap(), 0);
        assert_eq!(r.i32().unwrap(), 1, "last offset delta");
        assert!(batch.ends_with(b"world!\x00"));
    }

    #[test]
    fn truncated_answers_are_errors_not_panics() {
        let mut body = BytesMut::new();
        body.put_i32(0); // throttle
        body.put_i32(1); // one broker
        body.put_i32(7);
        put_string(&mut body, "kafka.example");
        body.put_i32(9092);
        body.put_i16(-1);
        body.put_i16(-1); // cluster id
        body.put_i32(7);
        body.put_i32(1); // one topic
        body.put_i16(0);
        put_string(&mut body, "t");
        body.put_u8(0);
        body.put_i32(1);
        body.put_i16(0);
        body.put_i32(0);
        body.put_i32(7);
        body.put_i32(1);
        body.put_i32(7);
        body.put_i32(1);
        body.put_i32(7);
        let whole = parse_metadata(&body).unwrap();
        assert_eq!(whole.brokers[0].port, 9092);
        assert_eq!(
            whole.topics[0].partitions,
            vec![Partition {
                error: 0,
                id: 0,
                leader: 7
            }]
        );
        for cut in 0..body.len() {
            assert!(parse_metadata(&body[..cut]).is_err(), "cut at {cut}");
        }
        let mut huge = BytesMut::new();
        huge.put_i32(0);
        huge.put_i32(i32::MAX);
        assert!(parse_metadata(&huge).is_err());
    }
}
