//! Name resolution for service and target hosts: asynchronous, cached for
//! each answer's TTL, never blocking a worker.
//!
//! A host is an IP address (used as is), a name in the hosts file
//! (`dns_hostsfile`, read once at start, as Kong does), or a name asked of
//! the DNS servers (`dns_resolver`, else `/etc/resolv.conf`'s) over UDP,
//! record types in `dns_order`. Answers are cached for their smallest TTL
//! (or `dns_valid_ttl`). Past it, the stale answer keeps serving for up to
//! `dns_stale_ttl` while one background query refreshes it, so a request
//! never waits on a name it resolved before. A name that does not exist is
//! remembered for `dns_not_found_ttl`, a failed query for `dns_error_ttl`.
//! A name with several addresses hands them out in turn.
//!
//! The cache is shared by every worker: a read lock and an atomic counter
//! per request, a write lock only when an answer arrives.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};

use tokio::net::UdpSocket;

/// A record type Strait asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordType {
    A,
    Aaaa,
    /// A service record: a host name, port and weight per answer.
    Srv,
}

impl RecordType {
    fn code(self) -> u16 {
        match self {
            RecordType::A => 1,
            RecordType::Aaaa => 28,
            RecordType::Srv => 33,
        }
    }
}

/// One SRV answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub priority: u16,
    pub weight: u16,
    pub port: u16,
    pub target: String,
}

/// What one answer held: addresses, or service records.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Records {
    pub addresses: Vec<IpAddr>,
    pub services: Vec<Service>,
}

impl Records {
    fn is_empty(&self) -> bool {
        self.addresses.is_empty() && self.services.is_empty()
    }
}

/// The resolver's settings (Kong's `dns_*`).
#[derive(Debug, Clone)]
pub struct DnsSettings {
    pub servers: Vec<SocketAddr>,
    pub hosts: HashMap<String, Vec<IpAddr>>,
    pub order: Vec<RecordType>,
    /// Overrides every answer's TTL when set.
    pub valid_ttl: Option<Duration>,
    pub stale_ttl: Duration,
    pub not_found_ttl: Duration,
    pub error_ttl: Duration,
    /// Per query and server.
    pub timeout: Duration,
}

impl Default for DnsSettings {
    fn default() -> DnsSettings {
        DnsSettings {
            servers: system_servers(),
            hosts: read_hosts_file(std::path::Path::new("/etc/hosts")),
            order: vec![RecordType::A, RecordType::Aaaa],
            valid_ttl: None,
            stale_ttl: Duration::from_secs(3600),
            not_found_ttl: Duration::from_secs(30),
            error_ttl: Duration::from_secs(1),
            timeout: Duration::from_secs(2),
        }
    }
}

/// Why a name did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DnsError {
    #[error("{0}: name not found")]
    NotFound(String),
    #[error("{0}: {1}")]
    Failed(String, String),
}

struct Entry {
    /// Empty when the answer was a failure (`error`); else addresses, or
    /// service records (only those of the best priority are kept).
    records: Records,
    /// The record type that answered (asked first next time).
    record_type: Option<RecordType>,
    error: Option<DnsError>,
    expires: Instant,
    stale_until: Instant,
    refreshing: Arc<AtomicBool>,
    next: AtomicUsize,
}

pub struct Resolver {
    settings: DnsSettings,
    cache: RwLock<HashMap<String, Arc<Entry>>>,
    queries: AtomicUsize,
}

static RESOLVER: OnceLock<Resolver> = OnceLock::new();

/// Set the node's resolver (once, at start; later calls change nothing).
pub fn configure(settings: DnsSettings) {
    let _ = RESOLVER.set(Resolver::new(settings));
}

/// The node's resolver (the system's settings unless [`configure`]d).
pub fn resolver() -> &'static Resolver {
    RESOLVER.get_or_init(|| Resolver::new(DnsSettings::default()))
}

