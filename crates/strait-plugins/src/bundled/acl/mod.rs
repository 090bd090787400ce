//! `acl` (Kong priority 950): allow or deny by the groups of the
//! authenticated consumer (`acls` entities) or, without one, the groups an
//! authentication plugin established.

mod schema;

/// `acl` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "acl",
    priority: 950,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Acl::from_config(config)?)),
};

use http::HeaderValue;
use serde_json::{Map, Value};

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::identity::IdentityField;
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;


#[derive(Debug)]
pub struct Acl {
    deny: bool,
    groups: Vec<String>,
    hide_groups_header: bool,
    always_use_authenticated_groups: bool,
    /// Kong Enterprise's `include_consumer_groups`: the consumer's consumer
    /// groups count as its ACL groups too.
    include_consumer_groups: bool,
}

enum Decision {
    Block,
    /// Allowed; the groups header to send (None: hidden or not valid).
    Pass(Option<HeaderValue>),
}

impl Acl {
    pub fn from_config(config: &Map<String, Value>) -> Result<Acl, PluginError> {
        let c = ConfigReader::new(config);
        let deny = c.strings("deny")?;
        let allow = c.strings("allow")?;
        if deny.is_empty() && allow.is_empty() {
            return Err(PluginError::invalid(
                "allow",
                "at least one of 'allow' or 'deny' must be set",
            ));
        }
        Ok(Acl {
            deny: !deny.is_empty(),
            groups: if deny.is_empty() { allow } else { deny },
            hide_groups_header: c.bool("hide_groups_header", false)?,
            always_use_authenticated_groups: c.bool("always_use_authenticated_groups", false)?,
            include_consumer_groups: c.bool("include_consumer_groups", false)?,
        })
    }

    /// `prepared`: the groups' header value when the directory has it.
    fn decide(&self, groups: &[String], prepared: Option<&HeaderValue>) -> Decision {
        let in_group = groups.iter().any(|g| self.groups.contains(g));
        if in_group == self.deny {
            return Decision::Block;
        }
        if self.hide_groups_header {
            return Decision::Pass(None);
        }
        Decision::Pass(match prepared {
            Some(value) => Some(value.clone()),
            None => HeaderValue::from_maybe_shared(bytes::Bytes::from(groups.join(", "))).ok(),
        })
    }

    fn refuse(ctx: &RequestCtx<'_>) -> Flow {
        match ctx.credential {
            Some(_) => Flow::Respond(PluginResponse::message(403, "You cannot consume this service")),
            None => Flow::Respond(PluginResponse::message(401, "Unauthorized")),
        }
    }
}

impl Plugin for Acl {
    fn name(&self) -> &'static str {
        "acl"
    }

    fn priority(&self) -> i32 {
        950
    }

    /// Reads none of Kong's identity fields (identity.rs).
    fn reads_identity_fields(&self) -> bool {
        false
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let use_authenticated =
            ctx.consumer.is_none() || ctx.credential.is_none() || self.always_use_authenticated_groups;
        let authenticated = ctx.authenticated_groups.as_deref().filter(|_| use_authenticated);
        let (decision, header) = match (ctx.consumer, authenticated) {
            (_, Some(groups)) => (self.decide(groups, None), IdentityField::AuthenticatedGroups),
            (None, None) => return Acl::refuse(ctx),
            (Some(consumer), None) => {
                // The view set_consumer found, else the directory's.
                let view = ctx.consumer_view.or_else(|| ctx.directory.consumer_view(consumer.id));
                let with_consumer_groups =
                    view.filter(|v| self.include_consumer_groups && !v.consumer_groups.is_empty());
                if let Some(view) = with_consumer_groups {
                    let mut groups = view.groups.clone();
                    groups.extend(
                        view.consumer_groups
                            .iter()
                            .filter(|g| !view.groups.contains(g))
                            .cloned(),
                    );
                    (self.decide(&groups, None), IdentityField::ConsumerGroups)
                } else {
                    match view.filter(|v| !v.groups.is_empty()) {
                        Some(view) => (self.decide(&view.groups, view.groups_header.as_ref()), IdentityField::ConsumerGroups),
                        None if self.deny => (self.decide(&[], None), IdentityField::ConsumerGroups),
                        None => return Acl::refuse(ctx),
                    }
                }
            }
        };
        match decision {
            Decision::Block => Flow::Respond(PluginResponse::message(403, "You cannot consume this service")),
            Decision::Pass(value) => {
                if value.is_some() {
                    ctx.set_identity(header, value);
                }
                Flow::Continue
            }
        }
    }
}
