//! `redirect` (Kong priority 779): answers every request with a redirect to
//! `location`, keeping the request's path and query when
//! `keep_incoming_path` is set.

mod schema;

/// `redirect` in the registry ([`crate::bundled`]).
pub const PLUGIN: crate::BundledPlugin = crate::BundledPlugin {
    name: "redirect",
    priority: 779,
    schema: schema::schema,
    build: |config, _| Ok(std::sync::Arc::new(Redirect::from_config(config)?)),
};

use bytes::Bytes;
use serde_json::{Map, Value};

use crate::config::ConfigReader;
use crate::context::RequestCtx;
use crate::phase::{Flow, Plugin, PluginResponse};
use crate::PluginError;

/// Kong's body for every redirect (a plain string, no `Content-Type`).
const BODY: &str = "redirecting";

#[derive(Debug)]
pub struct Redirect {
    status: u16,
    location: String,
    /// `location` parsed once, when the request's path and query replace its own.
    keep_incoming_path: Option<url::Url>,
}

impl Redirect {
    pub fn from_config(config: &Map<String, Value>) -> Result<Redirect, PluginError> {
        let c = ConfigReader::new(config);
        let status = c.integer("status_code", 301)?;
        if !(100..=599).contains(&status) {
            return Err(PluginError::invalid("status_code", "value should be between 100 and 599"));
        }
        let location = c
            .string("location")?
            .ok_or_else(|| PluginError::invalid("location", "required field missing"))?;
        let keep_incoming_path = match c.bool("keep_incoming_path", false)? {
            true => Some(
                url::Url::parse(&location).map_err(|e| PluginError::invalid("location", format!("{e}")))?,
            ),
            false => None,
        };
        Ok(Redirect {
            status: status as u16,
            location,
            keep_incoming_path,
        })
    }

    /// `location` with the request's path and raw query in place of its own
    /// (an empty query removes the location's); scheme, user, host, port and
    /// fragment stay, as Kong's `set_pathname` / `set_search` leave them.
    fn location_for(&self, path: &str, query: &str) -> String {
        let Some(base) = &self.keep_incoming_path else {
            return self.location.clone();
        };
        let mut url = base.clone();
        url.set_path(path);
        url.set_query((!query.is_empty()).then_some(query));
        url.into()
    }
}

impl Plugin for Redirect {
    fn name(&self) -> &'static str {
        "redirect"
    }

    fn priority(&self) -> i32 {
        779
    }

    fn access(&self, ctx: &mut RequestCtx<'_>) -> Flow {
        let location = self.location_for(ctx.path(), ctx.query());
        Flow::Respond(PluginResponse {
            status: self.status,
            headers: vec![("Location".into(), location)],
            body: Bytes::from_static(BODY.as_bytes()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn build(config: Value) -> Result<Redirect, PluginError> {
        Redirect::from_config(config.as_object().expect("object"))
    }

    #[test]
    fn the_location_is_sent_as_configured_unless_the_path_is_kept() {
        let plain = build(json!({"location": "https://example.com/a?b=1#top"})).expect("valid");
        assert_eq!(plain.status, 301);
        assert_eq!(plain.location_for("/x", "y=2"), "https://example.com/a?b=1#top");

        let keep = build(json!({
            "status_code": 308,
            "location": "https://user@Example.com:8443/a?b=1#top",
            "keep_incoming_path": true
        }))
        .expect("valid");
        assert_eq!(keep.status, 308);
        assert_eq!(keep.location_for("/x/y", "y=2&z"), "https://user@example.com:8443/x/y?y=2&z#top");
        assert_eq!(keep.location_for("/", ""), "https://user@example.com:8443/#top");
    }

    #[test]
    fn a_status_out_of_range_is_refused_by_field() {
        assert_eq!(
            build(json!({"status_code": 99, "location": "http://a"})).err().map(|e| e.to_string()),
            Some("config.status_code: value should be between 100 and 599".to_string())
        );
    }
}