/// `host:port` as a socket address, resolving a name through the node's
/// resolver. A name with SRV records gives one of their hosts, and its port
/// unless the record's port is 0.
pub async fn resolve(host: &str, port: u16) -> Result<SocketAddr, DnsError> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(SocketAddr::new(ip, port));
    }
    let (ip, service_port) = resolver().lookup(host).await?;
    Ok(SocketAddr::new(ip, service_port.unwrap_or(port)))
}

/// What a cached answer hands out for one connection.
enum Picked {
    Address(IpAddr),
    Service(Service),
}

impl Resolver {
    pub fn new(settings: DnsSettings) -> Resolver {
        Resolver {
            settings,
            cache: RwLock::new(HashMap::new()),
            queries: AtomicUsize::new(0),
        }
    }

    /// DNS queries sent so far (tests, diagnostics).
    pub fn queries(&self) -> usize {
        self.queries.load(Ordering::Relaxed)
    }

    /// One address of `name`, with the port of the SRV record it came
    /// from, if any (0 in the record: none).
    pub async fn lookup(&'static self, name: &str) -> Result<(IpAddr, Option<u16>), DnsError> {
        match self.lookup_records(name).await? {
            Picked::Address(ip) => Ok((ip, None)),
            Picked::Service(service) => match self.lookup_records(&service.target).await? {
                Picked::Address(ip) => Ok((ip, (service.port != 0).then_some(service.port))),
                Picked::Service(_) => Err(DnsError::Failed(
                    name.to_string(),
                    format!("SRV target {} has SRV records itself", service.target),
                )),
            },
        }
    }

