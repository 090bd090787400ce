//! A real OpenLDAP `slapd` for one test: a directory `dc=example,dc=com`
//! with the users given, loaded with `slapadd`, served on a free port for
//! plain LDAP and StartTLS and another for LDAPS (a self-signed
//! certificate for `localhost`), killed on drop. `$STRAIT_SLAPD_DIR` names
//! where `slapd` and `slapadd` are, else `/usr/sbin` (scripts/test.sh
//! installs Debian's `slapd`).

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{free_port, TempDir};

pub const BASE_DN: &str = "dc=example,dc=com";

pub struct Slapd {
    /// Plain LDAP, and StartTLS.
    pub port: u16,
    /// LDAP over TLS.
    pub ldaps_port: u16,
    dir: TempDir,
    child: Option<Child>,
}

fn tool(name: &str) -> PathBuf {
    let dir = std::env::var_os("STRAIT_SLAPD_DIR").map_or_else(|| PathBuf::from("/usr/sbin"), PathBuf::from);
    dir.join(name)
}

impl Slapd {
    /// A directory holding `cn=<name>` with `userPassword` for each `(name, password)`.
    pub fn start(users: &[(&str, &str)]) -> Slapd {
        let dir = TempDir::new();
        let root = dir.path();
        let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .expect("slapd certificate");
        std::fs::write(root.join("cert.pem"), cert.cert.pem()).expect("cert");
        std::fs::write(root.join("key.pem"), cert.key_pair.serialize_pem()).expect("key");
        std::fs::create_dir_all(root.join("db")).expect("db dir");
        let conf = format!(
            "include /etc/ldap/schema/core.schema\n\
             include /etc/ldap/schema/cosine.schema\n\
             include /etc/ldap/schema/inetorgperson.schema\n\
             modulepath /usr/lib/ldap\n\
             moduleload back_mdb\n\
             pidfile {root}/slapd.pid\n\
             TLSCertificateFile {root}/cert.pem\n\
             TLSCertificateKeyFile {root}/key.pem\n\
             database mdb\n\
             suffix \"{BASE_DN}\"\n\
             rootdn \"cn=admin,{BASE_DN}\"\n\
             rootpw admin-secret\n\
             directory {root}/db\n\
             maxsize 10485760\n",
            root = root.display()
        );
        std::fs::write(root.join("slapd.conf"), conf).expect("slapd.conf");
        let mut ldif =
            format!("dn: {BASE_DN}\nobjectClass: dcObject\nobjectClass: organization\no: Example\ndc: example\n");
        for (name, password) in users {
            ldif.push_str(&format!(
                "\ndn: cn={name},{BASE_DN}\nobjectClass: inetOrgPerson\ncn: {name}\nsn: {name}\nuserPassword: {password}\n"
            ));
        }
        std::fs::write(root.join("data.ldif"), ldif).expect("ldif");
        let loaded = Command::new(tool("slapadd"))
            .arg("-f")
            .arg(root.join("slapd.conf"))
            .arg("-l")
            .arg(root.join("data.ldif"))
            .output()
            .unwrap_or_else(|e| panic!("could not run slapadd ({e}); install Debian's slapd (scripts/test.sh does)"));
        assert!(
            loaded.status.success(),
            "slapadd: {}",
            String::from_utf8_lossy(&loaded.stderr)
        );
        let mut slapd = Slapd {
            port: free_port(),
            ldaps_port: free_port(),
            dir,
            child: None,
        };
        slapd.launch();
        slapd
    }

    fn launch(&mut self) {
        let root = self.dir.path();
        let log = std::fs::File::create(root.join("slapd.log")).expect("slapd log");
        let urls = format!("ldap://127.0.0.1:{}/ ldaps://127.0.0.1:{}/", self.port, self.ldaps_port);
        let child = Command::new(tool("slapd"))
            .arg("-f")
            .arg(root.join("slapd.conf"))
            .args(["-h", &urls, "-d", "0"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("could not start slapd ({e}); install Debian's slapd (scripts/test.sh does)"));
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        for port in [self.port, self.ldaps_port] {
            while TcpStream::connect(("127.0.0.1", port)).is_err() {
                assert!(
                    Instant::now() < deadline,
                    "slapd did not listen on {port}: {}",
                    std::fs::read_to_string(root.join("slapd.log")).unwrap_or_default()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }

    /// Stop the server (binds then fail to connect).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Start it again on the same ports.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        self.stop();
    }
}
