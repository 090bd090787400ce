//! Client HTTP/2 connections, served with the `h2` codec directly (hyper's
//! HTTP/2 server gives no say over when a stream's frames leave the codec;
//! see h2_body.rs for why that matters and what happens instead).
//!
//! Each accepted stream gets a task that runs the request through the proxy
//! and, beside it, moves the request body's frames out of the codec into
//! the stream's inbox. The connection's own loop accepts streams, sends
//! keep-alive and flow-control pings, and sends GOAWAY at the connection's
//! age or when Strait stops.

use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;
use http::header::{HeaderValue, DATE};
use http::{Request, Response};
use http_body::Body;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::watch;
use tokio::time::timeout;

use crate::pipeline::body::ProxyBody;
use crate::pipeline::handler::{handle, strip_hop_by_hop, ConnInfo};
use crate::wire::coalesce::{coalesced, Coalesced, Flushing};
use crate::wire::conn::{ClientLimits, Retire};
use crate::wire::h2_body::{data_frame_budget, inbox, send_body, PingEvent, Pinger, SEND_BUFFER};
use crate::Shared;

/// Serve one client HTTP/2 connection until it closes, Strait stops, or its
/// age is reached (then GOAWAY and `max_connection_age_grace` to finish).
pub async fn serve<IO>(io: IO, info: ConnInfo, shared: Arc<Shared>, shutdown: watch::Receiver<bool>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // What the codec writes in a turn goes out in one write (coalesce.rs).
    let (io, flusher) = coalesced(io);
    let kept = flusher.clone();
    let aged = Flushing::new(drive(io, info, shared, shutdown), flusher).await;
    if aged {
        if let Some((io, unsent)) = kept.into_io() {
            linger(io, unsent).await;
        }
    }
}

/// How long a connection closed at its age keeps reading what the client
/// still sends.
const LINGER: Duration = Duration::from_secs(2);

/// A lingering close, as nginx's: a client that opened a stream just as the
/// GOAWAY left has it on the wire, and a close with it unread would be a
/// reset, which the client meets as a write error ("broken pipe") before it
/// reads the GOAWAY that says the stream was never processed. So the rest
/// of what the codec wrote goes out, then the end of the stream (FIN), and
/// what the client sends is read and dropped until it closes too (or
/// [`LINGER`] passes): the client reads the GOAWAY and a clean end, and
/// retries the refused stream elsewhere.
async fn linger<IO: AsyncRead + AsyncWrite + Unpin>(mut io: IO, unsent: Vec<u8>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _ = timeout(LINGER, async {
        io.write_all(&unsent).await?;
        io.shutdown().await?;
        let mut sink = [0u8; 4096];
        while io.read(&mut sink).await? > 0 {}
        Ok::<_, std::io::Error>(())
    })
    .await;
}

/// Serves the connection; true when it ended at its age (GOAWAY, then the
/// streams in flight finished or the grace passed).
async fn drive<IO>(io: Coalesced<IO>, info: ConnInfo, shared: Arc<Shared>, mut shutdown: watch::Receiver<bool>) -> bool
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let limits = shared.limits();
    let limits: &ClientLimits = &limits;
    let settings = &limits.http2;
    let mut builder = h2::server::Builder::new();
    builder
        .initial_window_size(settings.initial_stream_window)
        .initial_connection_window_size(settings.initial_connection_window)
        .max_frame_size(settings.max_frame_size)
        .max_header_list_size(limits.max_header_bytes as u32)
        .max_concurrent_streams(limits.http2_max_concurrent_streams)
        .max_pending_accept_reset_streams(settings.max_pending_accept_reset_streams)
        .max_local_error_reset_streams(Some(settings.max_local_error_reset_streams))
        .max_send_buffer_size(SEND_BUFFER)
        .data_frame_budget(data_frame_budget(settings.initial_connection_window));
    let mut conn = match timeout(limits.header_timeout, builder.handshake::<_, Bytes>(io)).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(error)) => {
            tracing::debug!(%error, client = %info.client, "HTTP/2 handshake failed");
            return false;
        }
        Err(_) => return false,
    };
    let retire = Retire::new(limits);
    let info = Arc::new(info);
    let received = Arc::new(AtomicU64::new(0));
    let mut pinger = conn
        .ping_pong()
        .map(|pong| Pinger::new(pong, settings, received.clone()));
    let due = retire.due(limits);
    let mut due = pin!(due);
    let far = tokio::time::Instant::now() + Duration::from_secs(86400 * 365);
    let mut grace = pin!(tokio::time::sleep_until(far));
    let mut draining = false;
    let mut graced = false;
    loop {
        tokio::select! {
            accepted = conn.accept() => match accepted {
                Some(Ok((request, respond))) => {
                    retire.count_request();
                    spawn_stream(request, respond, info.clone(), shared.clone(), received.clone());
                }
                Some(Err(error)) => {
                    tracing::debug!(?error, "client connection ended with an error");
                    break;
                }
                None => break,
            },
            _ = crate::stopped(&mut shutdown), if !draining => {
                draining = true;
                conn.graceful_shutdown();
            }
            _ = &mut due, if !draining => {
                // GOAWAY with the last stream id; streams in flight finish within the grace.
                draining = true;
                graced = true;
                conn.graceful_shutdown();
                grace.as_mut().reset(tokio::time::Instant::now() + limits.max_connection_age_grace);
            }
            _ = &mut grace, if graced => break,
            event = poll_fn(|cx| pinger.as_mut().map_or(Poll::Pending, |p| p.poll_event(cx))) => match event {
                PingEvent::TimedOut => {
                    tracing::debug!(client = %info.client, "keep-alive ping not answered; closing");
                    break;
                }
                PingEvent::Window(window) => {
                    conn.set_target_window_size(window);
                    let _ = conn.set_initial_window_size(window);
                }
            },
        }
    }
    graced
}

