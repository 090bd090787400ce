//! One connection to one broker: a task that owns the socket, connects on
//! demand (TCP, TLS, SASL), writes the calls queued to it back to back and
//! hands each answer to its caller (Kafka answers in order on a
//! connection). A broken or silent connection fails every call waiting on
//! it; the next call connects again.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Buf, Bytes, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::sasl::{self, Mechanism, Scram};
use super::wire;
use super::Cluster;
use crate::tls::Stream;

/// A request for the broker: its API, version and body; `None` as the
/// reply channel's answer type means acks = 0 (the broker answers nothing).
pub(super) struct Call {
    pub api_key: i16,
    pub version: i16,
    pub body: BytesMut,
    pub expects_answer: bool,
    pub reply: oneshot::Sender<Result<Bytes, String>>,
}

/// The queue to one broker's connection task.
#[derive(Clone)]
pub(super) struct Link {
    calls: mpsc::Sender<Call>,
}

/// Calls queued to one connection at most (the producer keeps far fewer
/// in flight).
const QUEUE: usize = 64;

impl Link {
    pub fn open(cluster: Arc<Cluster>, host: String, port: u16) -> Link {
        let (calls, queue) = mpsc::channel(QUEUE);
        tokio::spawn(run(cluster, host, port, queue));
        Link { calls }
    }

    /// Sends one call; the broker's answer body (empty when none is due).
    pub async fn call(
        &self,
        api_key: i16,
        version: i16,
        body: BytesMut,
        expects_answer: bool,
    ) -> Result<Bytes, String> {
        let (reply, answer) = oneshot::channel();
        let call = Call {
            api_key,
            version,
            body,
            expects_answer,
            reply,
        };
        self.calls
            .try_send(call)
            .map_err(|_| "too many requests queued to the broker".to_string())?;
        answer
            .await
            .unwrap_or_else(|_| Err("the broker connection closed".into()))
    }

    pub fn is_closed(&self) -> bool {
        self.calls.is_closed()
    }
}

async fn run(cluster: Arc<Cluster>, host: String, port: u16, mut queue: mpsc::Receiver<Call>) {
    // A link nobody calls for this long ends (it is reopened on demand).
    let idle = cluster.keepalive;
    loop {
        let first = match tokio::time::timeout(idle, queue.recv()).await {
            Ok(Some(call)) => call,
            Ok(None) | Err(_) => return,
        };
        let connected = tokio::time::timeout(cluster.timeout, connect(&cluster, &host, port)).await;
        let failure = match connected {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(error)) => Err(error),
            Err(_) => Err(format!(
                "connecting took longer than {} ms",
                cluster.timeout.as_millis()
            )),
        };
        let stream = match failure {
            Ok(stream) => stream,
            Err(error) => {
                let error = format!("broker {host}:{port}: {error}");
                let _ = first.reply.send(Err(error.clone()));
                while let Ok(call) = queue.try_recv() {
                    let _ = call.reply.send(Err(error.clone()));
                }
                continue;
            }
        };
        if let Err(error) = serve(&cluster, stream, first, &mut queue).await {
            tracing::warn!(broker = %format!("{host}:{port}"), %error, "Kafka connection lost");
        }
        if queue.is_closed() {
            return;
        }
    }
}

async fn read_frame(stream: &mut Box<dyn Stream>, buf: &mut BytesMut) -> Result<Bytes, String> {
    loop {
        if buf.len() >= 4 {
            let size = i32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
            if size < 4 || size as usize > wire::MAX_FRAME {
                return Err(format!("the broker sent a frame of {size} bytes"));
            }
            let size = size as usize;
            if buf.len() >= 4 + size {
                buf.advance(4);
                return Ok(buf.split_to(size).freeze());
            }
            buf.reserve(4 + size - buf.len());
        }
        if stream.read_buf(buf).await.map_err(|e| e.to_string())? == 0 {
            return Err("the broker closed the connection".into());
        }
    }
}

/// One request and its answer on a connection nothing else uses yet.
async fn exchange(
    stream: &mut Box<dyn Stream>,
    correlation: i32,
    api_key: i16,
    version: i16,
    body: &[u8],
) -> Result<Bytes, String> {
    stream
        .write_all(&wire::frame(api_key, version, correlation, body))
        .await
        .map_err(|e| e.to_string())?;
    let mut buf = BytesMut::with_capacity(256);
    let mut answer = read_frame(stream, &mut buf).await?;
    if answer.get_i32() != correlation {
        return Err("the broker answered out of order".into());
    }
    Ok(answer)
}

async fn connect(cluster: &Cluster, host: &str, port: u16) -> Result<Box<dyn Stream>, String> {
    let tls = cluster.ssl.then_some(crate::tls::ClientTls {
        server_name: host,
        verify: false,
    });
    let mut stream = crate::tls::connect(host, port, tls).await?;
    if let Some(sasl) = &cluster.sasl {
        authenticate(&mut stream, sasl).await?;
    }
    Ok(stream)
}

