//! The network settings of the proxy's connections: `http2_*` (client
//! and upstream HTTP/2), `http3_*` (client HTTP/3) and Kong's `dns_*`.

use std::time::Duration;

use anyhow::{anyhow, bail, Result};

use super::{parse_duration, parse_number, parse_size, parse_switch, RawSettings};

/// The `http2_*` settings of client connections, checked against the
/// ranges RFC 9113 allows.
pub(super) fn http2_settings(raw: &RawSettings, prefix: &str) -> Result<strait_proxy::wire::conn::Http2Settings> {
    let key = |name: &str| format!("{prefix}{name}");
    let window = |name: &str| -> Result<u32> {
        let key = key(name);
        let size = parse_size(&key, raw.get(&key))?;
        match u32::try_from(size) {
            Ok(size) if (1..=0x7fff_ffff).contains(&size) => Ok(size),
            _ => bail!("{key}: must be between 1 byte and 2147483647 bytes (got {size})"),
        }
    };
    let frame_key = key("max_frame_size");
    let frame = parse_size(&frame_key, raw.get(&frame_key))?;
    if !(16_384..=16_777_215).contains(&frame) {
        bail!("{frame_key}: must be between 16k and 16777215 bytes (got {frame})");
    }
    let duration = |name: &str| {
        let key = key(name);
        parse_duration(&key, raw.get(&key))
    };
    let interval = duration("keepalive_interval")?;
    let defaults = strait_proxy::wire::conn::Http2Settings::default();
    // The reset limits are settings of client connections only.
    let number = |name: &str, default: usize| {
        let key = key(name);
        match raw.0.get(&key) {
            Some(value) => parse_number(&key, value),
            None => Ok(default),
        }
    };
    Ok(strait_proxy::wire::conn::Http2Settings {
        initial_stream_window: window("initial_stream_window_size")?,
        initial_connection_window: window("initial_connection_window_size")?,
        adaptive_window: parse_switch(&key("adaptive_window"), raw.get(&key("adaptive_window")))?,
        max_frame_size: frame as u32,
        keepalive_interval: (!interval.is_zero()).then_some(interval),
        keepalive_timeout: duration("keepalive_timeout")?,
        max_pending_accept_reset_streams: number(
            "max_pending_accept_reset_streams",
            defaults.max_pending_accept_reset_streams,
        )?,
        max_local_error_reset_streams: number("max_local_error_reset_streams", defaults.max_local_error_reset_streams)?,
    })
}

/// The `http3_*` settings of client QUIC connections (`ssl http3`
/// listeners), checked against what QUIC can carry.
pub(super) fn http3_settings(raw: &RawSettings) -> Result<strait_proxy::wire::h3_server::Http3Settings> {
    let streams = parse_number("http3_max_concurrent_streams", raw.get("http3_max_concurrent_streams"))?;
    let max_concurrent_streams = match u32::try_from(streams) {
        Ok(n) if (1..=65_536).contains(&n) => n,
        _ => bail!("http3_max_concurrent_streams: must be between 1 and 65536 (got {streams})"),
    };
    let buffer = parse_size("http3_stream_buffer_size", raw.get("http3_stream_buffer_size"))?;
    let stream_buffer_size = match u32::try_from(buffer) {
        Ok(n) if (1024..=1 << 30).contains(&n) => n,
        _ => bail!("http3_stream_buffer_size: must be between 1k and 1g (got {buffer})"),
    };
    let idle_timeout = parse_duration("http3_idle_timeout", raw.get("http3_idle_timeout"))?;
    if idle_timeout.is_zero() || idle_timeout > Duration::from_secs(86_400) {
        bail!("http3_idle_timeout: must be between 1ms and 1d (got {idle_timeout:?})");
    }
    Ok(strait_proxy::wire::h3_server::Http3Settings {
        max_concurrent_streams,
        stream_buffer_size,
        idle_timeout,
        early_data: parse_switch("http3_early_data", raw.get("http3_early_data"))?,
    })
}

/// Kong's `dns_*` settings. `dns_order` may name `LAST`, `SRV`, `A`,
/// `AAAA` and `CNAME`; Strait asks for SRV, A and AAAA records in the
/// order given, the type that answered a name last time first (`LAST`
/// always applies; CNAMEs are followed by the server).
pub(super) fn dns_settings(raw: &RawSettings) -> Result<strait_proxy::upstream::dns::DnsSettings> {
    use strait_proxy::upstream::dns::{parse_server, read_hosts_file, system_servers, DnsSettings, RecordType};
    let servers = match raw.get("dns_resolver").trim() {
        "" => system_servers(),
        list => list
            .split(',')
            .map(|entry| parse_server(entry).ok_or_else(|| anyhow!("dns_resolver: invalid address {:?}", entry.trim())))
            .collect::<Result<Vec<_>>>()?,
    };
    let mut order = Vec::new();
    for token in raw.get("dns_order").split(',').map(str::trim) {
        match token.to_ascii_uppercase().as_str() {
            "A" => order.push(RecordType::A),
            "AAAA" => order.push(RecordType::Aaaa),
            "SRV" => order.push(RecordType::Srv),
            // The type that answered last is always asked first; servers follow CNAMEs.
            "LAST" | "CNAME" => {}
            _ => bail!("dns_order: expected LAST, SRV, A, AAAA or CNAME (got {token:?})"),
        }
    }
    if !order.iter().any(|t| matches!(t, RecordType::A | RecordType::Aaaa)) {
        bail!("dns_order: must name A or AAAA");
    }
    let seconds = |key: &str| parse_duration(key, raw.get(key));
    let hosts_path = raw.get("dns_hostsfile");
    Ok(DnsSettings {
        servers,
        hosts: if hosts_path.is_empty() {
            Default::default()
        } else {
            read_hosts_file(std::path::Path::new(hosts_path))
        },
        order,
        valid_ttl: match raw.get("dns_valid_ttl").trim() {
            "" => None,
            value => Some(parse_duration("dns_valid_ttl", value)?),
        },
        stale_ttl: seconds("dns_stale_ttl")?,
        not_found_ttl: seconds("dns_not_found_ttl")?,
        error_ttl: seconds("dns_error_ttl")?,
        timeout: Duration::from_secs(2),
    })
}

/// The size of `nginx_http_large_client_header_buffers` (`4 8k`: 8192).
pub(super) fn large_header_buffer(value: &str) -> Result<usize> {
    const KEY: &str = "nginx_http_large_client_header_buffers";
    let mut words = value.split_whitespace();
    match (words.next().map(|n| parse_number(KEY, n)), words.next(), words.next()) {
        (Some(Ok(count)), Some(size), None) if count >= 1 => match parse_size(KEY, size)? {
            size if size >= 1024 => Ok(size),
            _ => bail!("{KEY}: a buffer must be at least 1k (got {value:?})"),
        },
        _ => bail!("{KEY}: expected `<number> <size>`, as nginx's large_client_header_buffers (got {value:?})"),
    }
}