fn spawn_stream(
    request: Request<RecvStream>,
    respond: SendResponse<Bytes>,
    info: Arc<ConnInfo>,
    shared: Arc<Shared>,
    received: Arc<AtomicU64>,
) {
    tokio::spawn(async move {
        let (parts, recv) = request.into_parts();
        let (body, mut pump) = inbox(recv, &parts.headers, received);
        let body = body.map_or_else(crate::pipeline::body::empty, crate::pipeline::body::boxed);
        let request = Request::from_parts(parts, body);
        // The request's handling is a future of kilobytes: boxed, it is
        // written once, where inline the task would copy it whole when
        // spawned and again when it completes.
        let mut work = crate::pipeline::handler::pin_in_place(|| async move {
            let (mut response, fields) = handle(Box::new(request), &info, &shared).await;
            if let Some(fields) = fields {
                fields.insert(response.headers_mut());
            }
            respond_with(respond, response).await;
        });
        poll_fn(|cx| {
            if let Some(running) = pump.as_mut() {
                if running.poll(cx).is_ready() {
                    pump = None;
                }
            }
            work.as_mut().poll(cx)
        })
        .await;
    });
}

/// Send `response` on the stream: its head, then its body as the client's
/// window allows.
async fn respond_with(mut respond: SendResponse<Bytes>, response: Response<ProxyBody>) {
    let (mut parts, body) = response.into_parts();
    // HTTP/2 forbids connection-specific fields (RFC 9113 §8.2.2).
    strip_hop_by_hop(&mut parts.headers);
    if !parts.headers.contains_key(DATE) {
        parts.headers.insert(DATE, http_date());
    }
    let end = body.is_end_stream();
    let head = Response::from_parts(parts, ());
    let send = match respond.send_response(head, end) {
        Ok(send) => send,
        Err(error) => {
            tracing::debug!(%error, "response head not sent");
            return;
        }
    };
    if !end {
        send_body(body, send).await;
    }
}

/// The `Date` header's value, formatted once a second per thread.
pub(crate) fn http_date() -> HeaderValue {
    thread_local! {
        static CACHED: std::cell::RefCell<(u64, HeaderValue)> =
            const { std::cell::RefCell::new((u64::MAX, HeaderValue::from_static(""))) };
    }
    let now = std::time::SystemTime::now();
    let second = now.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    CACHED.with(|cached| {
        let mut cached = cached.borrow_mut();
        if cached.0 != second {
            let formatted = httpdate::fmt_http_date(now);
            cached.1 = HeaderValue::from_str(&formatted).unwrap_or_else(|_| HeaderValue::from_static(""));
            cached.0 = second;
        }
        cached.1.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_budget_covers_a_window_of_8_byte_frames() {
        assert_eq!(data_frame_budget(1 << 20) / 256, 131_072);
        assert_eq!(data_frame_budget(65_535) / 256, 8191);
        assert_eq!(data_frame_budget(1), 100 * 256);
        // A whole window of frames of any size from 8 bytes up fits: n-byte frames
        // cost 256 - n each, and a window holds window / n of them.
        let window = 1usize << 20;
        for n in 8..256 {
            assert!(
                window / n * (256 - n) <= data_frame_budget(window as u32),
                "{n}-byte frames"
            );
        }
    }
}
