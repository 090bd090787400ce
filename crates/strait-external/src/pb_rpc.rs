//! `ProtoBuf:1`, go-pdk's protocol: protobuf messages of Kong's
//! `pluginsocket.proto` in frames (a little-endian `u32` length, then the
//! bytes) on the server's Unix socket.
//!
//! A call is one `RpcCall {sequence, cmd_*}` frame answered by one
//! `RpcReturn` frame. During `cmd_handle_event` the server first asks for
//! PDK calls: a frame with the method's Kong name (`kong.request.get_header`),
//! a frame with its argument message, answered with a frame of its result
//! message (empty for `Empty`, for nil, and for a PDK error, as Kong does);
//! an empty name frame ends them. `kong.response.exit` gets no answer:
//! go-pdk closes the connection after it.
//!
//! The messages and each method's argument and result types are Kong's
//! (`service Kong` of the .proto); the arguments become the PDK's (pdk.rs),
//! the one PDK both protocols call.

use std::path::Path;

use prost::Message;
use prost_types::value::Kind;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixStream;

use crate::mp_rpc::{connect, read_more, Ended, RpcError};
use crate::msgpack::Value;
use crate::pdk::{Dispatch, Outcome};

/// The most one frame from a server may take.
const MAX_FRAME: usize = 64 * 1024 * 1024;

#[derive(Clone, PartialEq, Message)]
struct RpcCall {
    #[prost(int64, tag = "1")]
    sequence: i64,
    #[prost(oneof = "Call", tags = "33, 35, 36")]
    call: Option<Call>,
}

#[derive(Clone, PartialEq, prost::Oneof)]
enum Call {
    #[prost(message, tag = "33")]
    StartInstance(CmdStartInstance),
    #[prost(message, tag = "35")]
    CloseInstance(CmdCloseInstance),
    #[prost(message, tag = "36")]
    HandleEvent(CmdHandleEvent),
}

#[derive(Clone, PartialEq, Message)]
struct CmdStartInstance {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(bytes = "vec", tag = "2")]
    config: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct CmdCloseInstance {
    #[prost(int32, tag = "1")]
    instance_id: i32,
}

#[derive(Clone, PartialEq, Message)]
struct CmdHandleEvent {
    #[prost(int32, tag = "1")]
    instance_id: i32,
    #[prost(string, tag = "2")]
    event_name: String,
}

#[derive(Clone, PartialEq, Message)]
struct RpcReturn {
    #[prost(int64, tag = "1")]
    sequence: i64,
    #[prost(message, optional, tag = "33")]
    instance_status: Option<InstanceStatus>,
}

#[derive(Clone, PartialEq, Message)]
struct InstanceStatus {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(int32, tag = "2")]
    instance_id: i32,
    #[prost(int64, tag = "4")]
    started_at: i64,
}

#[derive(Clone, PartialEq, Message)]
struct PbBool {
    #[prost(bool, tag = "1")]
    v: bool,
}

#[derive(Clone, PartialEq, Message)]
struct PbInt {
    #[prost(int32, tag = "1")]
    v: i32,
}

#[derive(Clone, PartialEq, Message)]
struct PbNumber {
    #[prost(double, tag = "1")]
    v: f64,
}

#[derive(Clone, PartialEq, Message)]
struct PbString {
    #[prost(string, tag = "1")]
    v: String,
}

#[derive(Clone, PartialEq, Message)]
struct PbBytes {
    #[prost(bytes = "vec", tag = "1")]
    v: Vec<u8>,
}

#[derive(Clone, PartialEq, Message)]
struct Kv {
    #[prost(string, tag = "1")]
    k: String,
    #[prost(message, optional, tag = "2")]
    v: Option<prost_types::Value>,
}

#[derive(Clone, PartialEq, Message)]
struct ExitArgs {
    #[prost(int32, tag = "1")]
    status: i32,
    #[prost(bytes = "vec", tag = "2")]
    body: Vec<u8>,
    #[prost(message, optional, tag = "3")]
    headers: Option<prost_types::Struct>,
}

