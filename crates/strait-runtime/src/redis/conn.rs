//! One pipelined connection: the task that owns the socket, writes queued
//! commands in batches, and hands replies back in order.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::resp::{self, Value};
use super::{RedisConfig, RedisError, Request};

const MIN_BACKOFF: Duration = Duration::from_millis(50);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// A connection nobody used for this long closes (it reopens on demand).
const IDLE: Duration = Duration::from_secs(300);
/// Commands written in one batch at most.
const BATCH: usize = 256;

use crate::tls::Stream;

/// Logs a connection's failures at most once a second.
struct Complaints {
    last: Option<Instant>,
    quiet: u64,
}

impl Complaints {
    fn log(&mut self, config: &RedisConfig, error: &str) {
        let now = Instant::now();
        if self.last.is_some_and(|last| now - last < Duration::from_secs(1)) {
            self.quiet += 1;
            return;
        }
        tracing::error!(
            redis = %config.label(),
            error,
            suppressed = self.quiet,
            "Redis connection failed"
        );
        self.last = Some(now);
        self.quiet = 0;
    }
}

pub(super) async fn run(config: Arc<RedisConfig>, mut requests: mpsc::Receiver<Request>) {
    let mut backoff = MIN_BACKOFF;
    let mut complaints = Complaints { last: None, quiet: 0 };
    loop {
        // Connect only when there is something to send.
        let first = match tokio::time::timeout(IDLE, requests.recv()).await {
            Ok(Some(request)) => request,
            Ok(None) | Err(_) => return,
        };
        let stream = match tokio::time::timeout(config.timeout, connect(&config)).await {
            Ok(Ok(stream)) => stream,
            failed => {
                let error = match failed {
                    Ok(Err(error)) => error,
                    _ => format!("connecting took longer than {} ms", config.timeout.as_millis()),
                };
                complaints.log(&config, &error);
                let _ = first
                    .reply
                    .send(Err(RedisError::Unavailable(config.label(), error.clone())));
                // Until the next try, every call fails at once.
                let retry = Instant::now() + backoff;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                loop {
                    tokio::select! {
                        request = requests.recv() => match request {
                            Some(request) => {
                                let _ = request.reply.send(Err(RedisError::Unavailable(config.label(), error.clone())));
                            }
                            None => return,
                        },
                        _ = tokio::time::sleep_until(retry) => break,
                    }
                }
                continue;
            }
        };
        backoff = MIN_BACKOFF;
        match serve(&config, stream, first, &mut requests).await {
            Ok(()) => return,
            Err(error) => complaints.log(&config, &error),
        }
    }
}

async fn connect(config: &RedisConfig) -> Result<Box<dyn Stream>, String> {
    let tls = config.ssl.then(|| crate::tls::ClientTls {
        server_name: config.server_name.as_deref().unwrap_or(&config.host),
        verify: config.ssl_verify,
    });
    let mut stream = crate::tls::connect(&config.host, config.port, tls).await?;
    // AUTH and SELECT, pipelined, before anything else.
    let mut hello = Vec::new();
    let mut expected = 0;
    if let Some(password) = config.password.as_deref().filter(|p| !p.is_empty()) {
        match config.username.as_deref().filter(|u| !u.is_empty()) {
            Some(user) => resp::encode(&mut hello, &[b"AUTH", user.as_bytes(), password.as_bytes()]),
            None => resp::encode(&mut hello, &[b"AUTH", password.as_bytes()]),
        }
        expected += 1;
    }
    if config.database != 0 {
        resp::encode(&mut hello, &[b"SELECT", config.database.to_string().as_bytes()]);
        expected += 1;
    }
    if expected > 0 {
        stream.write_all(&hello).await.map_err(|e| e.to_string())?;
        let mut buf = BytesMut::with_capacity(256);
        let mut answered = 0;
        while answered < expected {
            match resp::parse(&mut buf).map_err(|e| e.to_string())? {
                Some(Value::Error(message)) => return Err(message),
                Some(_) => answered += 1,
                None => {
                    if stream.read_buf(&mut buf).await.map_err(|e| e.to_string())? == 0 {
                        return Err("the server closed the connection".into());
                    }
                }
            }
        }
    }
    Ok(stream)
}

type Waiting = VecDeque<(Instant, oneshot::Sender<Result<Value, RedisError>>)>;

/// Serve one connection until the queue closes (`Ok`) or the connection
/// breaks (`Err`, every waiting caller told).
async fn serve(
    config: &RedisConfig,
    stream: Box<dyn Stream>,
    first: Request,
    requests: &mut mpsc::Receiver<Request>,
) -> Result<(), String> {
    let (mut reader, mut writer) = tokio::io::split(stream);
    let mut waiting: Waiting = VecDeque::new();
    let mut out = first.frame;
    waiting.push_back((Instant::now(), first.reply));
    let mut input = BytesMut::with_capacity(16 * 1024);
    let result: Result<(), String> = async {
        loop {
            if !out.is_empty() {
                writer.write_all(&out).await.map_err(|e| e.to_string())?;
                out.clear();
            }
            let overdue = waiting.front().map(|(sent, _)| *sent + config.timeout);
            let idle = Instant::now() + IDLE;
            tokio::select! {
                request = requests.recv() => {
                    let Some(request) = request else { return Ok(()) };
                    let now = Instant::now();
                    out.extend_from_slice(&request.frame);
                    waiting.push_back((now, request.reply));
                    for _ in 1..BATCH {
                        let Ok(request) = requests.try_recv() else { break };
                        out.extend_from_slice(&request.frame);
                        waiting.push_back((now, request.reply));
                    }
                }
                read = reader.read_buf(&mut input) => {
                    if read.map_err(|e| e.to_string())? == 0 {
                        return Err("the server closed the connection".into());
                    }
                    while let Some(value) = resp::parse(&mut input).map_err(|e| e.to_string())? {
                        let Some((_, reply)) = waiting.pop_front() else {
                            return Err("a reply nobody asked for".into());
                        };
                        let _ = reply.send(Ok(value));
                    }
                }
                _ = tokio::time::sleep_until(overdue.unwrap_or(idle)) => {
                    if overdue.is_some() {
                        return Err(format!("no reply within {} ms", config.timeout.as_millis()));
                    }
                    return Ok(());
                }
            }
        }
    }
    .await;
    if let Err(error) = &result {
        for (_, reply) in waiting.drain(..) {
            let _ = reply.send(Err(RedisError::Unavailable(config.label(), error.clone())));
        }
    }
    result
}
