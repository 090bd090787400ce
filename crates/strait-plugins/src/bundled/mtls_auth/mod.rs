//! `mtls-auth` (Kong Enterprise's plugin): the client's TLS certificate,
//! verified by the listener (`ssl_verify_client`, `ssl_client_ca`), names
//! the consumer: its subject's common name, then each subject alternative
//! name, matched against consumers by `consumer_by` (`username`,
//! `custom_id`). `ca_certificates` narrows which CAs a route accepts;
//! `anonymous` and Kong's "logical OR" combine it with other auth plugins.

mod schema;

/// `mtls-auth` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "mtls-auth",
    priority: 1600,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(MtlsAuth::from_config(config)?)),
};

use std::sync::{Arc, RwLock};

use serde_json::{Map, Value};
use uuid::Uuid;

use crate::auth::x509::{self, ClientCert};
use crate::auth::{combine, set_consumer, unauthorized};
use crate::config::ConfigReader;
use crate::context::{AuthenticatedCredential, RequestCtx};
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

#[derive(Debug, Clone, Copy, PartialEq)]
enum ConsumerBy {
    Username,
    CustomId,
}

/// A CA certificate's id, the PEM text read, and its subject (DER).
type CaSubject = (Uuid, String, Option<Vec<u8>>);

#[derive(Debug)]
pub struct MtlsAuth {
    ca_certificates: Vec<Uuid>,
    skip_consumer_lookup: bool,
    consumer_by: Vec<ConsumerBy>,
    anonymous: Option<String>,
    default_consumer: Option<String>,
    group_by_dn: bool,
    /// Subjects of `ca_certificates`, read once per CA certificate text:
    /// (id, the PEM they were read from, the subject).
    ca_subjects: RwLock<Vec<CaSubject>>,
}

impl MtlsAuth {
    pub fn from_config(config: &Map<String, Value>) -> Result<MtlsAuth, PluginError> {
        let c = ConfigReader::new(config);
        let ca_certificates = c
            .strings("ca_certificates")?
            .iter()
            .map(|id| {
                Uuid::parse_str(id)
                    .map_err(|_| PluginError::invalid("ca_certificates", format!("'{id}' is not a uuid")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let mut consumer_by = Vec::new();
        let names = match config.get("consumer_by") {
            None | Some(Value::Null) => vec!["username".to_string(), "custom_id".to_string()],
            Some(_) => c.strings("consumer_by")?,
        };
        for name in names {
            consumer_by.push(match name.as_str() {
                "username" => ConsumerBy::Username,
                "custom_id" => ConsumerBy::CustomId,
                other => {
                    return Err(PluginError::invalid(
                        "consumer_by",
                        format!("'{other}': expected one of: username, custom_id"),
                    ))
                }
            });
        }
        match c.string("revocation_check_mode")?.as_deref() {
            None | Some("SKIP") | Some("IGNORE_CA_ERROR") => {}
            Some("STRICT") => {
                return Err(PluginError::invalid(
                    "revocation_check_mode",
                    "STRICT is not supported: Strait does not check OCSP or CRLs (use SKIP or IGNORE_CA_ERROR)",
                ))
            }
            Some(other) => {
                return Err(PluginError::invalid(
                    "revocation_check_mode",
                    format!("'{other}': expected one of: SKIP, IGNORE_CA_ERROR, STRICT"),
                ))
            }
        }
        let group_by_dn = match c.string("authenticated_group_by")?.as_deref() {
            None | Some("CN") => false,
            Some("DN") => true,
            Some(other) => {
                return Err(PluginError::invalid(
                    "authenticated_group_by",
                    format!("'{other}': expected one of: CN, DN"),
                ))
            }
        };
        Ok(MtlsAuth {
            ca_certificates,
            skip_consumer_lookup: c.bool("skip_consumer_lookup", false)?,
            consumer_by,
            anonymous: c.string("anonymous")?.filter(|a| !a.is_empty()),
            default_consumer: c.string("default_consumer")?.filter(|a| !a.is_empty()),
            group_by_dn,
            ca_subjects: RwLock::new(Vec::new()),
        })
    }

    /// Whether one of `ca_certificates` issued `cert` (any CA the listener
    /// trusts when the list is empty).
    fn issued_by_allowed_ca(&self, ctx: &RequestCtx<'_>, cert: &ClientCert) -> bool {
        self.ca_certificates.is_empty()
            || self.ca_certificates.iter().any(|id| {
                ctx.directory
                    .ca_certificate_pem(*id)
                    .is_some_and(|pem| self.ca_subject(*id, pem).is_some_and(|s| s == cert.issuer))
            })
    }

    /// The subject of CA certificate `id` whose text is `pem`, read once
    /// per text (a changed certificate is read again).
    fn ca_subject(&self, id: Uuid, pem: &str) -> Option<Vec<u8>> {
        let known = self.ca_subjects.read().unwrap_or_else(|e| e.into_inner());
        if let Some((_, _, subject)) = known.iter().find(|(known, text, _)| *known == id && text == pem) {
            return subject.clone();
        }
        drop(known);
        let subject = x509::first_pem_der(pem).and_then(|der| x509::subject(&der));
        let mut known = self.ca_subjects.write().unwrap_or_else(|e| e.into_inner());
        known.retain(|(known, _, _)| *known != id);
        known.push((id, pem.to_string(), subject.clone()));
        subject
    }

    fn authenticate<'a>(&self, ctx: &mut RequestCtx<'a>) -> Result<(), PluginResponse> {
        let Some(cert) = ctx.client_cert.clone() else {
            return Err(unauthorized(401, "No required TLS certificate was sent", None));
        };
        if !self.issued_by_allowed_ca(ctx, &cert) {
            return Err(unauthorized(401, "TLS certificate failed verification", None));
        }
        let credential = AuthenticatedCredential::new(
            Uuid::from_bytes(cert.fingerprint),
            cert.subject_cn.as_deref().unwrap_or(&cert.subject_dn),
            "mtls-auth",
        );
        if self.skip_consumer_lookup {
            let group = if self.group_by_dn {
                Some(cert.subject_dn.clone())
            } else {
                cert.subject_cn.clone()
            };
            ctx.authenticated_groups = group.map(|g| vec![g]);
            ctx.credential = Some(credential);
            return Ok(());
        }
        let directory = ctx.directory;
        let names = cert.subject_cn.iter().chain(cert.sans.iter());
        let found = names.into_iter().find_map(|name| {
            self.consumer_by.iter().find_map(|by| match by {
                ConsumerBy::Username => directory
                    .consumer_by_id_or_username(name)
                    .filter(|c| c.username.as_deref() == Some(name.as_str())),
                ConsumerBy::CustomId => directory.consumer_by_custom_id(name),
            })
        });
        let found = found.or_else(|| {
            self.default_consumer
                .as_deref()
                .and_then(|name| directory.consumer_by_id_or_username(name))
        });
        match found {
            Some(consumer) => {
                set_consumer(ctx, Some(consumer), Some(credential));
                Ok(())
            }
            None => Err(unauthorized(401, "TLS certificate failed verification", None)),
        }
    }
}

impl Plugin for MtlsAuth {
    fn name(&self) -> &'static str {
        "mtls-auth"
    }

    fn priority(&self) -> i32 {
        1600
    }

    /// Reads none of Kong's identity fields (identity.rs).
    fn reads_identity_fields(&self) -> bool {
        false
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        combine(ctx, self.anonymous.as_deref(), |ctx| self.authenticate(ctx))
    }
}

/// Shared so a connection's certificate is read once for all its requests.
pub type SharedClientCert = Arc<ClientCert>;