#[derive(Clone, PartialEq, Message)]
struct RawBodyResult {
    #[prost(bytes = "vec", optional, tag = "1")]
    content: Option<Vec<u8>>,
    #[prost(string, optional, tag = "3")]
    error: Option<String>,
}

#[derive(Clone, PartialEq, Message)]
struct PbConsumer {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(int64, tag = "2")]
    created_at: i64,
    #[prost(string, tag = "3")]
    username: String,
    #[prost(string, tag = "4")]
    custom_id: String,
    #[prost(string, repeated, tag = "5")]
    tags: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct PbCredential {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(string, tag = "2")]
    consumer_id: String,
}

#[derive(Clone, PartialEq, Message)]
struct PbRoute {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(int64, tag = "2")]
    created_at: i64,
    #[prost(int64, tag = "3")]
    updated_at: i64,
    #[prost(string, tag = "4")]
    name: String,
    #[prost(string, repeated, tag = "5")]
    protocols: Vec<String>,
    #[prost(string, repeated, tag = "6")]
    methods: Vec<String>,
    #[prost(string, repeated, tag = "7")]
    hosts: Vec<String>,
    #[prost(string, repeated, tag = "8")]
    paths: Vec<String>,
    #[prost(bool, tag = "12")]
    strip_path: bool,
    #[prost(bool, tag = "13")]
    preserve_host: bool,
    #[prost(string, repeated, tag = "17")]
    tags: Vec<String>,
}

#[derive(Clone, PartialEq, Message)]
struct PbService {
    #[prost(string, tag = "1")]
    id: String,
    #[prost(int64, tag = "2")]
    created_at: i64,
    #[prost(int64, tag = "3")]
    updated_at: i64,
    #[prost(string, tag = "4")]
    name: String,
    #[prost(int32, tag = "5")]
    retries: i32,
    #[prost(string, tag = "6")]
    protocol: String,
    #[prost(string, tag = "7")]
    host: String,
    #[prost(int32, tag = "8")]
    port: i32,
    #[prost(string, tag = "9")]
    path: String,
    #[prost(string, repeated, tag = "13")]
    tags: Vec<String>,
}

/// A method's argument message (Kong's `service Kong`).
#[derive(Clone, Copy)]
enum In {
    Empty,
    Str,
    Int,
    Bool,
    Kv,
    List,
    Struct,
    Exit,
    Bytes,
}

/// A method's result message.
#[derive(Clone, Copy)]
enum Out {
    Empty,
    Str,
    Int,
    Number,
    Bool,
    Struct,
    Value,
    RawBody,
    Consumer,
    Credential,
    Route,
    Service,
}

