//! `/acme`: Kong's endpoints of the acme plugin. `POST /acme` orders a
//! certificate for a host now (or, with `test_http_challenge_flow`, checks
//! that challenge requests for it reach the plugin), `PATCH /acme` starts a
//! renewal, `GET /acme/certificates[/{host}]` lists what was issued. Each
//! uses the first acme plugin of the configuration; none: 404.

use http::{Method, StatusCode};
use serde_json::{json, Value};
use strait_plugins::bundled::acme::{issue, read_config, AcmeConfig};

use crate::crud::body::parse_body;
use crate::request::AdminRequest;
use crate::response::{json_response, message, not_found, AdminResponse};
use crate::AdminState;

fn plugin_config(state: &AdminState) -> Result<AcmeConfig, AdminResponse> {
    let snapshot = state.publisher.current().load_full();
    // Kong answers an empty 404; the Admin API's JSON error here, as
    // everywhere else in Strait's (its OpenAPI document says so).
    let Some(config) = snapshot.plugin_configs("acme").next() else {
        return Err(not_found());
    };
    read_config(config).map_err(|e| message(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))
}

/// Runs `work` on acme's own runtime and waits for it.
async fn on_acme<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, AdminResponse> {
    let runtime = issue::runtime().ok_or_else(|| message(StatusCode::INTERNAL_SERVER_ERROR, "acme cannot run"))?;
    runtime
        .spawn(work)
        .await
        .map_err(|e| message(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()))
}

/// `POST|PATCH /acme`.
pub async fn acme(state: &AdminState, request: &AdminRequest) -> AdminResponse {
    if request.method == Method::PATCH {
        issue::renew_in_background();
        return message(StatusCode::ACCEPTED, "Renewal process started successfully");
    }
    let config = match plugin_config(state) {
        Ok(config) => config,
        Err(response) => return response,
    };
    let input = match parse_body(request) {
        Ok((input, _)) => input,
        Err(response) => return response,
    };
    let Some(host) = input.get("host").and_then(Value::as_str).map(str::to_string) else {
        return message(
            StatusCode::BAD_REQUEST,
            "host must be provided and containing a single domain",
        );
    };
    if host.contains(':') {
        return message(StatusCode::BAD_REQUEST, "port is not allowed in host");
    }
    let test_only = matches!(input.get("test_http_challenge_flow"), Some(Value::Bool(true)))
        || input.get("test_http_challenge_flow").and_then(Value::as_str) == Some("true");
    if test_only {
        return sanity_check(&config, &host).await;
    }
    let config = std::sync::Arc::new(config);
    let ordered = on_acme(async move {
        issue::update_certificate(&config, &host)
            .await
            .map_err(|e| format!("failed to update certificate: {e}"))?;
        issue::store_renew_config(&config, &host)
            .await
            .map_err(|e| format!("failed to store renew config: {e}"))?;
        Ok::<String, String>(host)
    })
    .await;
    match ordered {
        Ok(Ok(host)) => message(StatusCode::CREATED, &format!("certificate for host {host} is created")),
        Ok(Err(error)) => message(StatusCode::INTERNAL_SERVER_ERROR, &error),
        Err(response) => response,
    }
}

/// Kong's `test_http_challenge_flow`: the plugin must answer
/// `http://<host>/.well-known/acme-challenge/x` with `Not found\n`.
async fn sanity_check(config: &AcmeConfig, host: &str) -> AdminResponse {
    let problem = |why: String| {
        message(
            StatusCode::BAD_REQUEST,
            &format!("problem found running sanity check for {host}: {why}"),
        )
    };
    if !config.lists(host) {
        return problem("host is not included in plugin config.domains".into());
    }
    let check_path = format!("http://{host}/.well-known/acme-challenge/");
    let server = strait_runtime::http_client::Server {
        host: host.to_string(),
        port: 80,
        tls: false,
        verify: false,
        timeout: std::time::Duration::from_secs(10),
        keepalive: std::time::Duration::ZERO,
    };
    let request = strait_runtime::http_client::Request {
        method: Method::GET,
        path_and_query: "/.well-known/acme-challenge/x".into(),
        headers: http::HeaderMap::new(),
        body: bytes::Bytes::new(),
    };
    let answer = match on_acme(async move { server.send(request).await }).await {
        Ok(answer) => answer,
        Err(response) => return response,
    };
    match answer {
        Err(error) => problem(error),
        Ok(response) => {
            let body = String::from_utf8_lossy(&response.body).into_owned();
            if body.contains("no Route matched with those values") {
                problem(format!(
                    "{check_path}* doesn't map to a Route in Kong; please refer to docs on how to create dummy Route and Service"
                ))
            } else if body != "Not found\n" {
                let mut why = format!("unexpected response: \"{body}\"");
                if response.status != StatusCode::NOT_FOUND {
                    why.push_str(&format!(", unexpected status code: {}", response.status.as_u16()));
                }
                problem(why)
            } else {
                message(StatusCode::OK, &format!("sanity test for host {host} passed"))
            }
        }
    }
}