    async fn lookup_records(&'static self, name: &str) -> Result<Picked, DnsError> {
        // Names are kept in lower case; most arrive that way (no copy then).
        let name = name.trim_end_matches('.');
        let name: std::borrow::Cow<'_, str> = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            name.to_ascii_lowercase().into()
        } else {
            name.into()
        };
        let name = name.as_ref();
        if let Some(addresses) = self.settings.hosts.get(name) {
            if let Some(ip) = addresses.first() {
                return Ok(Picked::Address(*ip));
            }
        }
        let now = Instant::now();
        let cached = self.read_cache().get(name).cloned();
        if let Some(entry) = cached {
            if now < entry.expires {
                return pick(&entry);
            }
            if now < entry.stale_until && entry.error.is_none() {
                if !entry.refreshing.swap(true, Ordering::AcqRel) {
                    self.refresh_in_background(name.to_string(), entry.refreshing.clone());
                }
                return pick(&entry);
            }
        }
        // Boxed: a miss is rare, and its future (the queries) is large;
        // inline, every request's future would carry its size.
        let entry = Box::pin(self.query_and_store(name)).await;
        pick(&entry)
    }

    fn read_cache(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Arc<Entry>>> {
        self.cache.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn refresh_in_background(&'static self, name: String, refreshing: Arc<AtomicBool>) {
        tokio::spawn(async move {
            // A failed refresh keeps the stale answer (see query_and_store);
            // a later request tries again.
            self.query_and_store(&name).await;
            refreshing.store(false, Ordering::Release);
        });
    }

    /// Ask the servers; store what they said (a failure only replaces a
    /// stale answer once that is past `dns_stale_ttl`).
    async fn query_and_store(&self, name: &str) -> Arc<Entry> {
        let outcome = self.query(name).await;
        let now = Instant::now();
        let entry = match outcome {
            Ok((mut records, ttl, record_type)) => {
                let ttl = self.settings.valid_ttl.unwrap_or(ttl);
                // Kong's rule: only the best (lowest) priority is used.
                if let Some(best) = records.services.iter().map(|s| s.priority).min() {
                    records.services.retain(|s| s.priority == best);
                }
                Entry {
                    records,
                    record_type: Some(record_type),
                    error: None,
                    expires: now + ttl,
                    stale_until: now + ttl + self.settings.stale_ttl,
                    refreshing: Arc::new(AtomicBool::new(false)),
                    next: AtomicUsize::new(0),
                }
            }
            Err(error) => {
                tracing::error!(%error, "DNS resolution failed");
                let ttl = match error {
                    DnsError::NotFound(_) => self.settings.not_found_ttl,
                    DnsError::Failed(..) => self.settings.error_ttl,
                };
                if let Some(stale) = self
                    .read_cache()
                    .get(name)
                    .filter(|e| e.error.is_none() && now < e.stale_until)
                {
                    return stale.clone();
                }
                Entry {
                    records: Records::default(),
                    record_type: None,
                    error: Some(error),
                    expires: now + ttl,
                    stale_until: now + ttl,
                    refreshing: Arc::new(AtomicBool::new(false)),
                    next: AtomicUsize::new(0),
                }
            }
        };
        let entry = Arc::new(entry);
        let mut cache = self.cache.write().unwrap_or_else(|poisoned| poisoned.into_inner());
        cache.insert(name.to_string(), entry.clone());
        entry
    }

    /// Every record type in order until one has answers; the type that
    /// answered last time first (Kong's `LAST`).
    async fn query(&self, name: &str) -> Result<(Records, Duration, RecordType), DnsError> {
        if self.settings.servers.is_empty() {
            return Err(DnsError::Failed(name.to_string(), "no DNS server configured".into()));
        }
        let last_type = self.read_cache().get(name).and_then(|entry| entry.record_type);
        let order = last_type
            .into_iter()
            .chain(self.settings.order.iter().copied().filter(|t| Some(*t) != last_type));
        let mut last = DnsError::NotFound(name.to_string());
        for record in order {
            match self.ask_servers(name, record).await {
                Ok((records, ttl)) if !records.is_empty() => return Ok((records, ttl, record)),
                Ok(_) => {}
                Err(error) => last = error,
            }
        }
        Err(last)
    }

    async fn ask_servers(&self, name: &str, record: RecordType) -> Result<(Records, Duration), DnsError> {
        let mut last = DnsError::Failed(name.to_string(), "no answer".into());
        for server in &self.settings.servers {
            self.queries.fetch_add(1, Ordering::Relaxed);
            match tokio::time::timeout(self.settings.timeout, ask(*server, name, record)).await {
                Ok(Ok(answer)) => return answer,
                Ok(Err(error)) => last = DnsError::Failed(name.to_string(), format!("{server}: {error}")),
                Err(_) => last = DnsError::Failed(name.to_string(), format!("{server}: timed out")),
            }
        }
        Err(last)
    }
}

/// The next address (or service record, in proportion to the records'
/// weights) of an answer, in turn.
fn pick(entry: &Entry) -> Result<Picked, DnsError> {
    if let Some(error) = &entry.error {
        return Err(error.clone());
    }
    let turn = entry.next.fetch_add(1, Ordering::Relaxed);
    let services = &entry.records.services;
    if !services.is_empty() {
        let total: usize = services.iter().map(|s| usize::from(s.weight.max(1))).sum();
        let mut slot = turn % total;
        for service in services {
            let weight = usize::from(service.weight.max(1));
            if slot < weight {
                return Ok(Picked::Service(service.clone()));
            }
            slot -= weight;
        }
    }
    let addresses = &entry.records.addresses;
    addresses
        .get(turn % addresses.len().max(1))
        .map(|ip| Picked::Address(*ip))
        .ok_or_else(|| DnsError::Failed(String::new(), "empty answer".into()))
}

/// One query over UDP: `Ok(Ok(..))` an answer (maybe empty), `Ok(Err)` the
/// name does not exist, `Err` a transport or format problem.
async fn ask(
    server: SocketAddr,
    name: &str,
    record: RecordType,
) -> std::io::Result<Result<(Records, Duration), DnsError>> {
    let bind: SocketAddr = if server.is_ipv4() {
        (Ipv4Addr::UNSPECIFIED, 0).into()
    } else {
        (Ipv6Addr::UNSPECIFIED, 0).into()
    };
    let socket = UdpSocket::bind(bind).await?;
    socket.connect(server).await?;
    let id = random_id();
    let query = encode_query(id, name, record).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    socket.send(&query).await?;
    let mut buffer = [0u8; 4096];
    loop {
        let n = socket.recv(&mut buffer).await?;
        match parse_answer(&buffer[..n], id, record) {
            Some(Parsed::Answer(records, ttl)) => return Ok(Ok((records, ttl))),
            Some(Parsed::NotFound) => return Ok(Err(DnsError::NotFound(name.to_string()))),
            Some(Parsed::ServerError(code)) => {
                return Err(std::io::Error::other(format!("server answered rcode {code}")))
            }
            // Not our answer (a late reply to another id): keep waiting.
            None => continue,
        }
    }
}

/// A query id (each query has a socket of its own, so the id only guards
/// against stray datagrams).
fn random_id() -> u16 {
    strait_runtime::random::next_u64() as u16
}

/// A standard query with recursion desired.
pub fn encode_query(id: u16, name: &str, record: RecordType) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(32 + name.len());
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.trim_end_matches('.').split('.') {
        if label.is_empty() || label.len() > 63 {
            return Err(format!("invalid name {name:?}"));
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    out.extend_from_slice(&record.code().to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    Ok(out)
}

#[derive(Debug, PartialEq)]
pub enum Parsed {
    /// The records of the asked type, and the smallest TTL among them.
    Answer(Records, Duration),
    NotFound,
    ServerError(u8),
}

/// Read a response to query `id`; `None` when it is not one.
pub fn parse_answer(message: &[u8], id: u16, record: RecordType) -> Option<Parsed> {
    if message.len() < 12 || u16::from_be_bytes([message[0], message[1]]) != id || message[2] & 0x80 == 0 {
        return None;
    }
    match message[3] & 0x0f {
        0 => {}
        3 => return Some(Parsed::NotFound),
        code => return Some(Parsed::ServerError(code)),
    }
    let count = |at: usize| u16::from_be_bytes([message[at], message[at + 1]]) as usize;
    let (questions, answers) = (count(4), count(6));
    let mut at = 12;
    for _ in 0..questions {
        at = skip_name(message, at)? + 4;
    }
    let mut records = Records::default();
    let mut ttl = u32::MAX;
    for _ in 0..answers {
        at = skip_name(message, at)?;
        let fixed = message.get(at..at + 10)?;
        let kind = u16::from_be_bytes([fixed[0], fixed[1]]);
        let record_ttl = u32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
        let length = u16::from_be_bytes([fixed[8], fixed[9]]) as usize;
        let data = message.get(at + 10..at + 10 + length)?;
        at += 10 + length;
        let data_at = at - length;
        match (kind, data.len()) {
            (1, 4) if record == RecordType::A => records
                .addresses
                .push(IpAddr::from([data[0], data[1], data[2], data[3]])),
            (28, 16) if record == RecordType::Aaaa => {
                let bytes: [u8; 16] = data.try_into().ok()?;
                records.addresses.push(IpAddr::from(bytes));
            }
            (33, 7..) if record == RecordType::Srv => {
                let number = |i: usize| u16::from_be_bytes([data[i], data[i + 1]]);
                records.services.push(Service {
                    priority: number(0),
                    weight: number(2),
                    port: number(4),
                    target: read_name(message, data_at + 6)?,
                });
            }
            // CNAMEs and other records on the way: the addresses follow.
            _ => continue,
        }
        ttl = ttl.min(record_ttl);
    }
    let ttl = if records.is_empty() { 0 } else { ttl };
    Some(Parsed::Answer(records, Duration::from_secs(u64::from(ttl))))
}

/// The (possibly compressed) name at `at`, dotted, lower case.
fn read_name(message: &[u8], mut at: usize) -> Option<String> {
    let mut labels: Vec<String> = Vec::new();
    // Pointers may only go back; a bound stops loops in a malformed message.
    for _ in 0..128 {
        let length = *message.get(at)?;
        match length {
            0 => return Some(labels.join(".").to_ascii_lowercase()),
            l if l & 0xc0 == 0xc0 => {
                let pointer = (usize::from(l & 0x3f) << 8) | usize::from(*message.get(at + 1)?);
                if pointer >= at {
                    return None;
                }
                at = pointer;
            }
            l => {
                let label = message.get(at + 1..at + 1 + usize::from(l))?;
                labels.push(String::from_utf8_lossy(label).into_owned());
                at += 1 + usize::from(l);
            }
        }
    }
    None
}

/// The offset just past a (possibly compressed) name.
fn skip_name(message: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let length = *message.get(at)?;
        match length {
            0 => return Some(at + 1),
            l if l & 0xc0 == 0xc0 => return Some(at + 2),
            l => at += 1 + l as usize,
        }
    }
}

/// `nameserver` lines of /etc/resolv.conf, port 53.
pub fn system_servers() -> Vec<SocketAddr> {
    let text = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    parse_resolv_conf(&text)
}

pub fn parse_resolv_conf(text: &str) -> Vec<SocketAddr> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.trim().parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// A hosts file: name (lower case) -> addresses in file order.
pub fn read_hosts_file(path: &std::path::Path) -> HashMap<String, Vec<IpAddr>> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    parse_hosts(&text)
}

pub fn parse_hosts(text: &str) -> HashMap<String, Vec<IpAddr>> {
    let mut hosts: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_whitespace();
        let Some(ip) = words.next().and_then(|w| w.parse::<IpAddr>().ok()) else {
            continue;
        };
        for name in words {
            let list = hosts.entry(name.to_ascii_lowercase()).or_default();
            if !list.contains(&ip) {
                list.push(ip);
            }
        }
    }
    hosts
}

