use super::*;
use crate::auth::test_support::{TestDirectory, TestRequest};

/// The access phase's flow and the consumer it authenticated.
fn access(session: &Session, request: &mut TestRequest, directory: &TestDirectory) -> (Flow, Option<String>) {
    let mut ctx = request.ctx(directory);
    let runtime = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let flow = runtime.block_on(session.access_async(&mut ctx));
    let consumer = ctx.consumer.and_then(|c| c.username.clone());
    (flow, consumer)
}

fn status(flow: &Flow) -> u16 {
    match flow {
        Flow::Continue => 0,
        Flow::Respond(response) => response.status,
    }
}

fn plugin(extra: Value) -> Session {
    let mut config = json!({"secret": "s3cr3t", "cookie_secure": false});
    if let (Some(config), Some(extra)) = (config.as_object_mut(), extra.as_object()) {
        config.extend(extra.clone());
    }
    Session::from_config(config.as_object().expect("object")).expect("valid")
}

#[test]
fn cookie_attributes_follow_the_config() {
    assert_eq!(plugin(json!({})).attributes, "; Path=/; SameSite=Strict; HttpOnly");
    let all = plugin(json!({"cookie_domain": "example.com", "cookie_same_site": "None", "cookie_http_only": false}));
    assert_eq!(all.attributes, "; Domain=example.com; Path=/; SameSite=None; Secure");
    assert_eq!(
        plugin(json!({"cookie_domain": "localhost"})).attributes,
        "; Path=/; SameSite=Strict; HttpOnly"
    );
}

#[test]
fn cookies_are_read_by_name_across_headers() {
    let mut headers = HeaderMap::new();
    headers.append(http::header::COOKIE, HeaderValue::from_static("a=1; session=abc"));
    headers.append(http::header::COOKIE, HeaderValue::from_static("session2=def"));
    assert_eq!(cookie(&headers, "session"), Some("abc"));
    assert_eq!(cookie(&headers, "session2"), Some("def"));
    assert_eq!(cookie(&headers, "sess"), None);
}

#[test]
fn a_sealed_cookie_authenticates_its_consumer_and_logs_out() {
    let session = plugin(json!({"request_headers": ["subject", "timeout"]}));
    let mut directory = TestDirectory::default();
    let consumer = directory.consumer("alice");
    let credential = uuid::Uuid::new_v4();
    let entries = vec![json!([[consumer.to_string(), credential.to_string(), ["admins"]], "default", "alice"])];
    let mut lines = Vec::new();
    session.seal(None, &entries, false, &mut lines, now()).expect("seals");
    let cookie_pair = lines[0].split(';').next().expect("pair").to_string();

    let mut request = TestRequest::new("GET", "/").header("cookie", &cookie_pair);
    let (flow, consumer_name) = access(&session, &mut request, &directory);
    assert_eq!(status(&flow), 0, "the request continues");
    assert_eq!(consumer_name.as_deref(), Some("alice"));
    assert_eq!(request.upstream_header("x-consumer-username"), Some("alice"));
    let expected = credential.to_string();
    assert_eq!(request.upstream_header("x-credential-identifier"), Some(expected.as_str()));
    assert_eq!(request.upstream_header("x-authenticated-groups"), Some("admins"));
    assert_eq!(request.upstream_header("session-subject"), Some("alice"));
    assert!(request.upstream_header("session-timeout").is_some());

    let mut logout = TestRequest::new("POST", "/?session_logout=true").header("cookie", &cookie_pair);
    let (flow, _) = access(&session, &mut logout, &directory);
    let Flow::Respond(response) = flow else { panic!("a logout answers") };
    assert_eq!(response.status, 200);
    let cleared = &response.headers.iter().find(|(n, _)| n == "set-cookie").expect("a cookie").1;
    assert!(cleared.starts_with("session=; Path=/"), "{cleared}");
    assert!(cleared.contains("Max-Age=0"));

    // GET is not a logout method by default: the session authenticates.
    let mut get = TestRequest::new("GET", "/?session_logout=true").header("cookie", &cookie_pair);
    assert_eq!(access(&session, &mut get, &directory).1.as_deref(), Some("alice"));

    // Another secret does not open it.
    let other = plugin(json!({"secret": "other"}));
    let mut refused = TestRequest::new("GET", "/").header("cookie", &cookie_pair);
    assert_eq!(access(&other, &mut refused, &directory), (Flow::Continue, None));
}
