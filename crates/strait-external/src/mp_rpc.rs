//! `MsgPack:1`, the Python and JavaScript PDKs' protocol: MessagePack-RPC
//! over the server's Unix socket, many calls in turn on one connection.
//! Requests are `[0, id, method, [arg]]`, answers `[1, id, error, result]`;
//! notifications (`[2, ...]`) are read and ignored.
//!
//! An event (one phase of one request): `plugin.HandleEvent {InstanceId,
//! EventName}` answers `{EventId, Data}`; while `Data` is a PDK call
//! `{Method, Args}`, Strait runs it on the request and answers it with
//! `plugin.Step {EventId, Data}` (Kong's step names: `plugin.StepError`
//! for a PDK error, `plugin.StepMultiMap` for the map getters, ...), until
//! `Data` is `"ret"`. `kong.response.exit` and `error` get no answer: the
//! event ends there, and that connection is closed rather than reused.

use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use crate::msgpack::{self, DecodeError, Value};
use crate::pdk::{self, Dispatch, Outcome};

/// The most one message from a server may take (a body it sets).
const MAX_MESSAGE: usize = 64 * 1024 * 1024;

/// Why a call to a server failed.
#[derive(Debug)]
pub enum RpcError {
    /// The connection: not made, closed, or not MessagePack-RPC.
    Io(String),
    /// The server's own error answer.
    Server(String),
    /// The server no longer knows the instance: a MsgPack server says `no
    /// plugin instance #3`, go-pdk closes the connection. The instance is
    /// started again (Kong retries on both).
    Lost(String),
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RpcError::Io(why) | RpcError::Server(why) | RpcError::Lost(why) => f.write_str(why),
        }
    }
}

/// Appends what the server sent next to `buffer`: false when it closed.
pub(crate) async fn read_more(stream: &mut UnixStream, buffer: &mut Vec<u8>) -> Result<bool, RpcError> {
    let mut chunk = [0u8; 8192];
    let read = stream
        .read(&mut chunk)
        .await
        .map_err(|e| RpcError::Io(format!("reading: {e}")))?;
    buffer.extend_from_slice(&chunk[..read]);
    Ok(read > 0)
}

/// One connection to a server.
pub struct Conn {
    stream: UnixStream,
    buffer: Vec<u8>,
    next_id: u32,
}

/// How an event ended.
pub enum Ended {
    /// The handler returned; the connection may be reused.
    Returned,
    /// `kong.response.exit`: the request's answer (the connection is done).
    Exit(strait_plugins::PluginResponse),
}

/// A connection to the server's socket (either protocol).
pub(crate) async fn connect(socket: &Path) -> Result<UnixStream, RpcError> {
    UnixStream::connect(socket)
        .await
        .map_err(|e| RpcError::Io(format!("connecting to {}: {e}", socket.display())))
}

impl Conn {
    pub async fn connect(socket: &Path) -> Result<Conn, RpcError> {
        let stream = connect(socket).await?;
        Ok(Conn {
            stream,
            buffer: Vec::with_capacity(4096),
            next_id: 0,
        })
    }

    /// One call: its result, or the server's error.
    pub async fn call(&mut self, method: &str, arg: Value) -> Result<Value, RpcError> {
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        let request = Value::Array(vec![
            Value::Int(0),
            Value::Int(i64::from(id)),
            Value::str(method),
            Value::Array(vec![arg]),
        ]);
        let mut bytes = Vec::with_capacity(128);
        msgpack::encode(&request, &mut bytes);
        self.stream
            .write_all(&bytes)
            .await
            .map_err(|e| RpcError::Io(format!("writing {method}: {e}")))?;
        loop {
            let message = self.read().await?;
            let Value::Array(mut parts) = message else {
                return Err(RpcError::Io("the server sent a message that is not an array".into()));
            };
            match parts.first().and_then(Value::as_i64) {
                Some(1) if parts.len() == 4 => {
                    if parts[1].as_i64() != Some(i64::from(id)) {
                        return Err(RpcError::Io(format!(
                            "the server answered message {} to message {id}",
                            parts[1]
                        )));
                    }
                    let result = parts.pop().unwrap_or(Value::Nil);
                    let error = parts.pop().unwrap_or(Value::Nil);
                    return match error {
                        Value::Nil => Ok(result),
                        error => {
                            let why = error.to_string();
                            Err(match why.contains("no plugin instance") {
                                true => RpcError::Lost(why),
                                false => RpcError::Server(why),
                            })
                        }
                    };
                }
                // A notification (`serverPid`): nothing to answer.
                Some(2) => continue,
                _ => return Err(RpcError::Io("the server sent a message that is not an answer".into())),
            }
        }
    }

    async fn read(&mut self) -> Result<Value, RpcError> {
        loop {
            if !self.buffer.is_empty() {
                match msgpack::decode(&self.buffer) {
                    Ok((value, used)) => {
                        self.buffer.drain(..used);
                        return Ok(value);
                    }
                    Err(DecodeError::Incomplete) if self.buffer.len() < MAX_MESSAGE => {}
                    Err(DecodeError::Incomplete) => {
                        return Err(RpcError::Io("a message from the server is too large".into()))
                    }
                    Err(DecodeError::Invalid(why)) => return Err(RpcError::Io(why)),
                }
            }
            if !read_more(&mut self.stream, &mut self.buffer).await? {
                return Err(RpcError::Io("the server closed the connection".into()));
            }
        }
    }

    /// `plugin.StartInstance` with the instance's config (JSON text): the
    /// server's instance id.
    pub async fn start_instance(&mut self, name: &str, config: &str) -> Result<i64, RpcError> {
        let result = self
            .call(
                "plugin.StartInstance",
                Value::map([("Name", Value::str(name)), ("Config", Value::str(config))]),
            )
            .await?;
        result
            .get("Id")
            .and_then(Value::as_i64)
            .ok_or_else(|| RpcError::Io("StartInstance answered no Id".into()))
    }

    /// `plugin.CloseInstance`: the server forgets `instance`.
    pub async fn close_instance(&mut self, instance: i64) -> Result<(), RpcError> {
        self.call("plugin.CloseInstance", Value::Int(instance)).await.map(drop)
    }

    /// One event of `instance` in `phase`, its PDK calls served by `pdk`.
    pub async fn handle_event(&mut self, instance: i64, phase: &str, pdk: Dispatch<'_>) -> Result<Ended, RpcError> {
        let mut answer = self
            .call(
                "plugin.HandleEvent",
                Value::map([("InstanceId", Value::Int(instance)), ("EventName", Value::str(phase))]),
            )
            .await?;
        loop {
            let event = answer.get("EventId").cloned().unwrap_or(Value::Nil);
            let data = answer.get("Data").unwrap_or(&Value::Nil);
            if data.as_str() == Some("ret") {
                return Ok(Ended::Returned);
            }
            let method = data
                .get("Method")
                .and_then(Value::as_str)
                .ok_or_else(|| RpcError::Io(format!("the server sent an event step that is not a PDK call: {data}")))?
                .to_string();
            let args = match data.get("Args") {
                Some(Value::Array(args)) => args.clone(),
                _ => Vec::new(),
            };
            let (step, result) = match pdk(&method, &args) {
                Ok(Outcome::Exit(response)) => return Ok(Ended::Exit(response)),
                Ok(Outcome::Value(value)) => (pdk::step_method(&method), value),
                Err(error) => ("plugin.StepError", Value::Str(error)),
            };
            answer = self
                .call(step, Value::map([("EventId", event), ("Data", result)]))
                .await?;
        }
    }
}
