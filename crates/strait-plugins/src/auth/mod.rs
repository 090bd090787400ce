//! Authentication and authorization plugins, and what they share: setting
//! the authenticated consumer with Kong's upstream headers, the `anonymous`
//! fallback, and the "logical OR" rule between several auth plugins.

pub(crate) mod nginx_base64;
#[cfg(test)]
pub(crate) mod test_support;
pub mod x509;

use http::{HeaderName, HeaderValue};
use strait_core::Consumer;

use crate::context::{AuthenticatedCredential, RequestCtx};
use crate::directory::ConsumerView;
use crate::identity::IdentityField;
use crate::phase::{Flow, PluginResponse};

pub(crate) fn set_or_clear(ctx: &mut RequestCtx<'_>, name: HeaderName, value: Option<&str>) {
    match value.and_then(|v| HeaderValue::from_str(v).ok()) {
        Some(value) => {
            ctx.headers.insert(name, value);
        }
        None => remove_if_sent(ctx, &name),
    }
}

/// Removes a field the client may have sent (to pass itself off as a
/// consumer). Almost no request has it: the names are compared first, which
/// costs less than the hashing of the name a removal does.
pub(crate) fn remove_if_sent(ctx: &mut RequestCtx<'_>, name: &HeaderName) {
    if ctx.headers.keys().any(|sent| sent == name) {
        ctx.headers.remove(name);
    }
}

/// Kong's `set_consumer`: record who the request is and tell the upstream
/// (`X-Consumer-*`, `X-Credential-Identifier`, `X-Anonymous-Consumer`).
/// The consumer's header values come prepared from the directory's
/// [`crate::ConsumerView`] when it has one.
pub(crate) fn set_consumer<'a>(
    ctx: &mut RequestCtx<'a>,
    consumer: Option<&'a Consumer>,
    credential: Option<AuthenticatedCredential>,
) {
    let directory = ctx.directory;
    let view = consumer.and_then(|c| directory.consumer_view(c.id));
    identify(ctx, consumer, view.filter(|v| v.consumer.is_some()), credential);
}

pub(crate) fn identify<'a>(
    ctx: &mut RequestCtx<'a>,
    consumer: Option<&'a Consumer>,
    view: Option<&'a ConsumerView>,
    credential: Option<AuthenticatedCredential>,
) {
    match view {
        Some(view) => {
            ctx.set_identity(IdentityField::ConsumerId, view.id_header.clone());
            ctx.set_identity(IdentityField::ConsumerCustomId, view.custom_id_header.clone());
            ctx.set_identity(IdentityField::ConsumerUsername, view.username_header.clone());
        }
        None => {
            let value = |text: &str| HeaderValue::from_str(text).ok();
            let mut id_text = [0u8; uuid::fmt::Hyphenated::LENGTH];
            let id = consumer.and_then(|c| value(c.id.hyphenated().encode_lower(&mut id_text)));
            ctx.set_identity(IdentityField::ConsumerId, id);
            let custom_id = consumer.and_then(|c| c.custom_id.as_deref()).and_then(value);
            ctx.set_identity(IdentityField::ConsumerCustomId, custom_id);
            let username = consumer.and_then(|c| c.username.as_deref()).and_then(value);
            ctx.set_identity(IdentityField::ConsumerUsername, username);
        }
    }
    let identifier = credential.as_ref().and_then(|c| c.identifier.clone());
    ctx.set_identity(IdentityField::CredentialIdentifier, identifier);
    let anonymous = credential.is_none().then(|| HeaderValue::from_static("true"));
    ctx.set_identity(IdentityField::AnonymousConsumer, anonymous);
    ctx.consumer = consumer;
    ctx.consumer_view = view;
    ctx.credential = credential;
}

/// A credential was accepted: authenticate as its consumer (Kong answers
/// 500 when the consumer row is gone).
pub(crate) fn accept_credential(
    ctx: &mut RequestCtx<'_>,
    consumer: uuid::Uuid,
    credential: AuthenticatedCredential,
) -> Result<(), PluginResponse> {
    let directory = ctx.directory;
    // One lookup when the directory has the consumer's view.
    if let Some(view) = directory.consumer_view(consumer) {
        if let Some(row) = &view.consumer {
            identify(ctx, Some(row), Some(view), Some(credential));
            return Ok(());
        }
    }
    let consumer = directory
        .consumer(consumer)
        .ok_or_else(|| PluginResponse::message(500, "An unexpected error occurred"))?;
    set_consumer(ctx, Some(consumer), Some(credential));
    Ok(())
}

/// Authenticate as the configured anonymous consumer (by id or username);
/// Kong answers 500 when it does not exist.
pub(crate) fn set_anonymous(ctx: &mut RequestCtx<'_>, anonymous: &str) -> Flow {
    let directory = ctx.directory;
    match directory.consumer_by_id_or_username(anonymous) {
        Some(consumer) => {
            set_consumer(ctx, Some(consumer), None);
            Flow::Continue
        }
        None => {
            let message = format!("anonymous consumer {anonymous} is configured but doesn't exist");
            tracing::error!(%anonymous, "anonymous consumer is configured but doesn't exist");
            Flow::Respond(PluginResponse::message(500, &message))
        }
    }
}

/// A failed authentication: Kong's `{"message"}` body, maybe with
/// `WWW-Authenticate`.
pub(crate) fn unauthorized(status: u16, message: &str, www_authenticate: Option<&str>) -> PluginResponse {
    let response = PluginResponse::message(status, message);
    match www_authenticate {
        Some(value) => response.with_header("www-authenticate", value),
        None => response,
    }
}

/// Kong's two ways of combining auth plugins: with `anonymous` set a
/// failure falls back to the anonymous consumer and a request another
/// plugin already authenticated is not checked again ("logical OR");
/// without it a failure ends the request ("logical AND").
pub(crate) fn combine<'a>(
    ctx: &mut RequestCtx<'a>,
    anonymous: Option<&str>,
    authenticate: impl FnOnce(&mut RequestCtx<'a>) -> Result<(), PluginResponse>,
) -> Flow {
    match anonymous {
        Some(anonymous) => {
            if ctx.credential.is_some() {
                return Flow::Continue;
            }
            match authenticate(ctx) {
                Ok(()) => Flow::Continue,
                Err(_) => set_anonymous(ctx, anonymous),
            }
        }
        None => match authenticate(ctx) {
            Ok(()) => Flow::Continue,
            Err(response) => Flow::Respond(response),
        },
    }
}