/// The argument and result messages of a method this version serves.
fn signature(method: &str) -> Option<(In, Out)> {
    use In as I;
    use Out as O;
    Some(match method {
        "kong.client.get_ip" | "kong.client.get_forwarded_ip" => (I::Empty, O::Str),
        "kong.client.get_port" | "kong.client.get_forwarded_port" => (I::Empty, O::Int),
        "kong.client.get_credential" => (I::Empty, O::Credential),
        "kong.client.get_consumer" => (I::Empty, O::Consumer),
        "kong.client.get_protocol" => (I::Bool, O::Str),
        "kong.ctx.shared.set" | "kong.log.set_serialize_value" => (I::Kv, O::Empty),
        "kong.ctx.shared.get" | "kong.nginx.get_ctx" => (I::Str, O::Value),
        // Kong's .proto answers a String that go-pdk does not read.
        "kong.nginx.set_ctx" => (I::Kv, O::Empty),
        "kong.ip.is_trusted" => (I::Str, O::Bool),
        "kong.log.alert" | "kong.log.crit" | "kong.log.err" | "kong.log.warn" | "kong.log.notice" | "kong.log.info"
        | "kong.log.debug" => (I::List, O::Empty),
        "kong.nginx.get_var" => (I::Str, O::Str),
        "kong.nginx.get_subsystem" => (I::Empty, O::Str),
        "kong.node.get_id" => (I::Empty, O::Str),
        "kong.request.get_scheme"
        | "kong.request.get_host"
        | "kong.request.get_forwarded_scheme"
        | "kong.request.get_forwarded_host"
        | "kong.request.get_method"
        | "kong.request.get_path"
        | "kong.request.get_path_with_query"
        | "kong.request.get_raw_query" => (I::Empty, O::Str),
        "kong.request.get_port" | "kong.request.get_forwarded_port" => (I::Empty, O::Int),
        "kong.request.get_http_version" => (I::Empty, O::Number),
        "kong.request.get_query_arg" | "kong.request.get_header" => (I::Str, O::Str),
        "kong.request.get_query" | "kong.request.get_headers" => (I::Int, O::Struct),
        "kong.request.get_raw_body" => (I::Empty, O::RawBody),
        "kong.response.set_header" | "kong.response.add_header" => (I::Kv, O::Empty),
        "kong.response.get_status" | "kong.service.response.get_status" => (I::Empty, O::Int),
        "kong.response.get_header" | "kong.service.response.get_header" => (I::Str, O::Str),
        "kong.response.get_headers" | "kong.service.response.get_headers" => (I::Int, O::Struct),
        "kong.response.get_source" => (I::Empty, O::Str),
        "kong.log.serialize" => (I::Empty, O::Str),
        "kong.response.exit" => (I::Exit, O::Empty),
        "kong.router.get_route" => (I::Empty, O::Route),
        "kong.router.get_service" => (I::Empty, O::Service),
        "kong.service.request.set_path"
        | "kong.service.request.set_raw_query"
        | "kong.service.request.set_method"
        | "kong.service.request.clear_header" => (I::Str, O::Empty),
        "kong.service.request.set_header" | "kong.service.request.add_header" => (I::Kv, O::Empty),
        "kong.service.request.set_headers" | "kong.service.request.set_query" => (I::Struct, O::Empty),
        "kong.service.request.set_raw_body" => (I::Bytes, O::Empty),
        // The rest of Kong's `service Kong`: served as the PDK serves them
        // (pdk.rs answers `not available in Strait`), their arguments unread
        // and an empty answer, as Kong answers a nil.
        "kong.client.load_consumer"
        | "kong.client.authenticate"
        | "kong.nginx.get_tls1_version_str"
        | "kong.nginx.req_start_time"
        | "kong.node.get_memory_stats"
        | "kong.request.get_uri_captures"
        | "kong.response.set_status"
        | "kong.response.clear_header"
        | "kong.response.set_headers"
        | "kong.service.set_upstream"
        | "kong.service.set_target"
        | "kong.service.request.set_scheme"
        | "kong.service.response.get_raw_body" => (I::Empty, O::Empty),
        _ => return None,
    })
}

/// One connection to a go-pdk server.
pub struct Conn {
    stream: UnixStream,
    sequence: i64,
    /// What was read and not yet taken: the server writes a PDK call's
    /// name and arguments as two frames, read here in one go.
    read: Vec<u8>,
    taken: usize,
}

impl Conn {
    pub async fn connect(socket: &Path) -> Result<Conn, RpcError> {
        let stream = connect(socket).await?;
        Ok(Conn {
            stream,
            sequence: 0,
            read: Vec::with_capacity(4096),
            taken: 0,
        })
    }

    async fn write_frame(&mut self, bytes: &[u8]) -> Result<(), RpcError> {
        let length = u32::try_from(bytes.len()).map_err(|_| RpcError::Io("a frame is too large".into()))?;
        let mut frame = Vec::with_capacity(4 + bytes.len());
        frame.extend_from_slice(&length.to_le_bytes());
        frame.extend_from_slice(bytes);
        self.stream
            .write_all(&frame)
            .await
            .map_err(|e| RpcError::Io(format!("writing: {e}")))
    }