fn sasl_error(code: i16, message: Option<String>) -> String {
    format!(
        "SASL authentication failed: {} ({})",
        message.unwrap_or_default(),
        wire::error_name(code)
    )
}

async fn authenticate(stream: &mut Box<dyn Stream>, sasl: &sasl::Sasl) -> Result<(), String> {
    let mechanism = sasl.mechanism.name();
    let answer = exchange(
        stream,
        1,
        wire::SASL_HANDSHAKE,
        wire::SASL_HANDSHAKE_VERSION,
        &wire::sasl_handshake_body(mechanism),
    )
    .await?;
    let (error, offered) = wire::parse_sasl_handshake(&answer).map_err(|e| e.to_string())?;
    if error != 0 {
        return Err(format!(
            "the broker does not offer SASL {mechanism} (it offers {})",
            offered.join(", ")
        ));
    }
    match sasl.mechanism {
        Mechanism::Plain => {
            step(stream, 2, sasl::plain(sasl)).await?;
        }
        Mechanism::ScramSha256 | Mechanism::ScramSha512 => {
            let nonce = format!("{:016x}{:016x}", crate::random::next_u64(), crate::random::next_u64());
            let (mut scram, first) = Scram::start(sasl, nonce);
            let server_first = step(stream, 2, first).await?;
            let last = scram.respond(&server_first)?;
            let server_final = step(stream, 3, last).await?;
            scram.finish(&server_final)?;
        }
    }
    Ok(())
}

/// One `SaslAuthenticate` round: the broker's answer bytes.
async fn step(stream: &mut Box<dyn Stream>, correlation: i32, auth: Vec<u8>) -> Result<Vec<u8>, String> {
    let body = wire::sasl_authenticate_body(&auth);
    let answer = exchange(
        stream,
        correlation,
        wire::SASL_AUTHENTICATE,
        wire::SASL_AUTHENTICATE_VERSION,
        &body,
    )
    .await?;
    let (code, message, auth) = wire::parse_sasl_authenticate(&answer).map_err(|e| e.to_string())?;
    if code != 0 {
        return Err(sasl_error(code, message));
    }
    Ok(auth)
}

type Waiting = VecDeque<(i32, Instant, oneshot::Sender<Result<Bytes, String>>)>;

async fn serve(
    cluster: &Cluster,
    stream: Box<dyn Stream>,
    first: Call,
    queue: &mut mpsc::Receiver<Call>,
) -> Result<(), String> {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut waiting: Waiting = VecDeque::new();
    let mut correlation: i32 = 100;
    let mut out = BytesMut::new();
    let mut input = BytesMut::with_capacity(16 * 1024);
    let mut pending = Some(first);
    let result: Result<(), String> = async {
        loop {
            while let Some(call) = pending.take().or_else(|| queue.try_recv().ok()) {
                correlation = correlation.wrapping_add(1);
                out.extend_from_slice(&wire::frame(call.api_key, call.version, correlation, &call.body));
                if call.expects_answer {
                    waiting.push_back((correlation, Instant::now(), call.reply));
                } else {
                    // acks = 0: written is all the broker will ever say.
                    writer.write_all(&out).await.map_err(|e| e.to_string())?;
                    out.clear();
                    let _ = call.reply.send(Ok(Bytes::new()));
                }
            }
            if !out.is_empty() {
                writer.write_all(&out).await.map_err(|e| e.to_string())?;
                out.clear();
            }
            let overdue = waiting.front().map(|(_, sent, _)| *sent + cluster.timeout);
            let idle = Instant::now() + cluster.keepalive;
            tokio::select! {
                call = queue.recv() => match call {
                    Some(call) => pending = Some(call),
                    None => return Ok(()),
                },
                read = reader.read_buf(&mut input) => {
                    if read.map_err(|e| e.to_string())? == 0 {
                        return Err("the broker closed the connection".into());
                    }
                    while input.len() >= 4 {
                        let size = i32::from_be_bytes([input[0], input[1], input[2], input[3]]);
                        if size < 4 || size as usize > wire::MAX_FRAME {
                            return Err(format!("the broker sent a frame of {size} bytes"));
                        }
                        if input.len() < 4 + size as usize {
                            input.reserve(4 + size as usize - input.len());
                            break;
                        }
                        input.advance(4);
                        let mut answer = input.split_to(size as usize).freeze();
                        let id = answer.get_i32();
                        match waiting.pop_front() {
                            Some((expected, _, reply)) if expected == id => {
                                let _ = reply.send(Ok(answer));
                            }
                            _ => return Err("the broker answered a request nobody sent".into()),
                        }
                    }
                }
                _ = tokio::time::sleep_until(overdue.unwrap_or(idle)) => {
                    if overdue.is_some() {
                        return Err(format!("no answer within {} ms", cluster.timeout.as_millis()));
                    }
                    return Ok(());
                }
            }
        }
    }
    .await;
    if let Err(error) = &result {
        for (_, _, reply) in waiting.drain(..) {
            let _ = reply.send(Err(error.clone()));
        }
    }
    result
}
