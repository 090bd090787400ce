//! Listener specifications in Kong's syntax and socket creation.

use std::net::{SocketAddr, ToSocketAddrs};

use socket2::{Domain, Protocol, Socket, Type};

/// One entry of `proxy_listen` / `admin_listen`: `ADDR:PORT [ssl] [http2] [reuseport] [backlog=N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenSpec {
    pub addr: SocketAddr,
    pub ssl: bool,
    pub http2: bool,
    pub reuseport: bool,
    pub backlog: i32,
}

/// Parse a comma-separated listen setting; `off` gives no listener.
pub fn parse_listen(setting: &str) -> Result<Vec<ListenSpec>, String> {
    let setting = setting.trim();
    if setting.is_empty() || setting == "off" {
        return Ok(Vec::new());
    }
    setting.split(',').map(parse_one).collect()
}

fn parse_one(entry: &str) -> Result<ListenSpec, String> {
    let mut words = entry.split_whitespace();
    let address = words.next().ok_or_else(|| format!("empty listen entry in {entry:?}"))?;
    let addr = address
        .to_socket_addrs()
        .map_err(|e| format!("invalid listen address {address:?}: {e}"))?
        .next()
        .ok_or_else(|| format!("listen address {address:?} resolves to nothing"))?;
    let mut spec = ListenSpec {
        addr,
        ssl: false,
        http2: false,
        reuseport: false,
        backlog: 16384,
    };
    for flag in words {
        match flag {
            "ssl" => spec.ssl = true,
            "http2" => spec.http2 = true,
            "reuseport" => spec.reuseport = true,
            "deferred" | "bind" | "proxy_protocol" => {}
            other => match other.strip_prefix("backlog=") {
                Some(n) => spec.backlog = n.parse().map_err(|_| format!("invalid backlog in {entry:?}"))?,
                None => return Err(format!("unknown listen flag {other:?} in {entry:?}")),
            },
        }
    }
    Ok(spec)
}

/// Bind a listening socket; `reuseport` lets several workers bind the same address.
pub fn bind(spec: &ListenSpec, reuseport: bool) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(spec.addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuseport {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&spec.addr.into())?;
    socket.listen(spec.backlog)?;
    Ok(socket.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kong_listen_syntax() {
        let specs = parse_listen("0.0.0.0:8000 reuseport backlog=16384, 127.0.0.1:8443 http2 ssl").expect("valid");
        assert_eq!(specs.len(), 2);
        assert!(specs[0].reuseport && !specs[0].ssl);
        assert!(specs[1].ssl && specs[1].http2);
        assert_eq!(specs[1].addr.port(), 8443);
        assert!(parse_listen("off").expect("off").is_empty());
        assert!(parse_listen("0.0.0.0:80 bogus").is_err());
        assert!(parse_listen("nonsense").is_err());
    }
}