    /// Reads until `count` bytes are waiting.
    async fn fill(&mut self, count: usize) -> Result<(), RpcError> {
        if self.taken > 0 && self.read.len() - self.taken < count {
            self.read.drain(..self.taken);
            self.taken = 0;
        }
        while self.read.len() - self.taken < count {
            if !read_more(&mut self.stream, &mut self.read).await? {
                // go-pdk answers every error of its own by closing.
                return Err(RpcError::Lost("the server closed the connection".into()));
            }
        }
        Ok(())
    }

    async fn read_frame(&mut self) -> Result<Vec<u8>, RpcError> {
        self.fill(4).await?;
        let at = self.taken;
        let length =
            u32::from_le_bytes([self.read[at], self.read[at + 1], self.read[at + 2], self.read[at + 3]]) as usize;
        if length > MAX_FRAME {
            return Err(RpcError::Io(format!("a frame of {length} bytes from the server")));
        }
        self.taken += 4;
        self.fill(length).await?;
        let frame = self.read[self.taken..self.taken + length].to_vec();
        self.taken += length;
        if self.taken == self.read.len() {
            self.read.clear();
            self.taken = 0;
        }
        Ok(frame)
    }

    async fn send(&mut self, call: Call) -> Result<(), RpcError> {
        self.sequence += 1;
        let message = RpcCall {
            sequence: self.sequence,
            call: Some(call),
        };
        self.write_frame(&message.encode_to_vec()).await
    }

    async fn answer(&mut self) -> Result<RpcReturn, RpcError> {
        let frame = self.read_frame().await?;
        let answer = RpcReturn::decode(frame.as_slice())
            .map_err(|e| RpcError::Io(format!("the server's answer does not decode: {e}")))?;
        if answer.sequence != self.sequence {
            return Err(RpcError::Io(format!(
                "the server answered call {} to call {}",
                answer.sequence, self.sequence
            )));
        }
        Ok(answer)
    }

    pub async fn start_instance(&mut self, name: &str, config: &str) -> Result<i64, RpcError> {
        self.send(Call::StartInstance(CmdStartInstance {
            name: name.to_string(),
            config: config.as_bytes().to_vec(),
        }))
        .await?;
        let answer = self.answer().await?;
        answer
            .instance_status
            .map(|status| i64::from(status.instance_id))
            .ok_or_else(|| RpcError::Io("StartInstance answered no instance".into()))
    }

    pub async fn close_instance(&mut self, instance: i64) -> Result<(), RpcError> {
        let instance_id = i32::try_from(instance).map_err(|_| RpcError::Io("an instance id past int32".into()))?;
        self.send(Call::CloseInstance(CmdCloseInstance { instance_id })).await?;
        self.answer().await.map(drop)
    }

    pub async fn handle_event(
        &mut self,
        instance: i64,
        phase: &str,
        plugin: &str,
        pdk: Dispatch<'_>,
    ) -> Result<Ended, RpcError> {
        let instance_id = i32::try_from(instance).map_err(|_| RpcError::Io("an instance id past int32".into()))?;
        self.send(Call::HandleEvent(CmdHandleEvent {
            instance_id,
            event_name: phase.to_string(),
        }))
        .await?;
        loop {
            let name = self.read_frame().await?;
            if name.is_empty() {
                break;
            }
            let method = String::from_utf8_lossy(&name).into_owned();
            let arguments = self.read_frame().await?;
            let Some((input, output)) = signature(&method) else {
                // Kong: `method "x" not found`, and the event fails.
                return Err(RpcError::Io(format!("method \"{method}\" not found")));
            };
            let args = decode_args(input, &arguments)
                .map_err(|e| RpcError::Io(format!("the arguments of {method} do not decode: {e}")))?;
            let reply = match pdk(&method, &args) {
                Ok(Outcome::Exit(response)) => return Ok(Ended::Exit(response)),
                Ok(Outcome::Value(value)) => encode_result(output, &value),
                Err(error) => {
                    tracing::warn!(target: "strait::pluginserver", "[{plugin}] {method}: {error}");
                    Vec::new()
                }
            };
            self.write_frame(&reply).await?;
        }
        self.answer().await?;
        Ok(Ended::Returned)
    }
}

