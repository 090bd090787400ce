//! A real Apache Kafka broker for one test: Kafka 4.1 from Maven Central
//! (scripts/test.sh resolves `org.apache.kafka:kafka_2.13` and its
//! dependencies into `target/tools/kafka/libs`, or `$STRAIT_KAFKA_LIBS`
//! names such a folder) on the JVM, one node in KRaft mode (broker and
//! controller), formatted into a fresh folder with SCRAM users; killed
//! (SIGKILL) and started again on the same ports and data on demand, killed
//! on drop. Topics are read back with kafka-python (tests/kafka/consume.py).
//!
//! Listeners: PLAINTEXT, SASL_PLAINTEXT (PLAIN, SCRAM-SHA-256 and
//! SCRAM-SHA-512 for [`USER`] / [`PASSWORD`]) and, with a certificate, SSL.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::tls::LeafCert;
use crate::{free_port, TempDir};

pub const USER: &str = "alice";
pub const PASSWORD: &str = "alice-secret";

pub struct KafkaBroker {
    pub plaintext: u16,
    pub sasl: u16,
    pub ssl: Option<u16>,
    controller: u16,
    dir: TempDir,
    child: Option<Child>,
    tls: Option<LeafCert>,
}

fn libs() -> PathBuf {
    std::env::var_os("STRAIT_KAFKA_LIBS").map_or_else(
        || Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/kafka/libs"),
        PathBuf::from,
    )
}

fn java(dir: &Path, heap: &str) -> Command {
    let libs = libs();
    assert!(
        libs.join(format!("kafka_2.13-{}.jar", KAFKA_VERSION)).exists(),
        "no Kafka {KAFKA_VERSION} at {} (scripts/test.sh resolves it with mvn, or set STRAIT_KAFKA_LIBS)",
        libs.display()
    );
    let mut command = Command::new("java");
    command
        .arg(format!("-Xmx{heap}"))
        .args(["-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto"])
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            dir.join("log4j2.properties").display()
        ))
        .arg("-cp")
        .arg(format!("{}/*", libs.display()))
        .stdin(Stdio::null());
    command
}

pub const KAFKA_VERSION: &str = "4.1.1";

impl KafkaBroker {
    /// Formats and starts a broker, waiting until it serves metadata.
    pub fn start() -> KafkaBroker {
        KafkaBroker::start_with(None)
    }

    /// With an SSL listener serving `tls`.
    pub fn start_with(tls: Option<LeafCert>) -> KafkaBroker {
        let mut broker = KafkaBroker {
            plaintext: free_port(),
            sasl: free_port(),
            ssl: tls.as_ref().map(|_| free_port()),
            controller: free_port(),
            dir: TempDir::new(),
            child: None,
            tls,
        };
        broker.configure();
        broker.launch();
        broker
    }

    pub fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.plaintext)
    }

    fn configure(&self) {
        let dir = self.dir.path();
        std::fs::write(
            dir.join("log4j2.properties"),
            "rootLogger.level = WARN\nrootLogger.appenderRef.stdout.ref = STDOUT\nappender.stdout.type = Console\n\
             appender.stdout.name = STDOUT\nappender.stdout.layout.type = PatternLayout\n\
             appender.stdout.layout.pattern = [%d] %p %m (%c)%n\n",
        )
        .expect("log4j2 config");
        let mut listeners = format!(
            "PLAINTEXT://127.0.0.1:{},SASL_PLAINTEXT://127.0.0.1:{}",
            self.plaintext, self.sasl
        );
        let mut ssl = String::new();
        if let (Some(port), Some(leaf)) = (self.ssl, &self.tls) {
            listeners.push_str(&format!(",SSL://127.0.0.1:{port}"));
            let pem = dir.join("keystore.pem");
            std::fs::write(&pem, format!("{}{}", leaf.key_pem, leaf.cert_pem)).expect("keystore");
            ssl = format!("ssl.keystore.type=PEM\nssl.keystore.location={}\n", pem.display());
        }
        let jaas = |module: &str, extra: &str| format!("org.apache.kafka.common.security.{module} required{extra};");
        let properties = format!(
            "process.roles=broker,controller\nnode.id=1\n\
             controller.quorum.voters=1@127.0.0.1:{controller}\n\
             listeners={listeners},CONTROLLER://127.0.0.1:{controller}\n\
             advertised.listeners={listeners}\n\
             listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,SSL:SSL\n\
             controller.listener.names=CONTROLLER\ninter.broker.listener.name=PLAINTEXT\n\
             sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512\n\
             listener.name.sasl_plaintext.plain.sasl.jaas.config={plain}\n\
             listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config={scram}\n\
             listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config={scram}\n\
             {ssl}log.dirs={data}\nnum.partitions=3\n\
             offsets.topic.replication.factor=1\ntransaction.state.log.replication.factor=1\n\
             transaction.state.log.min.isr=1\ngroup.initial.rebalance.delay.ms=0\n",
            controller = self.controller,
            plain = jaas("plain.PlainLoginModule", &format!(" user_{USER}=\"{PASSWORD}\"")),
            scram = jaas("scram.ScramLoginModule", ""),
            data = dir.join("data").display(),
        );
        std::fs::write(dir.join("server.properties"), properties).expect("server.properties");
        let output = java(dir, "256m")
            .args([
                "kafka.tools.StorageTool",
                "format",
                "-t",
                "c3RyYWl0LWthZmthLXRzdA",
                "-c",
            ])
            .arg(dir.join("server.properties"))
            .arg("--add-scram")
            .arg(format!("SCRAM-SHA-256=[name={USER},password={PASSWORD}]"))
            .arg("--add-scram")
            .arg(format!("SCRAM-SHA-512=[name={USER},password={PASSWORD}]"))
            .output()
            .unwrap_or_else(|e| panic!("could not run java ({e}); install Java 17 (scripts/test.sh does)"));
        assert!(
            output.status.success(),
            "kafka-storage format failed: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn launch(&mut self) {
        let dir = self.dir.path();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("kafka.log"))
            .expect("kafka log");
        let child = java(dir, "512m")
            .arg("kafka.Kafka")
            .arg(dir.join("server.properties"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("could not run java ({e}); install Java 17 (scripts/test.sh does)"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(90);
        while TcpStream::connect(("127.0.0.1", self.plaintext)).is_err() {
            assert!(
                Instant::now() < deadline,
                "the Kafka broker did not listen on {}: {}",
                self.plaintext,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The broker's log (last 4 KB), for assertion messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("kafka.log")).unwrap_or_default();
        let start = log.len().saturating_sub(4096);
        log.get(start..).unwrap_or(&log).to_string()
    }

    /// SIGKILL the broker (what it acknowledged is in its log files).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        self.launch();
    }

    /// Every message of `topic`, from the start, as kafka-python reads it:
    /// `[{"partition", "offset", "value", "base64"}]` (value as UTF-8 text, and
    /// its exact bytes in base64).
    pub fn messages(&self, topic: &str) -> Vec<Value> {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("kafka").join("consume.py");
        let output = Command::new(crate::llm::python())
            .arg(script)
            .arg(self.bootstrap())
            .arg(topic)
            .output()
            .expect("run the kafka-python consumer (scripts/test.sh installs it into target/tools/venv)");
        assert!(
            output.status.success(),
            "kafka-python consumer failed: {}\n{}",
            String::from_utf8_lossy(&output.stderr),
            self.log_tail()
        );
        serde_json::from_slice::<Vec<Value>>(&output.stdout).expect("consumer output is JSON")
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        self.kill();
    }
}
