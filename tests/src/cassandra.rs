//! A real Apache Cassandra for the Cassandra store's tests: Cassandra 5.0
//! from Maven Central (`org.apache.cassandra:cassandra-all`; scripts/test.sh
//! resolves it and its dependencies into `target/tools/cassandra/libs`, or
//! `$STRAIT_CASSANDRA_LIBS` names such a folder) on Java 17, one node.
//!
//! With `$STRAIT_TEST_CASSANDRA` (`host:port`, set by scripts/test.sh, which
//! starts one server for the whole run) tests share that server, each in a
//! keyspace of its own; without it each [`CassandraServer::start`] starts a
//! private one, killed on drop.
//!
//! The server takes TLS on its native port beside plaintext
//! (`client_encryption_options` with `optional: true`), with a certificate
//! for `127.0.0.1` and `localhost` from a CA of its own, written to
//! `ca.pem` in its folder ([`CassandraServer::ca_file`]).
//!
//! The server runs with Cassandra's guardrails against what the Kong field
//! report warns of: `allow_filtering_enabled: false` and
//! `secondary_indexes_enabled: false` refuse any `ALLOW FILTERING` query and
//! any secondary index. Guardrails do not bind superusers, so Strait logs
//! in as [`USER`], a plain role.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, random_token, TempDir};

pub const CASSANDRA_VERSION: &str = "5.0.6";
/// The role Strait logs in as (not a superuser).
pub const USER: &str = "strait";
pub const PASSWORD: &str = "strait-secret";

/// Java 17's module openings Cassandra 5.0 needs (its jvm17-server.options).
const JVM_OPENS: &[&str] = &[
    "java.base/jdk.internal.misc",
    "java.base/jdk.internal.ref",
    "java.base/sun.nio.ch",
    "java.management.rmi/com.sun.jmx.remote.internal.rmi",
    "java.rmi/sun.rmi.registry",
    "java.rmi/sun.rmi.server",
    "java.sql/java.sql",
];
const JVM_OPENS_DEEP: &[&str] = &[
    "java.base/java.lang.module",
    "java.base/jdk.internal.loader",
    "java.base/jdk.internal.ref",
    "java.base/jdk.internal.reflect",
    "java.base/jdk.internal.math",
    "java.base/jdk.internal.module",
    "java.base/jdk.internal.util.jar",
    "jdk.management/com.sun.management.internal",
    "java.base/java.io",
    "java.base/java.nio",
    "java.base/sun.nio.ch",
    "java.base/java.lang",
    "java.base/java.util",
    "java.base/java.util.concurrent",
    "java.base/java.util.concurrent.atomic",
    "java.base/java.net",
    "java.base/java.lang.reflect",
];

fn libs() -> PathBuf {
    std::env::var_os("STRAIT_CASSANDRA_LIBS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/cassandra/libs"),
        PathBuf::from,
    )
}

/// One Cassandra node: a private one, or the run's shared one.
pub struct CassandraServer {
    pub port: u16,
    /// The keyspace this test's store uses (fresh for every start).
    pub keyspace: String,
    /// The CA of the server's TLS certificate (PEM).
    pub ca_file: PathBuf,
    private: Option<(TempDir, Child)>,
}

impl CassandraServer {
    /// The run's server (`$STRAIT_TEST_CASSANDRA`), else a private one;
    /// either way a keyspace name nobody used.
    pub fn start() -> CassandraServer {
        let keyspace = format!("strait_{}", random_token().to_ascii_lowercase());
        if let Ok(address) = std::env::var("STRAIT_TEST_CASSANDRA") {
            let port = address
                .rsplit(':')
                .next()
                .and_then(|p| p.parse().ok())
                .unwrap_or_else(|| panic!("STRAIT_TEST_CASSANDRA={address:?}: expected host:port"));
            // scripts/test.sh starts it in $STRAIT_TEST_CASSANDRA_DIR.
            let dir = std::env::var_os("STRAIT_TEST_CASSANDRA_DIR")
                .map(PathBuf::from)
                .unwrap_or_default();
            return CassandraServer {
                port,
                keyspace,
                ca_file: dir.join("ca.pem"),
                private: None,
            };
        }
        let dir = TempDir::new();
        let port = free_port();
        let child = launch(dir.path(), port);
        CassandraServer {
            port,
            keyspace,
            ca_file: dir.path().join("ca.pem"),
            private: Some((dir, child)),
        }
    }