fn decode_args(input: In, bytes: &[u8]) -> Result<Vec<Value>, prost::DecodeError> {
    Ok(match input {
        In::Empty => Vec::new(),
        In::Str => vec![Value::Str(PbString::decode(bytes)?.v)],
        In::Int => vec![Value::Int(i64::from(PbInt::decode(bytes)?.v))],
        In::Bool => vec![Value::Bool(PbBool::decode(bytes)?.v)],
        In::Kv => {
            let kv = Kv::decode(bytes)?;
            vec![Value::Str(kv.k), kv.v.map_or(Value::Nil, |v| from_pb(&v))]
        }
        In::List => prost_types::ListValue::decode(bytes)?
            .values
            .iter()
            .map(from_pb)
            .collect(),
        In::Struct => vec![from_struct(&prost_types::Struct::decode(bytes)?)],
        In::Exit => {
            let exit = ExitArgs::decode(bytes)?;
            vec![
                Value::Int(i64::from(exit.status)),
                match exit.body.is_empty() {
                    true => Value::Nil,
                    false => Value::Bin(exit.body),
                },
                exit.headers.as_ref().map_or(Value::Nil, from_struct),
            ]
        }
        In::Bytes => vec![Value::Bin(PbBytes::decode(bytes)?.v)],
    })
}

fn from_pb(value: &prost_types::Value) -> Value {
    match &value.kind {
        None | Some(Kind::NullValue(_)) => Value::Nil,
        Some(Kind::BoolValue(b)) => Value::Bool(*b),
        Some(Kind::NumberValue(n)) if n.fract() == 0.0 && n.abs() < 9.0e15 => Value::Int(*n as i64),
        Some(Kind::NumberValue(n)) => Value::Float(*n),
        Some(Kind::StringValue(text)) => Value::Str(text.clone()),
        Some(Kind::ListValue(list)) => Value::Array(list.values.iter().map(from_pb).collect()),
        Some(Kind::StructValue(object)) => from_struct(object),
    }
}

fn from_struct(object: &prost_types::Struct) -> Value {
    // The fields are a sorted map: the pairs come in name order.
    Value::Map(
        object
            .fields
            .iter()
            .map(|(k, v)| (Value::Str(k.clone()), from_pb(v)))
            .collect(),
    )
}

fn to_pb(value: &Value) -> prost_types::Value {
    let kind = match value {
        Value::Nil => Kind::NullValue(0),
        Value::Bool(b) => Kind::BoolValue(*b),
        Value::Int(n) => Kind::NumberValue(*n as f64),
        Value::UInt(n) => Kind::NumberValue(*n as f64),
        Value::Float(x) => Kind::NumberValue(*x),
        Value::Str(text) => Kind::StringValue(text.clone()),
        Value::Bin(bytes) => Kind::StringValue(String::from_utf8_lossy(bytes).into_owned()),
        Value::Array(items) => Kind::ListValue(prost_types::ListValue {
            values: items.iter().map(to_pb).collect(),
        }),
        Value::Map(_) => Kind::StructValue(to_struct(value)),
    };
    prost_types::Value { kind: Some(kind) }
}

fn to_struct(value: &Value) -> prost_types::Struct {
    let mut object = prost_types::Struct::default();
    if let Value::Map(pairs) = value {
        for (key, item) in pairs {
            object.fields.insert(key.to_string(), to_pb(item));
        }
    }
    object
}

fn text_of(value: &Value, key: &str) -> String {
    match value.get(key) {
        Some(Value::Str(text)) => text.clone(),
        _ => String::new(),
    }
}

