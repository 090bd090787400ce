//! An HTTP/3 load generator for the performance lab's `http3` scenario (Debian's
//! h2load is built without QUIC): `h3load HOST:PORT SNI PATH CONNECTIONS STREAMS SECONDS`.
//! Each connection keeps STREAMS requests in flight (a GET, its whole response, the next)
//! for SECONDS, on one thread; the server's certificate is not checked (loopback only).
//! Prints one JSON line: requests, errors, non_2xx, duration_s, and latency percentiles.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes};
use serde_json::json;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() != 6 {
        eprintln!("usage: h3load HOST:PORT SNI PATH CONNECTIONS STREAMS SECONDS");
        std::process::exit(2);
    }
    let addr: std::net::SocketAddr = args[0].parse().expect("HOST:PORT");
    let sni = args[1].clone();
    let path = args[2].clone();
    let connections: usize = args[3].parse().expect("CONNECTIONS");
    let streams: usize = args[4].parse().expect("STREAMS");
    let seconds: f64 = args[5].parse().expect("SECONDS");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let report = runtime.block_on(run(
        addr,
        sni,
        path,
        connections,
        streams,
        Duration::from_secs_f64(seconds),
    ));
    println!("{report}");
}

#[derive(Default)]
struct Tally {
    requests: u64,
    errors: u64,
    non_2xx: u64,
    latencies_us: Vec<u32>,
}

async fn run(
    addr: std::net::SocketAddr,
    sni: String,
    path: String,
    connections: usize,
    streams: usize,
    duration: Duration,
) -> serde_json::Value {
    let mut endpoint = quinn::Endpoint::client("0.0.0.0:0".parse().unwrap()).expect("client endpoint");
    endpoint.set_default_client_config(client_config());
    let uri: http::Uri = format!("https://{sni}{path}").parse().expect("a valid path");
    let started = Instant::now();
    let until = started + duration;
    let mut tasks = Vec::new();
    for _ in 0..connections {
        let endpoint = endpoint.clone();
        let sni = sni.clone();
        let uri = uri.clone();
        tasks.push(tokio::spawn(async move {
            connection(endpoint, addr, sni, uri, streams, until).await
        }));
    }
    let mut total = Tally::default();
    for task in tasks {
        if let Ok(tally) = task.await {
            total.requests += tally.requests;
            total.errors += tally.errors;
            total.non_2xx += tally.non_2xx;
            total.latencies_us.extend(tally.latencies_us);
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    endpoint.close(0u32.into(), b"");
    total.latencies_us.sort_unstable();
    let at = |p: f64| -> u32 {
        if total.latencies_us.is_empty() {
            return 0;
        }
        let index = ((p / 100.0) * (total.latencies_us.len() - 1) as f64).round() as usize;
        total.latencies_us[index]
    };
    json!({
        "requests": total.requests, "errors": total.errors, "non_2xx": total.non_2xx,
        "duration_s": elapsed,
        "p50_us": at(50.0), "p90_us": at(90.0), "p99_us": at(99.0), "p99_9_us": at(99.9),
        "max_us": total.latencies_us.last().copied().unwrap_or(0),
    })
}

async fn connection(
    endpoint: quinn::Endpoint,
    addr: std::net::SocketAddr,
    sni: String,
    uri: http::Uri,
    streams: usize,
    until: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let Ok(connecting) = endpoint.connect(addr, &sni) else {
        tally.errors += 1;
        return tally;
    };
    let Ok(conn) = connecting.await else {
        tally.errors += 1;
        return tally;
    };
    let quic = conn.clone();
    let Ok((mut driver, sender)) = h3::client::new(h3_quinn::Connection::new(conn)).await else {
        tally.errors += 1;
        return tally;
    };
    let drive = tokio::spawn(async move {
        let _ = std::future::poll_fn(|cx| driver.poll_close(cx)).await;
    });
    let mut loops = Vec::new();
    for _ in 0..streams {
        let mut sender = sender.clone();
        let uri = uri.clone();
        loops.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            while Instant::now() < until {
                let began = Instant::now();
                match one(&mut sender, &uri).await {
                    Ok(status) => {
                        tally.requests += 1;
                        if !(200..300).contains(&status) {
                            tally.non_2xx += 1;
                        }
                        tally
                            .latencies_us
                            .push(began.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    }
                    Err(_) => {
                        tally.errors += 1;
                        break;
                    }
                }
            }
            tally
        }));
    }
    for task in loops {
        if let Ok(part) = task.await {
            tally.requests += part.requests;
            tally.errors += part.errors;
            tally.non_2xx += part.non_2xx;
            tally.latencies_us.extend(part.latencies_us);
        }
    }
    quic.close(0x100u32.into(), b"");
    drive.abort();
    tally
}

async fn one(
    sender: &mut h3::client::SendRequest<h3_quinn::OpenStreams, Bytes>,
    uri: &http::Uri,
) -> Result<u16, Box<dyn std::error::Error + Send + Sync>> {
    let request = http::Request::get(uri.clone()).body(())?;
    let mut stream = sender.send_request(request).await?;
    stream.finish().await?;
    let response = stream.recv_response().await?;
    while let Some(mut chunk) = stream.recv_data().await? {
        chunk.advance(chunk.remaining());
    }
    Ok(response.status().as_u16())
}

/// TLS 1.3 with ALPN h3 and no certificate check: the lab's gateways use a
/// throwaway certificate on loopback.
fn client_config() -> quinn::ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .expect("TLS 1.3")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AnyCertificate(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let crypto = quinn::crypto::rustls::QuicClientConfig::try_from(tls).expect("QUIC client config");
    let mut config = quinn::ClientConfig::new(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport.max_idle_timeout(Some(Duration::from_secs(30).try_into().expect("idle timeout")));
    config.transport_config(Arc::new(transport));
    config
}

#[derive(Debug)]
struct AnyCertificate(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}
