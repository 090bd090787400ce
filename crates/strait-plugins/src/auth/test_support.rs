//! Unit-test fixtures for authentication plugins: a directory holding a
//! few consumers and credentials, and a request to run a plugin's access
//! phase on.

use std::net::{IpAddr, Ipv4Addr};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri, Version};
use strait_core::{BasicauthCredential, Consumer, ForeignKey, HmacauthCredential, JwtSecret, KeyauthCredential};
use uuid::Uuid;

use crate::chain::ConsumerPlugin;
use crate::context::{AuthenticatedCredential, Protocol, RequestCtx, SharedStore};
use crate::directory::{ConsumerView, Directory};
use crate::phase::{Flow, Plugin};

#[derive(Debug, Default)]
pub(crate) struct TestDirectory {
    pub consumers: Vec<Consumer>,
    pub jwt_secrets: Vec<JwtSecret>,
    pub hmac_credentials: Vec<HmacauthCredential>,
}

impl TestDirectory {
    /// Adds a consumer named `username` and returns its id.
    pub fn consumer(&mut self, username: &str) -> Uuid {
        let id = Uuid::new_v4();
        self.consumers.push(Consumer {
            id,
            created_at: 0,
            updated_at: 0,
            username: Some(username.to_string()),
            custom_id: None,
            tags: None,
        });
        id
    }

    pub fn jwt_secret(&mut self, consumer: Uuid, key: &str, algorithm: &str, secret: &str, public_key: Option<&str>) {
        self.jwt_secrets.push(JwtSecret {
            id: Uuid::new_v4(),
            created_at: 0,
            consumer: ForeignKey::new(consumer),
            key: key.to_string(),
            secret: secret.to_string(),
            rsa_public_key: public_key.map(str::to_string),
            algorithm: algorithm.to_string(),
            tags: None,
        });
    }

    pub fn hmac_credential(&mut self, consumer: Uuid, username: &str, secret: &str) {
        self.hmac_credentials.push(HmacauthCredential {
            id: Uuid::new_v4(),
            created_at: 0,
            consumer: ForeignKey::new(consumer),
            username: username.to_string(),
            secret: secret.to_string(),
            tags: None,
        });
    }
}

impl Directory for TestDirectory {
    fn consumer(&self, id: Uuid) -> Option<&Consumer> {
        self.consumers.iter().find(|c| c.id == id)
    }
    fn consumer_by_id_or_username(&self, value: &str) -> Option<&Consumer> {
        self.consumers
            .iter()
            .find(|c| c.id.to_string() == value || c.username.as_deref() == Some(value))
    }
    fn keyauth_credential(&self, _: &str) -> Option<&KeyauthCredential> {
        None
    }
    fn basicauth_credential(&self, _: &str) -> Option<&BasicauthCredential> {
        None
    }
    fn jwt_secret(&self, key: &str) -> Option<&JwtSecret> {
        self.jwt_secrets.iter().find(|s| s.key == key)
    }
    fn hmacauth_credential(&self, username: &str) -> Option<&HmacauthCredential> {
        self.hmac_credentials.iter().find(|c| c.username == username)
    }
    fn consumer_view(&self, _: Uuid) -> Option<&ConsumerView> {
        None
    }
    fn consumer_plugins(&self, _: Uuid) -> &[ConsumerPlugin] {
        &[]
    }
}

/// A request as a plugin's access phase sees it.
#[derive(Debug)]
pub(crate) struct TestRequest {
    pub method: Method,
    pub uri: Uri,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Option<Bytes>,
}

/// What the access phase decided and left behind.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub flow: Flow,
    pub consumer: Option<String>,
    pub credential: Option<AuthenticatedCredential>,
    pub shared: SharedStore,
}

impl Outcome {
    pub fn status(&self) -> u16 {
        match &self.flow {
            Flow::Continue => 200,
            Flow::Respond(response) => response.status,
        }
    }

    /// The response body as JSON (`null` when the request went on).
    pub fn body(&self) -> serde_json::Value {
        match &self.flow {
            Flow::Continue => serde_json::Value::Null,
            Flow::Respond(response) => serde_json::from_slice(&response.body).expect("json body"),
        }
    }

    pub fn message(&self) -> Option<String> {
        self.body()["message"].as_str().map(str::to_string)
    }

    pub fn response_header(&self, name: &str) -> Option<String> {
        match &self.flow {
            Flow::Continue => None,
            Flow::Respond(response) => response
                .headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.clone()),
        }
    }
}

impl TestRequest {
    pub fn new(method: &str, target: &str) -> TestRequest {
        TestRequest {
            method: method.parse().expect("method"),
            uri: target.parse().expect("uri"),
            version: Version::HTTP_11,
            headers: HeaderMap::new(),
            body: None,
        }
    }

    pub fn header(mut self, name: &str, value: &str) -> TestRequest {
        let name = HeaderName::from_bytes(name.as_bytes()).expect("header name");
        self.headers
            .append(name, HeaderValue::from_str(value).expect("header value"));
        self
    }

    pub fn body(mut self, body: &str) -> TestRequest {
        self.body = Some(Bytes::from(body.to_string()));
        self
    }

    pub fn run(&mut self, plugin: &dyn Plugin, directory: &dyn Directory) -> Outcome {
        let mut ctx = self.ctx(directory);
        let flow = plugin.access(&mut ctx);
        Outcome {
            flow,
            consumer: ctx.consumer.and_then(|c| c.username.clone()),
            credential: ctx.credential.clone(),
            shared: std::mem::take(&mut ctx.shared),
        }
    }

    /// The access phase's context for this request (identity fields in the map).
    pub fn ctx<'a>(&'a mut self, directory: &'a dyn Directory) -> RequestCtx<'a> {
        RequestCtx {
            method: &mut self.method,
            protocol: Protocol::Http,
            http_version: self.version,
            client_ip: IpAddr::V4(Ipv4Addr::LOCALHOST),
            client_port: 50000,
            server_port: 8000,
            host: "example.test",
            route_id: None,
            route_name: None,
            service_id: None,
            captures: &[],
            uri: &mut self.uri,
            headers: &mut self.headers,
            body: self.body.take(),
            request_body_limit: None,
            upstream_host: None,
            directory,
            consumer: None,
            consumer_view: None,
            credential: None,
            authenticated_groups: None,
            shared: SharedStore::default(),
            response_headers: Default::default(),
            exact_path: false,
            identity: Default::default(),
            client_cert: None,
        }
    }

    /// A header the upstream would receive, after the plugin ran.
    pub fn upstream_header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}
