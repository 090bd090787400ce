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
use crate::phase::{Flow, PluginResponse};

pub(crate) fn set_or_clear(ctx: &mut RequestCtx<'_>, name: HeaderName, value: Option<&str>) {
    match value.and_then(|v| HeaderValue::from_str(v).ok()) {
        Some(value) => {
            ctx.headers.insert(name, value);
        }
        None => crate::identity::remove_if_sent(ctx.headers, &name),
    }
}

/// Kong's `set_consumer`: record who the request is and tell the upstream
/// (`X-Consumer-*`, `X-Credential-Identifier`, `X-Anonymous-Consumer`).
/// The consumer's header values come prepared from the directory's
/// [`crate::ConsumerView`] when it has one.
pub fn set_consumer<'a>(
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
    let [id, custom_id, username] = match view {
        Some(view) => [
            view.id_header.clone(),
            view.custom_id_header.clone(),
            view.username_header.clone(),
        ],
        None => consumer.map(prepared_headers).unwrap_or_default(),
    };
    let identifier = credential.as_ref().and_then(|c| c.identifier.clone());
    let anonymous = credential.is_none().then(|| HeaderValue::from_static("true"));
    ctx.identity
        .set_authenticated(ctx.headers, [id, custom_id, username, identifier, anonymous]);
    ctx.consumer = consumer;
    ctx.consumer_view = view;
    ctx.credential = credential;
}

/// A consumer's `X-Consumer-ID`, `-Custom-ID` and `-Username` values.
type ConsumerHeaders = [Option<HeaderValue>; 3];

/// The header values of a consumer the directory has no prepared view of
/// (views are kept for consumers with groups): made once per thread and
/// consumer while it stays in a small cache, rather than formatted,
/// validated and allocated on every request. An entry is used only for a
/// consumer with the same id, username and custom id, so a renamed
/// consumer never gets its old values.
fn prepared_headers(consumer: &Consumer) -> ConsumerHeaders {
    struct Entry {
        id: uuid::Uuid,
        username: Option<Box<str>>,
        custom_id: Option<Box<str>>,
        headers: ConsumerHeaders,
    }
    const SLOTS: usize = 512;
    thread_local! {
        static CACHE: std::cell::RefCell<Vec<Option<Entry>>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let slot = (consumer.id.as_u128() as usize) % SLOTS;
    CACHE.with(|cache| {
        let mut cache = cache.borrow_mut();
        if cache.is_empty() {
            cache.resize_with(SLOTS, || None);
        }
        match &cache[slot] {
            Some(entry)
                if entry.id == consumer.id
                    && entry.username.as_deref() == consumer.username.as_deref()
                    && entry.custom_id.as_deref() == consumer.custom_id.as_deref() =>
            {
                // Each by hand: an array's `clone` walks an iterator (twice the instructions).
                let [id, custom_id, username] = &entry.headers;
                [id.clone(), custom_id.clone(), username.clone()]
            }
            _ => {
                let value = |text: &str| HeaderValue::from_str(text).ok();
                let mut id_text = [0u8; uuid::fmt::Hyphenated::LENGTH];
                let headers = [
                    value(consumer.id.hyphenated().encode_lower(&mut id_text)),
                    consumer.custom_id.as_deref().and_then(value),
                    consumer.username.as_deref().and_then(value),
                ];
                cache[slot] = Some(Entry {
                    id: consumer.id,
                    username: consumer.username.as_deref().map(Box::from),
                    custom_id: consumer.custom_id.as_deref().map(Box::from),
                    headers: headers.clone(),
                });
                headers
            }
        }
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    fn consumer(id: uuid::Uuid, username: &str, custom_id: Option<&str>) -> Consumer {
        Consumer {
            id,
            created_at: 0,
            updated_at: 0,
            username: Some(username.to_string()),
            custom_id: custom_id.map(str::to_string),
            tags: None,
        }
    }

    /// The cached values are a consumer's own: a rename (same id) or another
    /// consumer in the same slot gets its values, never the cached ones.
    #[test]
    fn prepared_headers_follow_the_consumer() {
        let id = uuid::Uuid::from_u128(7);
        let text = |headers: &ConsumerHeaders| headers.clone().map(|v| v.map(|v| v.to_str().unwrap().to_string()));
        let alice = prepared_headers(&consumer(id, "alice", Some("a-1")));
        assert_eq!(
            text(&alice),
            [Some(id.to_string()), Some("a-1".to_string()), Some("alice".to_string())]
        );
        assert_eq!(
            text(&prepared_headers(&consumer(id, "alice", Some("a-1")))),
            text(&alice)
        );
        let renamed = prepared_headers(&consumer(id, "alicia", None));
        assert_eq!(text(&renamed), [Some(id.to_string()), None, Some("alicia".to_string())]);
        let same_slot = uuid::Uuid::from_u128(7 + 512);
        let other = prepared_headers(&consumer(same_slot, "bob", None));
        assert_eq!(
            text(&other),
            [Some(same_slot.to_string()), None, Some("bob".to_string())]
        );
    }
}
