//! `Upgrade` requests through the proxy: a WebSocket echo round trip against a real WebSocket
//! server (Python's `websockets`, installed by scripts/test.sh), the tunnel's idle timeout,
//! and an upgrade the upstream declines.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use strait_e2e::declarative::{config, route, service};
use strait_e2e::{Gateway, GatewayOptions, RawConn, Upstream, UpstreamKind};
use tokio::io::AsyncReadExt;

/// `websockets`' echo server on a free port; killed on drop.
struct EchoServer {
    child: Child,
    port: u16,
}

const ECHO: &str = r#"
import asyncio
from websockets.asyncio.server import serve
async def echo(ws):
    async for message in ws:
        await ws.send(message)
async def main():
    async with serve(echo, "127.0.0.1", 0) as server:
        print(list(server.sockets)[0].getsockname()[1], flush=True)
        await asyncio.Future()
asyncio.run(main())
"#;

impl EchoServer {
    fn start() -> EchoServer {
        let mut child = Command::new(strait_e2e::prometheus::python())
            .args(["-c", ECHO])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python websockets echo server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("the echo server's port");
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("no port from the echo server: {line:?}"));
        EchoServer { child, port }
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// RFC 6455's sample key and the accept value a server must answer it with.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

fn handshake(path: &str) -> String {
    format!(
        "GET {path} HTTP/1.1\r\nHost: example.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n\r\n"
    )
}

/// A masked text frame, as a client must send it.
fn text_frame(text: &str) -> Vec<u8> {
    let payload = text.as_bytes();
    assert!(payload.len() < 126);
    let mask = [0x37u8, 0xfa, 0x21, 0x3d];
    let mut frame = vec![0x81, 0x80 | payload.len() as u8];
    frame.extend_from_slice(&mask);
    frame.extend(payload.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    frame
}

async fn read_exact(conn: &mut RawConn, n: usize) -> Vec<u8> {
    let mut out = vec![0u8; n];
    tokio::time::timeout(Duration::from_secs(10), conn.stream_mut().read_exact(&mut out))
        .await
        .expect("frame within 10 s")
        .expect("frame bytes");
    out
}

async fn gateway_to(url: &str, read_timeout_ms: u64) -> Gateway {
    let gw = Gateway::start(GatewayOptions::new()).await;
    let mut upstream = service("ws", url, vec![route("ws", &["/ws"])]);
    upstream["read_timeout"] = json!(read_timeout_ms);
    gw.apply(&config(vec![upstream])).await;
    gw
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_echo_round_trip_and_idle_timeout() {
    let echo = EchoServer::start();
    let gw = gateway_to(&format!("http://127.0.0.1:{}", echo.port), 1500).await;

    let mut conn = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    conn.write(handshake("/ws/chat").as_bytes()).await.expect("handshake");
    let head = conn.read_head(Duration::from_secs(10)).await.expect("101");
    let lower = head.to_ascii_lowercase();
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(lower.contains("upgrade: websocket"), "{head}");
    assert!(lower.contains("connection: upgrade"), "{head}");
    assert!(
        head.contains(ACCEPT),
        "the upstream's accept value is passed on: {head}"
    );

    for message in ["hello through strait", "a second message"] {
        conn.write(&text_frame(message)).await.expect("frame");
        let header = read_exact(&mut conn, 2).await;
        assert_eq!(header[0], 0x81, "an unfragmented text frame");
        assert_eq!(header[1] as usize, message.len(), "unmasked, short length");
        let payload = read_exact(&mut conn, message.len()).await;
        assert_eq!(String::from_utf8_lossy(&payload), message);
    }

    // Nothing moves for read_timeout (1.5 s): the gateway closes the tunnel.
    let started = std::time::Instant::now();
    let rest = conn.read_until_close(Duration::from_secs(10)).await;
    assert!(rest.closed, "the tunnel stayed open past its idle timeout");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1300) && waited < Duration::from_secs(5),
        "closed after {waited:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_the_upstream_declines_is_a_plain_response() {
    // The echo upstream answers HTTP, not 101: the client gets that answer and its
    // connection stays HTTP (a second request on it works).
    let up = Upstream::start(UpstreamKind::Http1).await;
    let gw = gateway_to(&up.url("http"), 60_000).await;
    let mut conn = RawConn::connect(gw.proxy_addr()).await.expect("connect");
    conn.write(handshake("/ws/echo").as_bytes()).await.expect("handshake");
    let head = conn.read_head(Duration::from_secs(10)).await.expect("response");
    assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
    let rest = conn.read_until_close(Duration::from_millis(300)).await;
    assert!(!rest.closed, "closed after a declined upgrade");
    // The echo upstream shows the headers it received: the upgrade reached it.
    let echoed = format!("{head}{}", String::from_utf8_lossy(&rest.bytes)).to_ascii_lowercase();
    assert!(
        echoed.contains("\"upgrade\"") && echoed.contains("websocket"),
        "the upgrade headers reach the upstream: {echoed}"
    );
    conn.write(b"GET /ws/echo HTTP/1.1\r\nHost: example.test\r\n\r\n")
        .await
        .expect("second request");
    let second = conn.read_head(Duration::from_secs(10)).await.expect("second response");
    assert!(second.starts_with("HTTP/1.1 200 "), "{second}");
}
