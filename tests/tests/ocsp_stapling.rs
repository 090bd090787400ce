//! OCSP stapling against a real responder (`openssl ocsp`, Debian's OpenSSL): a certificate
//! that names the responder gets its `good` answer stapled, as a TLS client asking for it
//! (`openssl s_client -status`) sees; a revoked certificate gets none; `ssl_stapling = off`
//! staples nothing.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::json;
use strait_e2e::{free_port, Gateway, GatewayOptions, TempDir};

fn openssl(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("run openssl");
    assert!(
        out.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A leaf for `name` signed by the CA in `dir`, naming the responder on `port`; its serial (hex).
fn leaf(dir: &Path, name: &str, port: u16) -> String {
    let ext = format!("subjectAltName=DNS:{name}\nauthorityInfoAccess=OCSP;URI:http://127.0.0.1:{port}\n");
    std::fs::write(dir.join(format!("{name}.ext")), ext).expect("ext file");
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            &format!("{name}.key"),
            "-out",
            &format!("{name}.csr"),
            "-subj",
            &format!("/CN={name}"),
        ],
    );
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            &format!("{name}.csr"),
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &format!("{name}.pem"),
            "-days",
            "2",
            "-extfile",
            &format!("{name}.ext"),
        ],
    );
    // The chain a server sends: the leaf, then its issuer.
    let chain = std::fs::read_to_string(dir.join(format!("{name}.pem"))).unwrap()
        + &std::fs::read_to_string(dir.join("ca.pem")).unwrap();
    std::fs::write(dir.join(format!("{name}-chain.pem")), chain).unwrap();
    let serial = openssl(dir, &["x509", "-in", &format!("{name}.pem"), "-noout", "-serial"]);
    serial.trim().trim_start_matches("serial=").to_string()
}

struct Responder(Child);

impl Drop for Responder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The CA, two leaves (`localhost` good, `revoked.test` revoked) and `openssl ocsp` answering for them.
fn pki(dir: &Path) -> (u16, Responder) {
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "2",
            "-subj",
            "/CN=Strait test OCSP CA",
        ],
    );
    let port = free_port();
    let good = leaf(dir, "localhost", port);
    let revoked = leaf(dir, "revoked.test", port);
    let index = format!(
        "V\t301231235959Z\t\t{good}\tunknown\t/CN=localhost\nR\t301231235959Z\t261101000000Z\t{revoked}\tunknown\t/CN=revoked.test\n"
    );
    std::fs::write(dir.join("index.txt"), index).unwrap();
    std::fs::write(dir.join("index.txt.attr"), "unique_subject = no\n").unwrap();
    let child = Command::new("openssl")
        .args([
            "ocsp",
            "-index",
            "index.txt",
            "-port",
            &port.to_string(),
            "-rsigner",
            "ca.pem",
            "-rkey",
            "ca.key",
            "-CA",
            "ca.pem",
            "-nmin",
            "60",
        ])
        .current_dir(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start openssl ocsp");
    (port, Responder(child))
}

/// A gateway whose default certificate is the `localhost` leaf made by [`pki`].
fn serving_localhost(dir: &Path) -> GatewayOptions {
    let path = |file: &str| dir.join(file).display().to_string();
    GatewayOptions::new()
        .setting("ssl_cert", &path("localhost-chain.pem"))
        .setting("ssl_cert_key", &path("localhost.key"))
}

/// What `openssl s_client -status` prints of the staple for `name`.
fn staple_seen(port: u16, name: &str) -> String {
    let out = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{port}"),
            "-servername",
            name,
            "-status",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run openssl s_client");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

async fn wait_for(port: u16, name: &str, wanted: &str) -> String {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let seen = staple_seen(port, name);
        if seen.contains(wanted) {
            return seen;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{name}: no {wanted:?} in:\n{seen}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_answer_is_stapled_and_a_revoked_certificate_gets_none() {
    let dir = TempDir::new();
    let (_, _responder) = pki(dir.path());
    let gw = Gateway::start(serving_localhost(dir.path())).await;
    let revoked_chain = std::fs::read_to_string(dir.path().join("revoked.test-chain.pem")).unwrap();
    let revoked_key = std::fs::read_to_string(dir.path().join("revoked.test.key")).unwrap();
    let reply = gw
        .apply(&json!({
            "_format_version": "3.0",
            "certificates": [{ "cert": revoked_chain, "key": revoked_key, "snis": [{ "name": "revoked.test" }] }],
        }))
        .await;
    assert_eq!(reply.status, 201, "{}", reply.text());
    let port = gw.proxy_tls_addr().port();
    let seen = wait_for(port, "localhost", "OCSP Response Status: successful").await;
    assert!(seen.contains("Cert Status: good"), "{seen}");
    assert!(seen.contains("Next Update:"), "{seen}");
    // The certificate entity is looked at within a scan (10 s): its responder says revoked,
    // and nothing is stapled to it.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(25);
    while !gw.log_tail().contains("the certificate is revoked") {
        assert!(tokio::time::Instant::now() < deadline, "{}", gw.log_tail());
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let seen = staple_seen(port, "revoked.test");
    assert!(seen.contains("OCSP response: no response sent"), "{seen}");
    // The good one still is.
    assert!(staple_seen(port, "localhost").contains("Cert Status: good"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stapling_off_staples_nothing() {
    let dir = TempDir::new();
    let (_, _responder) = pki(dir.path());
    let gw = Gateway::start(serving_localhost(dir.path()).setting("ssl_stapling", "off")).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let seen = staple_seen(gw.proxy_tls_addr().port(), "localhost");
    assert!(seen.contains("OCSP response: no response sent"), "{seen}");
}
