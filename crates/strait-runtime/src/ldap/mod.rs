//! A small LDAPv3 client for `ldap-auth`: simple binds over plain TCP,
//! LDAPS, or StartTLS, on connections kept for reuse per server (Kong keeps
//! StartTLS connections in a pool of their own, since they share the port).

mod ber;

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::tls::{client_config, Stream};

/// How the connection is protected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LdapTls {
    Plain,
    /// TLS from the first byte (`ldaps`).
    Ldaps,
    /// A plain connection upgraded by the StartTLS extended operation.
    StartTls,
}

/// The directory server a bind goes to.
#[derive(Debug, Clone)]
pub struct LdapServer {
    pub host: String,
    pub port: u16,
    pub tls: LdapTls,
    /// Check the server's certificate against the system's roots and its name.
    pub verify: bool,
    /// For connecting, the TLS handshake and each exchange.
    pub timeout: Duration,
    /// How long an idle connection is kept for the next bind.
    pub keepalive: Duration,
}

/// What a bind came to.
#[derive(Debug, PartialEq, Eq)]
pub enum Bind {
    /// The directory accepted the name and password.
    Accepted,
    /// Refused: a result code other than success, a TLS handshake that
    /// failed, or an answer that was not a bind response (Kong counts these
    /// as wrong credentials).
    Refused(String),
    /// The server could not be reached or StartTLS failed (Kong's 500).
    Failed(String),
}

/// Idle connections per server (host, port, TLS mode and verification).
type Pool = Mutex<HashMap<(String, u16, LdapTls, bool), Vec<(Box<dyn Stream>, Instant, u32)>>>;

fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(Default::default)
}

/// The most idle connections kept per server.
const IDLE_PER_SERVER: usize = 16;

impl LdapServer {
    fn key(&self) -> (String, u16, LdapTls, bool) {
        (self.host.to_ascii_lowercase(), self.port, self.tls, self.verify)
    }

    fn take_idle(&self) -> Option<(Box<dyn Stream>, u32)> {
        let mut pool = pool().lock().unwrap_or_else(|p| p.into_inner());
        let idle = pool.get_mut(&self.key())?;
        while let Some((stream, since, next_id)) = idle.pop() {
            if since.elapsed() < self.keepalive {
                return Some((stream, next_id));
            }
        }
        None
    }

    fn give_back(&self, stream: Box<dyn Stream>, next_id: u32) {
        if self.keepalive.is_zero() {
            return;
        }
        let mut pool = pool().lock().unwrap_or_else(|p| p.into_inner());
        let idle = pool.entry(self.key()).or_default();
        idle.retain(|(_, since, _)| since.elapsed() < self.keepalive);
        if idle.len() < IDLE_PER_SERVER {
            idle.push((stream, Instant::now(), next_id));
        }
    }

    async fn tls(&self, tcp: TcpStream) -> Result<Box<dyn Stream>, String> {
        let name = ServerName::try_from(self.host.clone()).map_err(|e| format!("server name '{}': {e}", self.host))?;
        let connector = tokio_rustls::TlsConnector::from(client_config(self.verify)?);
        let stream = connector.connect(name, tcp).await.map_err(|e| e.to_string())?;
        Ok(Box::new(stream))
    }

    /// A new connection, TLS as configured, and the next message id.
    async fn connect(&self) -> Result<Result<(Box<dyn Stream>, u32), String>, String> {
        let where_to = format!("{}:{}", self.host, self.port);
        let tcp = TcpStream::connect((self.host.as_str(), self.port))
            .await
            .map_err(|e| format!("failed to connect to {where_to}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let mut next_id = 1;
        let tcp = match self.tls {
            LdapTls::Plain => return Ok(Ok((Box::new(tcp), next_id))),
            LdapTls::Ldaps => tcp,
            LdapTls::StartTls => {
                let mut tcp = tcp;
                let result = exchange(&mut tcp, &ber::start_tls_request(next_id))
                    .await
                    .map_err(|e| format!("StartTLS with {where_to}: {e}"))?;
                next_id += 1;
                if result.op != ber::EXTENDED_RESPONSE || result.code != 0 {
                    return Err(format!(
                        "StartTLS with {where_to} refused (code {}): {}",
                        result.code, result.diagnostic
                    ));
                }
                tcp
            }
        };
        // Kong counts a failed handshake as refused credentials (401).
        Ok(match self.tls(tcp).await {
            Ok(stream) => Ok((stream, next_id)),
            Err(e) => Err(format!("failed to do SSL handshake with {where_to}: {e}")),
        })
    }

    /// A simple bind as `dn` with `password`.
    pub async fn bind(&self, dn: &str, password: &str) -> Bind {
        match tokio::time::timeout(self.timeout, self.bind_within(dn, password)).await {
            Ok(bind) => bind,
            Err(_) => Bind::Failed(format!(
                "{}:{}: no answer within {:?}",
                self.host, self.port, self.timeout
            )),
        }
    }

    async fn bind_within(&self, dn: &str, password: &str) -> Bind {
        // A kept connection that fails is dropped and a new one tried once.
        if let Some((stream, next_id)) = self.take_idle() {
            if let Ok(bind) = self.bind_on(stream, next_id, dn, password).await {
                return bind;
            }
        }
        let (stream, next_id) = match self.connect().await {
            Err(failed) => return Bind::Failed(failed),
            Ok(Err(handshake)) => return Bind::Refused(handshake),
            Ok(Ok(connected)) => connected,
        };
        self.bind_on(stream, next_id, dn, password)
            .await
            .unwrap_or_else(|e| Bind::Refused(format!("{}:{}: {e}", self.host, self.port)))
    }

    /// The bind on `stream`; `Err` when the connection failed.
    async fn bind_on(&self, mut stream: Box<dyn Stream>, id: u32, dn: &str, password: &str) -> Result<Bind, String> {
        let result = exchange(&mut stream, &ber::bind_request(id, dn, password)).await?;
        self.give_back(stream, id.wrapping_add(1).max(1));
        Ok(match (result.op, result.code) {
            (ber::BIND_RESPONSE, 0) => Bind::Accepted,
            (ber::BIND_RESPONSE, code) => Bind::Refused(format!("bind refused (code {code}): {}", result.diagnostic)),
            (op, _) => Bind::Refused(format!("received operation {op:#04x}, expected a bind response")),
        })
    }
}

/// Sends `request` and reads the one message that answers it.
async fn exchange<S: Stream + ?Sized>(stream: &mut S, request: &[u8]) -> Result<ber::LdapResult, String> {
    stream.write_all(request).await.map_err(|e| e.to_string())?;
    stream.flush().await.map_err(|e| e.to_string())?;
    let mut message = Vec::with_capacity(64);
    let mut chunk = [0u8; 512];
    loop {
        if let Some(len) = ber::message_len(&message)? {
            if len > 1 << 20 {
                return Err("an answer over 1 MiB".into());
            }
            if message.len() >= len {
                message.truncate(len);
                return ber::parse_result(&message);
            }
        }
        let read = stream.read(&mut chunk).await.map_err(|e| e.to_string())?;
        if read == 0 {
            return Err("the server closed the connection".into());
        }
        message.extend_from_slice(&chunk[..read]);
    }
}
