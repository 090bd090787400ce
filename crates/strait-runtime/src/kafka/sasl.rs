//! SASL for Kafka: PLAIN (RFC 4616) and SCRAM-SHA-256/512 (RFC 5802,
//! RFC 7677), with Kafka's `tokenauth=true` extension for delegation
//! tokens. The exchange itself runs in `conn.rs` over `SaslHandshake` and
//! `SaslAuthenticate`; this module only builds and checks the messages.

use base64::Engine as _;
use ring::{digest, hmac, pbkdf2};

/// A broker asking more iterations than this is refused (Kafka's own
/// maximum is 16,384): the derivation runs on a proxy worker.
const MAX_ITERATIONS: u32 = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mechanism {
    Plain,
    ScramSha256,
    ScramSha512,
}

impl Mechanism {
    pub fn parse(name: &str) -> Option<Mechanism> {
        match name {
            "PLAIN" => Some(Mechanism::Plain),
            "SCRAM-SHA-256" => Some(Mechanism::ScramSha256),
            "SCRAM-SHA-512" => Some(Mechanism::ScramSha512),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Plain => "PLAIN",
            Mechanism::ScramSha256 => "SCRAM-SHA-256",
            Mechanism::ScramSha512 => "SCRAM-SHA-512",
        }
    }

    fn algorithms(self) -> (pbkdf2::Algorithm, hmac::Algorithm, &'static digest::Algorithm) {
        match self {
            Mechanism::ScramSha512 => (pbkdf2::PBKDF2_HMAC_SHA512, hmac::HMAC_SHA512, &digest::SHA512),
            _ => (pbkdf2::PBKDF2_HMAC_SHA256, hmac::HMAC_SHA256, &digest::SHA256),
        }
    }
}

/// SASL credentials (Kong's `authentication` record).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Sasl {
    pub mechanism: Mechanism,
    pub user: String,
    pub password: String,
    /// The user is a delegation token id and the password its HMAC.
    pub tokenauth: bool,
}

/// PLAIN's single message: no authorization id, the user, the password.
pub fn plain(sasl: &Sasl) -> Vec<u8> {
    let mut out = Vec::with_capacity(sasl.user.len() + sasl.password.len() + 2);
    out.push(0);
    out.extend_from_slice(sasl.user.as_bytes());
    out.push(0);
    out.extend_from_slice(sasl.password.as_bytes());
    out
}

/// A SCRAM exchange in progress.
pub struct Scram {
    mechanism: Mechanism,
    password: String,
    client_nonce: String,
    client_first_bare: String,
    server_signature: Option<Vec<u8>>,
}

fn saslname(user: &str) -> String {
    user.replace('=', "=3D").replace(',', "=2C")
}

impl Scram {
    /// Starts an exchange; the client-first message to send.
    pub fn start(sasl: &Sasl, nonce: String) -> (Scram, Vec<u8>) {
        let mut bare = format!("n={},r={nonce}", saslname(&sasl.user));
        if sasl.tokenauth {
            bare.push_str(",tokenauth=true");
        }
        let first = format!("n,,{bare}");
        let scram = Scram {
            mechanism: sasl.mechanism,
            password: sasl.password.clone(),
            client_nonce: nonce,
            client_first_bare: bare,
            server_signature: None,
        };
        (scram, first.into_bytes())
    }