fn int_of(value: &Value, key: &str) -> i64 {
    value.get(key).and_then(Value::as_i64).unwrap_or(0)
}

fn texts_of(value: &Value, key: &str) -> Vec<String> {
    match value.get(key) {
        Some(Value::Array(items)) => items.iter().filter_map(|i| i.as_str().map(str::to_string)).collect(),
        _ => Vec::new(),
    }
}

/// The result message of a PDK call (nothing for nil, as Kong sends).
fn encode_result(output: Out, value: &Value) -> Vec<u8> {
    if value.is_nil() {
        return Vec::new();
    }
    let int = |v: &Value| v.as_i64().and_then(|n| i32::try_from(n).ok()).unwrap_or(0);
    match output {
        Out::Empty => Vec::new(),
        Out::Str => PbString { v: value.to_string() }.encode_to_vec(),
        Out::Int => PbInt { v: int(value) }.encode_to_vec(),
        Out::Number => PbNumber {
            v: match value {
                Value::Float(x) => *x,
                other => other.as_i64().unwrap_or(0) as f64,
            },
        }
        .encode_to_vec(),
        Out::Bool => PbBool {
            v: matches!(value, Value::Bool(true)),
        }
        .encode_to_vec(),
        Out::Struct => to_struct(value).encode_to_vec(),
        Out::Value => to_pb(value).encode_to_vec(),
        Out::RawBody => RawBodyResult {
            content: match value {
                Value::Bin(bytes) => Some(bytes.clone()),
                other => Some(other.to_string().into_bytes()),
            },
            error: None,
        }
        .encode_to_vec(),
        Out::Consumer => PbConsumer {
            id: text_of(value, "id"),
            created_at: int_of(value, "created_at"),
            username: text_of(value, "username"),
            custom_id: text_of(value, "custom_id"),
            tags: texts_of(value, "tags"),
        }
        .encode_to_vec(),
        Out::Credential => PbCredential {
            id: text_of(value, "id"),
            consumer_id: value.get("consumer").map_or_else(String::new, |c| text_of(c, "id")),
        }
        .encode_to_vec(),
        Out::Route => PbRoute {
            id: text_of(value, "id"),
            created_at: int_of(value, "created_at"),
            updated_at: int_of(value, "updated_at"),
            name: text_of(value, "name"),
            protocols: texts_of(value, "protocols"),
            methods: texts_of(value, "methods"),
            hosts: texts_of(value, "hosts"),
            paths: texts_of(value, "paths"),
            strip_path: matches!(value.get("strip_path"), Some(Value::Bool(true))),
            preserve_host: matches!(value.get("preserve_host"), Some(Value::Bool(true))),
            tags: texts_of(value, "tags"),
        }
        .encode_to_vec(),
        Out::Service => PbService {
            id: text_of(value, "id"),
            created_at: int_of(value, "created_at"),
            updated_at: int_of(value, "updated_at"),
            name: text_of(value, "name"),
            retries: value.get("retries").map_or(0, int),
            protocol: text_of(value, "protocol"),
            host: text_of(value, "host"),
            port: value.get("port").map_or(0, int),
            path: text_of(value, "path"),
            tags: texts_of(value, "tags"),
        }
        .encode_to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_pdks_set_header_arguments_decode() {
        // go-pdk v0.11.0's `kong.response.set_header("x-hello", "hey")`.
        let bytes = [
            0x0a, 0x07, b'x', b'-', b'h', b'e', b'l', b'l', b'o', 0x12, 0x05, 0x1a, 0x03, b'h', b'e', b'y',
        ];
        let args = decode_args(In::Kv, &bytes).unwrap();
        assert_eq!(args, vec![Value::str("x-hello"), Value::str("hey")]);
        assert!(encode_result(Out::Str, &Value::Nil).is_empty());
        let header = encode_result(Out::Str, &Value::str("Ada"));
        assert_eq!(PbString::decode(header.as_slice()).unwrap().v, "Ada");
    }
}