fn colon_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":")
}

/// `YYYY-MM-DD HH:MM:SS` of a time (seconds since the epoch), UTC.
fn date(secs: i64) -> String {
    let t = strait_runtime::clock::UtcTime::of(secs.max(0) as u64);
    format!("{:04}-{:02}-{:02} {}", t.year, t.month, t.day, t.clock())
}

/// Kong's `parse_certkey`.
fn describe(cert_pem: &str) -> Option<Value> {
    use strait_plugins::auth::x509;
    let der = x509::first_pem_der(cert_pem)?;
    let summary = x509::summary(&der)?;
    let now = strait_runtime::kv::now();
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &der);
    Some(json!({
        "digest": colon_hex(digest.as_ref()),
        // Kong reads the subject's CN; CAs now leave it out (Pebble, Let's
        // Encrypt's newer profiles): the first DNS name then.
        "host": summary.subject_cn.or_else(|| x509::parse(&der).and_then(|c| c.sans.into_iter().next())),
        "issuer_cn": summary.issuer_cn,
        "not_before": date(summary.not_before),
        "not_after": date(summary.not_after),
        // RFC 5280 validity includes both ends (Kong compares strictly).
        "valid": summary.not_before <= now && now <= summary.not_after,
        "serial_number": colon_hex(&summary.serial),
        "pubkey_type": summary.key_type,
    }))
}

/// `GET /acme/certificates[/{host}]`.
pub async fn certificates(state: &AdminState, host: Option<String>, request: &AdminRequest) -> AdminResponse {
    let config = match plugin_config(state) {
        Ok(config) => std::sync::Arc::new(config),
        Err(response) => return response,
    };
    let invalid_only = request.query.get("invalid_only").is_some_and(|v| v != "false");
    let listed = on_acme(async move {
        let hosts = match host {
            Some(host) => {
                let certkey = issue::load_certkey(&config, &host).await?;
                return Ok(Err((host, certkey)));
            }
            None => issue::renew_hosts(&config).await?,
        };
        let mut out = Vec::new();
        for host in hosts {
            match issue::load_certkey(&config, &host).await? {
                Some(certkey) => out.push(certkey.cert),
                None => tracing::warn!(%host, "acme: in renew_config but its cert and key is missing"),
            }
        }
        Ok::<_, String>(Ok(out))
    })
    .await;
    match listed {
        Err(response) => response,
        Ok(Err(error)) => message(StatusCode::INTERNAL_SERVER_ERROR, &error),
        Ok(Ok(Ok(certs))) => {
            let data: Vec<Value> = certs
                .iter()
                .filter_map(|c| describe(c))
                .filter(|d| !invalid_only || d["valid"] == false)
                .collect();
            json_response(StatusCode::OK, &json!({ "data": data }))
        }
        Ok(Ok(Err((host, None)))) => message(
            StatusCode::NOT_FOUND,
            &format!("Certificate for host {host}not found in storage"),
        ),
        Ok(Ok(Err((_, Some(certkey))))) => match describe(&certkey.cert) {
            Some(data) => json_response(StatusCode::OK, &json!({ "data": data })),
            None => message(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the stored certificate cannot be read",
            ),
        },
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates_print_as_kong_does() {
        assert_eq!(super::date(0), "1970-01-01 00:00:00");
        assert_eq!(super::date(1_767_225_600 + 3_661), "2026-01-01 01:01:01");
        assert_eq!(super::colon_hex(&[0x0a, 0xff]), "0A:FF");
    }
}
