//! TLS to PostgreSQL with rustls (`pg_ssl`): tokio-postgres's TLS traits
//! over a `tokio_rustls` client stream.
//!
//! One connector type serves every connection, with TLS or without, so the
//! pool, the listener and the migrations share one connection type. With
//! `pg_ssl = on` the session asks for TLS (`SSLRequest`) and fails when the
//! server declines it: an `on` that silently fell back to plaintext would
//! leak the password it was meant to protect.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio_postgres::tls::{ChannelBinding, MakeTlsConnect, TlsConnect};

pub use crate::ClientTls as PgTls;

/// Makes the TLS step of one connection (never used without `pg_ssl`: the
/// session's `sslmode` is then `disable`).
#[derive(Clone)]
pub(crate) struct MakeRustls(pub Option<PgTls>);

impl<S> MakeTlsConnect<S> for MakeRustls
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type TlsConnect = RustlsConnect;
    type Error = io::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<RustlsConnect, io::Error> {
        // A name rustls cannot check fails the TLS step, not a plaintext
        // session that never reaches it.
        let name = ServerName::try_from(domain.to_string()).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("pg_host {domain:?} as a TLS name: {e}"),
            )
        });
        Ok(RustlsConnect {
            config: self.0.clone(),
            name,
        })
    }
}

pub(crate) struct RustlsConnect {
    config: Option<PgTls>,
    name: Result<ServerName<'static>, io::Error>,
}

impl<S> TlsConnect<S> for RustlsConnect
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Stream = RustlsStream<S>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<RustlsStream<S>>> + Send>>;

    fn connect(self, stream: S) -> Self::Future {
        Box::pin(async move {
            let config = self
                .config
                .ok_or_else(|| io::Error::other("TLS asked for without pg_ssl"))?;
            let connector = tokio_rustls::TlsConnector::from(config.0);
            let stream = connector.connect(self.name?, stream).await?;
            Ok(RustlsStream(stream))
        })
    }
}

/// A TLS session to the server.
pub(crate) struct RustlsStream<S>(tokio_rustls::client::TlsStream<S>);

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for RustlsStream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for RustlsStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> tokio_postgres::tls::TlsStream for RustlsStream<S> {
    /// No channel binding: SCRAM authenticates without the `-PLUS` variant,
    /// as libpq does with `channel_binding = prefer` when a client lacks it.
    fn channel_binding(&self) -> ChannelBinding {
        ChannelBinding::none()
    }
}
