//! MessagePack, the encoding of the Python and JavaScript PDKs' RPC
//! (`MsgPack:1`): the values they send ([`Value`]), written and read
//! incrementally from a stream ([`decode`] says when it needs more bytes).

use std::fmt;

/// A MessagePack value. Maps keep their order (the PDKs' objects).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Nil,
    Bool(bool),
    Int(i64),
    /// An unsigned integer past `i64::MAX`.
    UInt(u64),
    Float(f64),
    Str(String),
    Bin(Vec<u8>),
    Array(Vec<Value>),
    Map(Vec<(Value, Value)>),
}

impl Value {
    pub fn str(text: impl Into<String>) -> Value {
        Value::Str(text.into())
    }

    /// A map from string keys.
    pub fn map<const N: usize>(pairs: [(&str, Value); N]) -> Value {
        Value::Map(pairs.into_iter().map(|(k, v)| (Value::str(k), v)).collect())
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(text) => Some(text),
            _ => None,
        }
    }

    pub fn as_i64(&self) -> Option<i64> {
        match self {
            Value::Int(n) => Some(*n),
            Value::UInt(n) => i64::try_from(*n).ok(),
            Value::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(*f as i64),
            _ => None,
        }
    }

    /// The value under string key `key` of a map.
    pub fn get(&self, key: &str) -> Option<&Value> {
        match self {
            Value::Map(pairs) => pairs.iter().find(|(k, _)| k.as_str() == Some(key)).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn is_nil(&self) -> bool {
        matches!(self, Value::Nil)
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Nil => f.write_str("nil"),
            Value::Bool(b) => write!(f, "{b}"),
            Value::Int(n) => write!(f, "{n}"),
            Value::UInt(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Str(text) => f.write_str(text),
            Value::Bin(bytes) => f.write_str(&String::from_utf8_lossy(bytes)),
            Value::Array(items) => {
                f.write_str("[")?;
                for (at, item) in items.iter().enumerate() {
                    if at > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            Value::Map(_) => f.write_str("{...}"),
        }
    }
}

/// Appends `value`'s encoding to `out`.
pub fn encode(value: &Value, out: &mut Vec<u8>) {
    match value {
        Value::Nil => out.push(0xc0),
        Value::Bool(false) => out.push(0xc2),
        Value::Bool(true) => out.push(0xc3),
        Value::Int(n) => encode_int(*n, out),
        Value::UInt(n) => {
            out.push(0xcf);
            out.extend_from_slice(&n.to_be_bytes());
        }
        Value::Float(x) => {
            out.push(0xcb);
            out.extend_from_slice(&x.to_be_bytes());
        }
        Value::Str(text) => {
            let length = text.len();
            match length {
                0..=31 => out.push(0xa0 | length as u8),
                32..=0xff => out.extend_from_slice(&[0xd9, length as u8]),
                0x100..=0xffff => {
                    out.push(0xda);
                    out.extend_from_slice(&(length as u16).to_be_bytes());
                }
                _ => {
                    out.push(0xdb);
                    out.extend_from_slice(&(length as u32).to_be_bytes());
                }
            }
            out.extend_from_slice(text.as_bytes());
        }
        Value::Bin(bytes) => {
            let length = bytes.len();
            match length {
                0..=0xff => out.extend_from_slice(&[0xc4, length as u8]),
                0x100..=0xffff => {
                    out.push(0xc5);
                    out.extend_from_slice(&(length as u16).to_be_bytes());
                }
                _ => {
                    out.push(0xc6);
                    out.extend_from_slice(&(length as u32).to_be_bytes());
                }
            }
            out.extend_from_slice(bytes);
        }
        Value::Array(items) => {
            container_head(items.len(), 0x90, 0xdc, out);
            for item in items {
                encode(item, out);
            }
        }
        Value::Map(pairs) => {
            container_head(pairs.len(), 0x80, 0xde, out);
            for (key, item) in pairs {
                encode(key, out);
                encode(item, out);
            }
        }
    }
}

fn container_head(length: usize, fix: u8, wide: u8, out: &mut Vec<u8>) {
    match length {
        0..=15 => out.push(fix | length as u8),
        16..=0xffff => {
            out.push(wide);
            out.extend_from_slice(&(length as u16).to_be_bytes());
        }
        _ => {
            out.push(wide + 1);
            out.extend_from_slice(&(length as u32).to_be_bytes());
        }
    }
}

fn encode_int(n: i64, out: &mut Vec<u8>) {
    match n {
        0..=127 => out.push(n as u8),
        -32..=-1 => out.push(n as i8 as u8),
        128..=0xff => out.extend_from_slice(&[0xcc, n as u8]),
        0x100..=0xffff => {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        0x1_0000..=0xffff_ffff => {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        }
        -128..=-33 => out.extend_from_slice(&[0xd0, n as i8 as u8]),
        -32768..=-129 => {
            out.push(0xd1);
            out.extend_from_slice(&(n as i16).to_be_bytes());
        }
        -2_147_483_648..=-32769 => {
            out.push(0xd2);
            out.extend_from_slice(&(n as i32).to_be_bytes());
        }
        _ if n > 0 => {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
        _ => {
            out.push(0xd3);
            out.extend_from_slice(&n.to_be_bytes());
        }
    }
}

/// Why a buffer did not decode.
#[derive(Debug, PartialEq)]
pub enum DecodeError {
    /// The value goes on past the bytes read so far.
    Incomplete,
    /// Not MessagePack Strait reads (an extension type, bad UTF-8, too
    /// deep).
    Invalid(String),
}

/// The most a value nests: the PDKs' messages nest a few levels.
const MAX_DEPTH: usize = 64;

/// Decodes one value from the start of `bytes`: the value and how many
/// bytes it took.
pub fn decode(bytes: &[u8]) -> Result<(Value, usize), DecodeError> {
    let mut reader = Reader { bytes, at: 0 };
    let value = reader.value(0)?;
    Ok((value, reader.at))
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], DecodeError> {
        let end = self.at.checked_add(count).ok_or(DecodeError::Incomplete)?;
        let taken = self.bytes.get(self.at..end).ok_or(DecodeError::Incomplete)?;
        self.at = end;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }

    fn uint(&mut self, width: usize) -> Result<u64, DecodeError> {
        Ok(self.take(width)?.iter().fold(0u64, |n, b| (n << 8) | u64::from(*b)))
    }

    fn value(&mut self, depth: usize) -> Result<Value, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::Invalid("a value nests too deep".into()));
        }
        let head = self.byte()?;
        Ok(match head {
            0x00..=0x7f => Value::Int(i64::from(head)),
            0x80..=0x8f => self.map(usize::from(head & 0x0f), depth)?,
            0x90..=0x9f => self.array(usize::from(head & 0x0f), depth)?,
            0xa0..=0xbf => self.text(usize::from(head & 0x1f))?,
            0xc0 => Value::Nil,
            0xc2 => Value::Bool(false),
            0xc3 => Value::Bool(true),
            0xc4..=0xc6 => {
                let length = self.uint(1 << (head - 0xc4))? as usize;
                Value::Bin(self.take(length)?.to_vec())
            }
            0xca => Value::Float(f64::from(f32::from_bits(self.uint(4)? as u32))),
            0xcb => Value::Float(f64::from_bits(self.uint(8)?)),
            0xcc..=0xcf => {
                let n = self.uint(1 << (head - 0xcc))?;
                i64::try_from(n).map_or(Value::UInt(n), Value::Int)
            }
            0xd0 => Value::Int(i64::from(self.byte()? as i8)),
            0xd1 => Value::Int(i64::from(self.uint(2)? as u16 as i16)),
            0xd2 => Value::Int(i64::from(self.uint(4)? as u32 as i32)),
            0xd3 => Value::Int(self.uint(8)? as i64),
            0xd9..=0xdb => {
                let length = self.uint(1 << (head - 0xd9))? as usize;
                self.text(length)?
            }
            0xdc | 0xdd => {
                let length = self.uint(2 << (head - 0xdc))? as usize;
                self.array(length, depth)?
            }
            0xde | 0xdf => {
                let length = self.uint(2 << (head - 0xde))? as usize;
                self.map(length, depth)?
            }
            0xe0..=0xff => Value::Int(i64::from(head as i8)),
            other => {
                return Err(DecodeError::Invalid(format!(
                    "MessagePack type 0x{other:02x} is not read"
                )))
            }
        })
    }

    fn text(&mut self, length: usize) -> Result<Value, DecodeError> {
        let bytes = self.take(length)?;
        String::from_utf8(bytes.to_vec())
            .map(Value::Str)
            .map_err(|_| DecodeError::Invalid("a string is not UTF-8".into()))
    }

    fn array(&mut self, length: usize, depth: usize) -> Result<Value, DecodeError> {
        // Each element takes at least a byte: a length past what is left
        // waits for more, never allocates for it.
        if length > self.bytes.len() - self.at {
            return Err(DecodeError::Incomplete);
        }
        let mut items = Vec::with_capacity(length);
        for _ in 0..length {
            items.push(self.value(depth + 1)?);
        }
        Ok(Value::Array(items))
    }

    fn map(&mut self, length: usize, depth: usize) -> Result<Value, DecodeError> {
        if length.saturating_mul(2) > self.bytes.len() - self.at {
            return Err(DecodeError::Incomplete);
        }
        let mut pairs = Vec::with_capacity(length);
        for _ in 0..length {
            let key = self.value(depth + 1)?;
            pairs.push((key, self.value(depth + 1)?));
        }
        Ok(Value::Map(pairs))
    }
}

/// A JSON value as MessagePack (configs, tables handed to the plugin).
pub fn from_json(json: &serde_json::Value) -> Value {
    use serde_json::Value as Json;
    match json {
        Json::Null => Value::Nil,
        Json::Bool(b) => Value::Bool(*b),
        Json::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::Int(i),
            (None, Some(u)) => Value::UInt(u),
            _ => Value::Float(n.as_f64().unwrap_or(0.0)),
        },
        Json::String(text) => Value::Str(text.clone()),
        Json::Array(items) => Value::Array(items.iter().map(from_json).collect()),
        Json::Object(object) => Value::Map(
            object
                .iter()
                .map(|(k, v)| (Value::Str(k.clone()), from_json(v)))
                .collect(),
        ),
    }
}

