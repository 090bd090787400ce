//! `cassandra_ssl = on`: TLS to every Cassandra node with the node's own
//! rustls (the ring provider the rest of Strait uses; the driver's TLS
//! would bring a second crypto library).
//!
//! The driver speaks plaintext to a forwarder on the loopback interface,
//! one per Cassandra node, which opens a TLS connection to that node for
//! each connection it accepts and copies both ways. The driver reaches the
//! forwarders through its address translation: the contact points are
//! given as their forwarders' addresses, and every node it learns of
//! (`system.peers`) is translated to its forwarder, made on first sight.
//! `cassandra_ssl_verify` checks each node's certificate against the
//! trusted roots (the system's, or `SSL_CERT_FILE`) and its name: a contact
//! point's host name, a discovered node's IP address.
//!
//! A forwarder accepts connections from this host only (127.0.0.1); what
//! it forwards still has to log in (`cassandra_username`/`password`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use rustls::pki_types::ServerName;
use scylla::errors::TranslationError;
use scylla::policies::address_translator::{AddressTranslator, UntranslatedPeer};
use tokio::net::{TcpListener, TcpStream};

use crate::ClientTls;

/// The forwarders of one session, by the node address they reach.
pub(crate) struct Forwarders {
    tls: ClientTls,
    by_target: Mutex<HashMap<SocketAddr, SocketAddr>>,
    /// The last TLS failure, for the error a session that could not
    /// connect reports (the driver sees only a closed connection).
    last_error: Arc<Mutex<Option<String>>>,
}

impl Forwarders {
    pub(crate) fn new(tls: ClientTls) -> Forwarders {
        Forwarders {
            tls,
            by_target: Mutex::new(HashMap::new()),
            last_error: Arc::default(),
        }
    }

    /// Why the last TLS connection failed, if one did.
    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The local address that reaches `target` over TLS, checked as
    /// `name`; a forwarder is started on the current runtime the first time.
    pub(crate) async fn local_for(&self, target: SocketAddr, name: ServerName<'static>) -> std::io::Result<SocketAddr> {
        if let Some(local) = self.by_target.lock().unwrap_or_else(|p| p.into_inner()).get(&target) {
            return Ok(*local);
        }
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let local = listener.local_addr()?;
        let mut known = self.by_target.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(first) = known.get(&target) {
            // Another task made one meanwhile: keep that one.
            return Ok(*first);
        }
        known.insert(target, local);
        let connector = tokio_rustls::TlsConnector::from(self.tls.0.clone());
        let last_error = self.last_error.clone();
        tokio::spawn(async move {
            loop {
                let inbound = match listener.accept().await {
                    Ok((inbound, _)) => inbound,
                    Err(_) => {
                        // Out of descriptors, most likely: not a busy loop.
                        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let (connector, name, last_error) = (connector.clone(), name.clone(), last_error.clone());
                tokio::spawn(async move {
                    if let Err(error) = forward(inbound, target, connector, name).await {
                        tracing::warn!(%target, %error, "TLS to a Cassandra node failed");
                        *last_error.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(format!("TLS to {target}: {error}"));
                    }
                });
            }
        });
        Ok(local)
    }
}

/// One connection: TLS to `target`, then bytes both ways until either side
/// closes.
async fn forward(
    mut inbound: TcpStream,
    target: SocketAddr,
    connector: tokio_rustls::TlsConnector,
    name: ServerName<'static>,
) -> std::io::Result<()> {
    let outbound = TcpStream::connect(target).await?;
    let _ = outbound.set_nodelay(true);
    let _ = inbound.set_nodelay(true);
    let mut tls = connector.connect(name, outbound).await?;
    tokio::io::copy_bidirectional(&mut inbound, &mut tls).await?;
    Ok(())
}

/// A contact point's name for certificate checks: its host, without the
/// port (and the brackets of an IPv6 address).
pub(crate) fn host_name(contact_point: &str) -> Option<ServerName<'static>> {
    let host = match contact_point.rsplit_once(':') {
        Some((host, port)) if port.chars().all(|c| c.is_ascii_digit()) => host,
        _ => contact_point,
    };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_string()).ok()
}

#[async_trait::async_trait]
impl AddressTranslator for Forwarders {
    async fn translate_address(&self, peer: &UntranslatedPeer) -> Result<SocketAddr, TranslationError> {
        let target = peer.untranslated_address();
        // The contact points' nodes are known by their forwarders' addresses
        // (those the driver was given): already local.
        if self
            .by_target
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .any(|local| *local == target)
        {
            return Ok(target);
        }
        self.local_for(target, ServerName::IpAddress(target.ip().into()))
            .await
            .map_err(|e| TranslationError::IoError(Arc::new(e)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contact_points_name_their_host() {
        assert_eq!(
            host_name("cassandra.example:9042"),
            ServerName::try_from("cassandra.example").ok()
        );
        assert_eq!(host_name("[::1]:9042"), ServerName::try_from("::1").ok());
        assert_eq!(host_name("10.0.0.1:9042"), ServerName::try_from("10.0.0.1").ok());
    }
}