/// `ip` or `ip:port` (`[v6]:port`), port 53 by default.
pub fn parse_server(text: &str) -> Option<SocketAddr> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Some(address);
    }
    text.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 53))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An answer to `query` with `records` (type, ttl, data), the way a
    /// server writes it: the question, then answers naming it by pointer.
    pub(crate) fn answer(query: &[u8], rcode: u8, records: &[(u16, u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = query.to_vec();
        out[2] |= 0x80;
        out[3] = rcode;
        out[6..8].copy_from_slice(&(records.len() as u16).to_be_bytes());
        for (kind, ttl, data) in records {
            out.extend_from_slice(&[0xc0, 12]);
            out.extend_from_slice(&kind.to_be_bytes());
            out.extend_from_slice(&1u16.to_be_bytes());
            out.extend_from_slice(&ttl.to_be_bytes());
            out.extend_from_slice(&(data.len() as u16).to_be_bytes());
            out.extend_from_slice(data);
        }
        out
    }

    #[test]
    fn answers_parse_with_the_smallest_ttl_and_skip_cnames() {
        let query = encode_query(7, "svc.example.com", RecordType::A).unwrap();
        let reply = answer(
            &query,
            0,
            &[
                (5, 300, vec![3, b'f', b'o', b'o', 0]),
                (1, 30, vec![10, 0, 0, 1]),
                (1, 10, vec![10, 0, 0, 2]),
            ],
        );
        assert_eq!(
            parse_answer(&reply, 7, RecordType::A),
            Some(Parsed::Answer(
                Records {
                    addresses: vec!["10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()],
                    services: vec![],
                },
                Duration::from_secs(10)
            ))
        );
        // SRV: priority, weight, port, then the target, here by a pointer to the question's
        // `example.com` behind a label of its own.
        let srv_query = encode_query(9, "_http._tcp.example.com", RecordType::Srv).unwrap();
        let mut srv = vec![0, 1, 0, 5, 0x1f, 0x90, 3, b'a', b'p', b'p', 0xc0];
        srv.push(12 + 1 + 5 + 1 + 4);
        let srv_reply = answer(&srv_query, 0, &[(33, 60, srv), (1, 60, vec![10, 0, 0, 9])]);
        let service = Service {
            priority: 1,
            weight: 5,
            port: 8080,
            target: "app.example.com".into(),
        };
        assert_eq!(
            parse_answer(&srv_reply, 9, RecordType::Srv),
            Some(Parsed::Answer(
                Records {
                    addresses: vec![],
                    services: vec![service]
                },
                Duration::from_secs(60)
            ))
        );
        assert_eq!(parse_answer(&reply, 8, RecordType::A), None, "another id");
        assert_eq!(
            parse_answer(&answer(&query, 3, &[]), 7, RecordType::A),
            Some(Parsed::NotFound)
        );
        assert_eq!(
            parse_answer(&answer(&query, 2, &[]), 7, RecordType::A),
            Some(Parsed::ServerError(2))
        );
        assert_eq!(parse_answer(&reply[..20], 7, RecordType::A), None, "cut short");
        assert!(encode_query(1, "bad..name", RecordType::A).is_err());
    }

    #[test]
    fn hosts_and_resolv_conf_parse() {
        let hosts = parse_hosts("127.0.0.1 localhost Local # c\n::1 localhost\nbad line\n10.1.1.1 api.internal\n");
        assert_eq!(hosts["localhost"].len(), 2);
        assert_eq!(hosts["local"], vec!["127.0.0.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            parse_resolv_conf("# x\nnameserver 10.0.0.53\nsearch a\nnameserver ::1\n"),
            vec!["10.0.0.53:53".parse().unwrap(), "[::1]:53".parse().unwrap()]
        );
        assert_eq!(parse_server("127.0.0.1:5353"), Some("127.0.0.1:5353".parse().unwrap()));
        assert_eq!(parse_server("10.0.0.1"), Some("10.0.0.1:53".parse().unwrap()));
        assert_eq!(parse_server("nonsense"), None);
    }

    /// A resolver against a real UDP server on loopback that answers with
    /// a 1 s TTL and a new address each time.
    #[tokio::test]
    async fn answers_are_cached_for_their_ttl_then_refreshed_while_the_stale_one_serves() {
        let server = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        let addr = server.local_addr().unwrap();
        tokio::spawn(async move {
            let mut buffer = [0u8; 512];
            let mut last = 0u8;
            while let Ok((n, peer)) = server.recv_from(&mut buffer).await {
                last += 1;
                let reply = answer(&buffer[..n], 0, &[(1, 1, vec![10, 0, 0, last])]);
                let _ = server.send_to(&reply, peer).await;
            }
        });
        let resolver: &'static Resolver = Box::leak(Box::new(Resolver::new(DnsSettings {
            servers: vec![addr],
            hosts: parse_hosts("192.0.2.9 pinned.test\n"),
            order: vec![RecordType::A],
            valid_ttl: None,
            stale_ttl: Duration::from_secs(60),
            not_found_ttl: Duration::from_secs(30),
            error_ttl: Duration::from_secs(1),
            timeout: Duration::from_secs(1),
        })));
        let first: IpAddr = "10.0.0.1".parse().unwrap();
        assert_eq!(resolver.lookup("svc.test").await, Ok((first, None)));
        assert_eq!(
            resolver.lookup("SVC.test.").await,
            Ok((first, None)),
            "cached, case and dot ignored"
        );
        assert_eq!(resolver.queries(), 1);
        assert_eq!(
            resolver.lookup("pinned.test").await,
            Ok(("192.0.2.9".parse().unwrap(), None))
        );
        assert_eq!(resolver.queries(), 1, "hosts file names are not queried");
        tokio::time::sleep(Duration::from_millis(1100)).await;
        assert_eq!(
            resolver.lookup("svc.test").await,
            Ok((first, None)),
            "stale while refreshing"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            resolver.lookup("svc.test").await,
            Ok(("10.0.0.2".parse().unwrap(), None))
        );
        assert_eq!(resolver.queries(), 2);
    }
}
