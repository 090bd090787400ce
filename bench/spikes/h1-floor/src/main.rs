//! The HTTP/1.1 floor spike: a reverse proxy on one tokio current-thread runtime with
//! httparse and hand-written framing instead of hyper, doing the per-request work Strait's
//! proxy path must do for Kong compatibility: parse the request head, add `X-Forwarded-*`,
//! `X-Real-IP` and `Via`, drop hop-by-hop headers, send it on a kept-alive upstream
//! connection (one per client connection), parse the response head, add `Via` and Kong's
//! latency headers, and relay a `Content-Length` body. No routing, no plugins, no chunked
//! bodies, no timeouts: it measures what a codec of our own could cost, not a product.
//!
//!     h1-floor LISTEN_ADDR UPSTREAM_ADDR

use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authorization",
];

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 {
        eprintln!("usage: h1-floor LISTEN_ADDR UPSTREAM_ADDR");
        std::process::exit(2);
    }
    let listen: SocketAddr = args[1].parse().expect("listen address");
    let upstream: SocketAddr = args[2].parse().expect("upstream address");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("runtime");
    runtime.block_on(async move {
        let listener = TcpListener::bind(listen).await.expect("bind");
        loop {
            let Ok((client, peer)) = listener.accept().await else {
                continue;
            };
            let _ = client.set_nodelay(true);
            tokio::spawn(async move {
                let _ = serve(client, peer, upstream).await;
            });
        }
    });
}

fn is_hop_by_hop(name: &str) -> bool {
    HOP_BY_HOP.iter().any(|h| name.eq_ignore_ascii_case(h))
}

/// Appends `headers` as written, without hop-by-hop ones and those `drop` names.
fn copy_headers(out: &mut Vec<u8>, headers: &[httparse::Header<'_>], drop: impl Fn(&str) -> bool) {
    for header in headers {
        if is_hop_by_hop(header.name) || drop(header.name) {
            continue;
        }
        out.extend_from_slice(header.name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(header.value);
        out.extend_from_slice(b"\r\n");
    }
}

fn content_length(headers: &[httparse::Header<'_>]) -> Result<usize, ()> {
    for header in headers {
        if header.name.eq_ignore_ascii_case("content-length") {
            return std::str::from_utf8(header.value)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .ok_or(());
        }
        if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(());
        }
    }
    Ok(0)
}

/// Reads until `buf` holds a complete head; `None` at a clean end of stream.
async fn read_more(stream: &mut TcpStream, buf: &mut Vec<u8>) -> io::Result<bool> {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(8192);
    }
    Ok(stream.read_buf(buf).await? > 0)
}

async fn serve(mut client: TcpStream, peer: SocketAddr, upstream: SocketAddr) -> io::Result<()> {
    let mut origin = TcpStream::connect(upstream).await?;
    origin.set_nodelay(true)?;
    let peer_ip = peer.ip().to_string();
    let local_port = client.local_addr()?.port();
    let mut inbuf: Vec<u8> = Vec::with_capacity(8192);
    let mut upbuf: Vec<u8> = Vec::with_capacity(8192);
    let mut out: Vec<u8> = Vec::with_capacity(8192);
    loop {
        // Request head.
        let (head_len, body_len) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut request = httparse::Request::new(&mut headers);
            match request.parse(&inbuf) {
                Ok(httparse::Status::Complete(len)) => {
                    let Ok(body_len) = content_length(request.headers) else {
                        client
                            .write_all(b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\n\r\n")
                            .await?;
                        return Ok(());
                    };
                    out.clear();
                    out.extend_from_slice(request.method.unwrap_or("GET").as_bytes());
                    out.push(b' ');
                    out.extend_from_slice(request.path.unwrap_or("/").as_bytes());
                    out.extend_from_slice(b" HTTP/1.1\r\n");
                    let host = request
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("host"))
                        .map_or(&b""[..], |h| h.value);
                    copy_headers(&mut out, request.headers, |name| name.starts_with("X-Forwarded-"));
                    let host_name = host.split(|b| *b == b':').next().unwrap_or(b"");
                    out.extend_from_slice(b"X-Forwarded-For: ");
                    out.extend_from_slice(peer_ip.as_bytes());
                    out.extend_from_slice(b"\r\nX-Forwarded-Proto: http\r\nX-Forwarded-Host: ");
                    out.extend_from_slice(host_name);
                    out.extend_from_slice(format!("\r\nX-Forwarded-Port: {local_port}").as_bytes());
                    out.extend_from_slice(b"\r\nX-Forwarded-Path: ");
                    out.extend_from_slice(request.path.unwrap_or("/").as_bytes());
                    out.extend_from_slice(b"\r\nX-Real-IP: ");
                    out.extend_from_slice(peer_ip.as_bytes());
                    out.extend_from_slice(b"\r\nVia: 1.1 strait\r\n\r\n");
                    break (len, body_len);
                }
                Ok(httparse::Status::Partial) => {
                    if !read_more(&mut client, &mut inbuf).await? {
                        return Ok(());
                    }
                }
                Err(_) => {
                    client
                        .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                        .await?;
                    return Ok(());
                }
            }
        };
        let started = Instant::now();
        inbuf.drain(..head_len);
        // Request body (Content-Length), then send.
        while inbuf.len() < body_len {
            if !read_more(&mut client, &mut inbuf).await? {
                return Ok(());
            }
        }
        out.extend_from_slice(&inbuf[..body_len]);
        inbuf.drain(..body_len);
        origin.write_all(&out).await?;
        let sent = Instant::now();

        // Response head.
        let (head_len, body_len) = loop {
            let mut headers = [httparse::EMPTY_HEADER; 64];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(&upbuf) {
                Ok(httparse::Status::Complete(len)) => {
                    let Ok(body_len) = content_length(response.headers) else {
                        return Ok(());
                    };
                    let upstream_ms = sent.elapsed().as_millis();
                    out.clear();
                    out.extend_from_slice(
                        format!(
                            "HTTP/1.1 {} {}\r\n",
                            response.code.unwrap_or(502),
                            response.reason.unwrap_or("")
                        )
                        .as_bytes(),
                    );
                    copy_headers(&mut out, response.headers, |_| false);
                    let proxy_ms = (sent - started).as_millis();
                    out.extend_from_slice(
                        format!(
                            "Via: 1.1 strait\r\nX-Kong-Upstream-Latency: {upstream_ms}\r\n\
                             X-Kong-Proxy-Latency: {proxy_ms}\r\n\r\n"
                        )
                        .as_bytes(),
                    );
                    break (len, body_len);
                }
                Ok(httparse::Status::Partial) => {
                    if !read_more(&mut origin, &mut upbuf).await? {
                        return Ok(());
                    }
                }
                Err(_) => return Ok(()),
            }
        };
        upbuf.drain(..head_len);
        while upbuf.len() < body_len {
            if !read_more(&mut origin, &mut upbuf).await? {
                return Ok(());
            }
        }
        out.extend_from_slice(&upbuf[..body_len]);
        upbuf.drain(..body_len);
        client.write_all(&out).await?;
    }
}