/// A MessagePack value as JSON (what the plugin hands Kong's PDK: bodies,
/// `kong.ctx.shared` values). Binary reads as text; non-string map keys as
/// their text.
pub fn to_json(value: &Value) -> serde_json::Value {
    use serde_json::Value as Json;
    match value {
        Value::Nil => Json::Null,
        Value::Bool(b) => Json::Bool(*b),
        Value::Int(n) => Json::from(*n),
        Value::UInt(n) => Json::from(*n),
        Value::Float(x) => serde_json::Number::from_f64(*x).map_or(Json::Null, Json::Number),
        Value::Str(text) => Json::String(text.clone()),
        Value::Bin(bytes) => Json::String(String::from_utf8_lossy(bytes).into_owned()),
        Value::Array(items) => Json::Array(items.iter().map(to_json).collect()),
        Value::Map(pairs) => Json::Object(pairs.iter().map(|(k, v)| (k.to_string(), to_json(v))).collect()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_a_cut_value_asks_for_more() {
        let value = Value::Array(vec![
            Value::Int(0),
            Value::Int(-1),
            Value::Int(200),
            Value::Int(-200),
            Value::Int(70_000),
            Value::Int(-70_000),
            Value::Int(5_000_000_000),
            Value::Int(-5_000_000_000),
            Value::UInt(u64::MAX),
            Value::Float(1.5),
            Value::str("plugin.StartInstance"),
            Value::str("x".repeat(300)),
            Value::Bin(vec![0, 1, 2]),
            Value::Nil,
            Value::Bool(true),
            Value::map([("Name", Value::str("py-hello")), ("Config", Value::str("{}"))]),
            Value::Array((0..20).map(Value::Int).collect()),
        ]);
        let mut bytes = Vec::new();
        encode(&value, &mut bytes);
        assert_eq!(decode(&bytes), Ok((value, bytes.len())));
        for cut in 0..bytes.len() {
            assert_eq!(
                decode(&bytes[..cut]).unwrap_err(),
                DecodeError::Incomplete,
                "cut at {cut}"
            );
        }
        // A huge declared length with nothing behind it waits, never allocates.
        assert_eq!(
            decode(&[0xdd, 0xff, 0xff, 0xff, 0xff]).unwrap_err(),
            DecodeError::Incomplete
        );
        assert!(matches!(decode(&[0xc7, 0, 0]), Err(DecodeError::Invalid(_))));
    }

    #[test]
    fn python_msgpack_bytes_decode() {
        // msgpack.packb([0, 1, "plugin.Step", [{"EventId": 0, "Data": None}]])
        let bytes = [
            0x94, 0x00, 0x01, 0xab, b'p', b'l', b'u', b'g', b'i', b'n', b'.', b'S', b't', b'e', b'p', 0x91, 0x82, 0xa7,
            b'E', b'v', b'e', b'n', b't', b'I', b'd', 0x00, 0xa4, b'D', b'a', b't', b'a', 0xc0,
        ];
        let (value, used) = decode(&bytes).unwrap();
        assert_eq!(used, bytes.len());
        let Value::Array(items) = value else { panic!() };
        assert_eq!(items[2].as_str(), Some("plugin.Step"));
        let Value::Array(params) = &items[3] else { panic!() };
        assert_eq!(params[0].get("EventId"), Some(&Value::Int(0)));
        assert!(params[0].get("Data").unwrap().is_nil());
    }
}