    pub fn contact_point(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The `cassandra_*` settings of this server and keyspace, as
    /// `STRAIT_*` variables.
    pub fn env(&self) -> Vec<(String, String)> {
        [
            ("STRAIT_DATABASE", "cassandra".to_string()),
            ("STRAIT_CASSANDRA_CONTACT_POINTS", "127.0.0.1".to_string()),
            ("STRAIT_CASSANDRA_PORT", self.port.to_string()),
            ("STRAIT_CASSANDRA_KEYSPACE", self.keyspace.clone()),
            ("STRAIT_CASSANDRA_USERNAME", USER.to_string()),
            ("STRAIT_CASSANDRA_PASSWORD", PASSWORD.to_string()),
            ("STRAIT_CASSANDRA_TIMEOUT", "10000".to_string()),
            // Schema changes queue behind every other test's on a shared
            // node: give them time.
            ("STRAIT_CASSANDRA_SCHEMA_CONSENSUS_TIMEOUT", "60000".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// `strait migrations <args>` on this keyspace: exit code and output.
    pub fn migrations(&self, args: &[&str]) -> (Option<i32>, String) {
        let out = std::process::Command::new(crate::process::strait_bin())
            .arg("migrations")
            .args(args)
            .envs(self.env())
            .output()
            .expect("run strait migrations");
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    }

    /// `strait migrations bootstrap`, which must succeed.
    pub fn bootstrap(&self) {
        // Idempotent: a try that timed out on a busy node is tried again.
        let mut last = String::new();
        for _ in 0..3 {
            let (code, text) = self.migrations(&["bootstrap"]);
            if code == Some(0) {
                return;
            }
            last = text;
        }
        panic!("strait migrations bootstrap failed three times: {last}");
    }

    /// The store's settings for this server and keyspace, as a library
    /// user builds them (consistency ONE: a one-node cluster).
    pub fn config(&self) -> strait_store::cassandra::CassandraConfig {
        use strait_store::cassandra::{CassandraConfig, LbPolicy, Replication};
        CassandraConfig {
            contact_points: vec![self.contact_point()],
            keyspace: self.keyspace.clone(),
            consistency: scylla::statement::Consistency::One,
            lb_policy: LbPolicy::RequestRoundRobin,
            local_datacenter: None,
            replication: Replication::Simple(1),
            username: Some(USER.into()),
            password: Some(PASSWORD.into()),
            timeout: Duration::from_secs(10),
            schema_consensus_timeout: Duration::from_secs(60),
            tls: None,
        }
    }

    /// A server with this test's keyspace bootstrapped through the library
    /// (no `strait` process), and its settings.
    pub fn bootstrapped() -> (CassandraServer, strait_store::cassandra::CassandraConfig) {
        let server = CassandraServer::start();
        let config = server.config();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        runtime.block_on(async {
            let session = strait_store::cassandra::connect(&config).await.expect("connect");
            strait_store::cassandra::schema::bootstrap(&session, &config)
                .await
                .expect("bootstrap");
        });
        (server, config)
    }

    /// A node's settings for this keyspace (`database = cassandra`).
    pub fn node_options(&self) -> crate::GatewayOptions {
        let mut options = crate::GatewayOptions::new();
        for (key, value) in self.env() {
            let key = key.trim_start_matches("STRAIT_").to_ascii_lowercase();
            options = options.setting(&key, &value);
        }
        options
    }
}

impl Drop for CassandraServer {
    fn drop(&mut self) {
        match self.private.as_mut() {
            Some((_, child)) => {
                let _ = child.kill();
                let _ = child.wait();
            }
            // On the shared node: drop the keyspace, so the node never
            // holds more tables than the tests running at once use (each
            // table costs it memory; hundreds slow every schema change).
            None => {
                let _ = self.migrations(&["reset", "--yes"]);
            }
        }
    }
}

/// Starts a node in `dir` on `port` and waits until [`USER`] can log in.
pub fn launch(dir: &Path, port: u16) -> Child {
    let libs = libs();
    assert!(
        libs.join(format!("cassandra-all-{CASSANDRA_VERSION}.jar")).exists(),
        "no Cassandra {CASSANDRA_VERSION} at {} (scripts/test.sh resolves it with mvn, or set STRAIT_CASSANDRA_LIBS)",
        libs.display()
    );
    let storage = free_port();
    let data = dir.join("data");
    // TLS beside plaintext on the native port: a key and chain in one PEM.
    let ca = crate::tls::TestCa::new("strait-test-cassandra-ca");
    let leaf = ca.issue(&["127.0.0.1", "localhost"]);
    std::fs::write(dir.join("ca.pem"), ca.cert_pem()).expect("ca.pem");
    std::fs::write(dir.join("server.pem"), format!("{}{}", leaf.key_pem, leaf.cert_pem)).expect("server.pem");
    let yaml = format!(
        "cluster_name: strait-test\nnum_tokens: 1\npartitioner: org.apache.cassandra.dht.Murmur3Partitioner\n\
         seed_provider:\n  - class_name: org.apache.cassandra.locator.SimpleSeedProvider\n    parameters:\n      \
         - seeds: \"127.0.0.1:{storage}\"\n\
         listen_address: 127.0.0.1\nrpc_address: 127.0.0.1\nstorage_port: {storage}\nnative_transport_port: {port}\n\
         endpoint_snitch: SimpleSnitch\ncommitlog_sync: periodic\ncommitlog_sync_period: 10000ms\n\
         data_file_directories: [{d}/data]\ncommitlog_directory: {d}/commitlog\n\
         saved_caches_directory: {d}/caches\nhints_directory: {d}/hints\ncdc_raw_directory: {d}/cdc\n\
         start_native_transport: true\nauthenticator: PasswordAuthenticator\nauthorizer: AllowAllAuthorizer\n\
         allow_filtering_enabled: false\nsecondary_indexes_enabled: false\nmaterialized_views_enabled: false\n\
         sasi_indexes_enabled: false\nbatch_size_fail_threshold: 50KiB\nauto_snapshot: false\npaxos_variant: v2\n\
         client_encryption_options:\n  enabled: true\n  optional: true\n  ssl_context_factory:\n    \
         class_name: org.apache.cassandra.security.PEMBasedSslContextFactory\n  keystore: {pem}\n",
        d = data.display(),
        pem = dir.join("server.pem").display()
    );
    std::fs::write(dir.join("cassandra.yaml"), yaml).expect("cassandra.yaml");
    std::fs::write(
        dir.join("logback.xml"),
        "<configuration><appender name=\"OUT\" class=\"ch.qos.logback.core.ConsoleAppender\"><encoder>\
         <pattern>%level %date %msg%n</pattern></encoder></appender><root level=\"WARN\">\
         <appender-ref ref=\"OUT\"/></root></configuration>",
    )
    .expect("logback.xml");
    let log = std::fs::File::create(dir.join("cassandra.log")).expect("cassandra log");
    let mut command = Command::new("java");
    command.args([
        "-Xms256m",
        "-Xmx1g",
        "-XX:+UseSerialGC",
        "-Djdk.attach.allowAttachSelf=true",
    ]);
    for module in JVM_OPENS {
        command.arg("--add-exports").arg(format!("{module}=ALL-UNNAMED"));
    }
    for module in JVM_OPENS_DEEP {
        command.arg("--add-opens").arg(format!("{module}=ALL-UNNAMED"));
    }
    let child = command
        .arg(format!(
            "-Dcassandra.config=file://{}",
            dir.join("cassandra.yaml").display()
        ))
        .arg("-Dcassandra-foreground=yes")
        .arg(format!(
            "-Dlogback.configurationFile={}",
            dir.join("logback.xml").display()
        ))
        .arg(format!("-Dcassandra.jmx.local.port={}", free_port()))
        .arg("-Dcassandra.skip_wait_for_gossip_to_settle=0")
        .arg("-Dcassandra.superuser_setup_delay_ms=0")
        .arg("-cp")
        .arg(format!("{}/*", libs.display()))
        .arg("org.apache.cassandra.service.CassandraDaemon")
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("log"))
        .stderr(log)
        .spawn()
        .unwrap_or_else(|e| panic!("could not run java ({e}); install Java 17 (scripts/test.sh does)"));
    let deadline = Instant::now() + Duration::from_secs(120);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "Cassandra did not listen on {port}: {}",
            std::fs::read_to_string(dir.join("cassandra.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    create_role(port, dir);
    child
}

/// Creates [`USER`] as the default superuser (cassandra/cassandra), which
/// the server sets up a moment after it listens.
fn create_role(port: u16, dir: &Path) {
    // Its own thread: a test may call this from inside its runtime, where
    // another runtime can neither block nor be dropped.
    let dir = dir.to_path_buf();
    std::thread::spawn(move || create_role_here(port, &dir))
        .join()
        .expect("creating the test role");
}

fn create_role_here(port: u16, dir: &Path) {
    let statement =
        format!("CREATE ROLE IF NOT EXISTS {USER} WITH PASSWORD = '{PASSWORD}' AND LOGIN = true AND SUPERUSER = false");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let outcome: Result<(), String> = runtime.block_on(async {
            let session = scylla::client::session_builder::SessionBuilder::new()
                .known_node(format!("127.0.0.1:{port}"))
                .user("cassandra", "cassandra")
                .build()
                .await
                .map_err(|e| e.to_string())?;
            session
                .query_unpaged(statement.as_str(), ())
                .await
                .map_err(|e| e.to_string())?;
            Ok(())
        });
        match outcome {
            Ok(()) => return,
            Err(error) => assert!(
                Instant::now() < deadline,
                "could not create the test role: {error}\n{}",
                std::fs::read_to_string(dir.join("cassandra.log")).unwrap_or_default()
            ),
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}