    /// Answers the server-first message with the client-final one.
    pub fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, String> {
        let server_first = std::str::from_utf8(server_first).map_err(|_| "the server's SCRAM message is not UTF-8")?;
        let mut nonce = None;
        let mut salt = None;
        let mut iterations = None;
        for part in server_first.split(',') {
            match part.split_once('=') {
                Some(("r", v)) => nonce = Some(v),
                Some(("s", v)) => salt = Some(v),
                Some(("i", v)) => iterations = v.parse::<u32>().ok(),
                Some(("e", v)) => return Err(format!("the broker refused: {v}")),
                _ => {}
            }
        }
        let (Some(nonce), Some(salt), Some(iterations)) = (nonce, salt, iterations) else {
            return Err(format!("unexpected SCRAM server-first message {server_first:?}"));
        };
        if !nonce.starts_with(&self.client_nonce) || nonce.len() == self.client_nonce.len() {
            return Err("the broker's SCRAM nonce does not extend ours".into());
        }
        if iterations == 0 || iterations > MAX_ITERATIONS {
            return Err(format!("the broker asked {iterations} SCRAM iterations"));
        }
        let salt = base64::engine::general_purpose::STANDARD
            .decode(salt)
            .map_err(|_| "the broker's SCRAM salt is not base64")?;
        let (kdf, mac, hash) = self.mechanism.algorithms();
        let mut salted = vec![0u8; hash.output_len()];
        let rounds = std::num::NonZeroU32::new(iterations).ok_or("zero SCRAM iterations")?;
        pbkdf2::derive(kdf, rounds, &salt, self.password.as_bytes(), &mut salted);
        let salted = hmac::Key::new(mac, &salted);
        let client_key = hmac::sign(&salted, b"Client Key");
        let stored_key = digest::digest(hash, client_key.as_ref());
        let without_proof = format!("c=biws,r={nonce}");
        let auth_message = format!("{},{server_first},{without_proof}", self.client_first_bare);
        let client_signature = hmac::sign(&hmac::Key::new(mac, stored_key.as_ref()), auth_message.as_bytes());
        let proof: Vec<u8> = client_key
            .as_ref()
            .iter()
            .zip(client_signature.as_ref())
            .map(|(a, b)| a ^ b)
            .collect();
        let server_key = hmac::sign(&salted, b"Server Key");
        let server_signature = hmac::sign(&hmac::Key::new(mac, server_key.as_ref()), auth_message.as_bytes());
        self.server_signature = Some(server_signature.as_ref().to_vec());
        let proof = base64::engine::general_purpose::STANDARD.encode(proof);
        Ok(format!("{without_proof},p={proof}").into_bytes())
    }

    /// Checks the server-final message: the broker proves it knew the
    /// password too.
    pub fn finish(&self, server_final: &[u8]) -> Result<(), String> {
        let server_final = std::str::from_utf8(server_final).map_err(|_| "the server's SCRAM message is not UTF-8")?;
        if let Some(error) = server_final.strip_prefix("e=") {
            return Err(format!("the broker refused: {error}"));
        }
        let signature = server_final
            .split(',')
            .find_map(|p| p.strip_prefix("v="))
            .and_then(|v| base64::engine::general_purpose::STANDARD.decode(v).ok())
            .ok_or_else(|| format!("unexpected SCRAM server-final message {server_final:?}"))?;
        match &self.server_signature {
            Some(expected) if *expected == signature => Ok(()),
            _ => Err("the broker's SCRAM signature is wrong".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scram_sha_256_matches_rfc_7677() {
        // RFC 7677, section 3.
        let sasl = Sasl {
            mechanism: Mechanism::ScramSha256,
            user: "user".into(),
            password: "pencil".into(),
            tokenauth: false,
        };
        let (mut scram, first) = Scram::start(&sasl, "rOprNGfwEbeRWgbNEkqO".into());
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let last = scram
            .respond(b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
            .unwrap();
        assert_eq!(
            String::from_utf8(last).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        scram.finish(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=").unwrap();
        assert!(scram.finish(b"v=AAAA").is_err());
        assert!(scram.finish(b"e=invalid-proof").is_err());
    }

    #[test]
    fn scram_refuses_a_foreign_nonce_and_absurd_iterations() {
        let sasl = Sasl {
            mechanism: Mechanism::ScramSha512,
            user: "a,b=c".into(),
            password: "p".into(),
            tokenauth: true,
        };
        let (mut scram, first) = Scram::start(&sasl, "abc".into());
        assert_eq!(first, b"n,,n=a=2Cb=3Dc,r=abc,tokenauth=true");
        assert!(scram.respond(b"r=xyz123,s=AAAA,i=4096").is_err());
        assert!(scram.respond(b"r=abcdef,s=AAAA,i=100000000").is_err());
        assert!(scram.respond(b"r=abcdef,s=AAAA,i=4096").is_ok());
    }

    #[test]
    fn plain_is_nul_separated() {
        let sasl = Sasl {
            mechanism: Mechanism::Plain,
            user: "alice".into(),
            password: "s3".into(),
            tokenauth: false,
        };
        assert_eq!(plain(&sasl), b"\0alice\0s3");
    }
}
