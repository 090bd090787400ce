//! Listener specifications in Kong's syntax and socket creation.

use std::net::{SocketAddr, ToSocketAddrs};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Mutex;

use socket2::{Domain, Protocol, Socket, Type};

/// One entry of `proxy_listen` / `admin_listen`: `ADDR:PORT [ssl] [http2] [http3] [reuseport] [backlog=N]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListenSpec {
    pub addr: SocketAddr,
    pub ssl: bool,
    pub http2: bool,
    /// HTTP/3 (QUIC) on the same address and port over UDP; needs `ssl`.
    pub http3: bool,
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
        http3: false,
        reuseport: false,
        backlog: 16384,
    };
    for flag in words {
        match flag {
            "ssl" => spec.ssl = true,
            "http2" => spec.http2 = true,
            "http3" => spec.http3 = true,
            "reuseport" => spec.reuseport = true,
            "deferred" | "bind" | "proxy_protocol" => {}
            other => match other.strip_prefix("backlog=") {
                Some(n) => spec.backlog = n.parse().map_err(|_| format!("invalid backlog in {entry:?}"))?,
                None => return Err(format!("unknown listen flag {other:?} in {entry:?}")),
            },
        }
    }
    if spec.http3 && !spec.ssl {
        return Err(format!("http3 needs ssl (QUIC is always TLS) in {entry:?}"));
    }
    Ok(spec)
}

/// Bind a listening socket; `reuseport` lets several workers bind the same
/// address. A socket inherited from the process this one took over from
/// ([`inherit`]) with the same address is used first: it is the same
/// socket, so connections waiting in its queue are served, not reset.
/// Every socket returned is recorded for the next hand-over
/// ([`listening_sockets`]).
pub fn bind(spec: &ListenSpec, reuseport: bool) -> std::io::Result<std::net::TcpListener> {
    bind_addr(spec.addr, reuseport, spec.backlog)
}

/// [`bind`] for a listener that has no [`ListenSpec`] (the cluster
/// listener of a control plane).
pub fn bind_addr(addr: SocketAddr, reuseport: bool, backlog: i32) -> std::io::Result<std::net::TcpListener> {
    if let Some(inherited) = take_inherited(addr) {
        inherited.set_nonblocking(true)?;
        record(&inherited);
        return Ok(inherited);
    }
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    if reuseport {
        socket.set_reuse_port(true)?;
    }
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    let socket: std::net::TcpListener = socket.into();
    record(&socket);
    Ok(socket)
}

/// Listening sockets handed over by the process this one took over from,
/// not yet claimed by a listener.
static INHERITED: Mutex<Vec<(SocketAddr, std::net::TcpListener)>> = Mutex::new(Vec::new());

/// A duplicate of every listening socket this process serves, for the
/// next hand-over.
static LISTENING: Mutex<Vec<(SocketAddr, OwnedFd)>> = Mutex::new(Vec::new());

fn record(socket: &std::net::TcpListener) {
    let (Ok(addr), Ok(fd)) = (socket.local_addr(), socket.as_fd().try_clone_to_owned()) else {
        return;
    };
    LISTENING.lock().unwrap_or_else(|e| e.into_inner()).push((addr, fd));
}

fn take_inherited(addr: SocketAddr) -> Option<std::net::TcpListener> {
    let mut inherited = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    let at = inherited.iter().position(|(local, _)| *local == addr)?;
    Some(inherited.swap_remove(at).1)
}

/// Sockets taken over from another process: each serves the listener
/// configured with its address.
pub fn inherit(sockets: Vec<std::net::TcpListener>) {
    let mut inherited = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    for socket in sockets {
        if let Ok(addr) = socket.local_addr() {
            inherited.push((addr, socket));
        }
    }
}

/// The inherited sockets of `addr` no listener claimed (the process before
/// ran more workers): they are served too, so what waits in their queues
/// is not reset.
pub fn unclaimed_inherited(addr: SocketAddr) -> Vec<std::net::TcpListener> {
    let mut inherited = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    let mut taken = Vec::new();
    while let Some(at) = inherited.iter().position(|(local, _)| *local == addr) {
        let (_, socket) = inherited.swap_remove(at);
        if socket.set_nonblocking(true).is_ok() {
            record(&socket);
            taken.push(socket);
        }
    }
    taken
}

/// Close the inherited sockets of listeners this process no longer has
/// (the settings dropped them); their addresses.
pub fn close_unclaimed() -> Vec<SocketAddr> {
    let mut inherited = INHERITED.lock().unwrap_or_else(|e| e.into_inner());
    inherited.drain(..).map(|(addr, _)| addr).collect()
}

/// Every listening socket this process serves: its address and a
/// duplicate of its descriptor, valid until [`forget_listening`].
pub fn listening_sockets() -> Vec<(SocketAddr, std::os::fd::RawFd)> {
    LISTENING
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .map(|(addr, fd)| (*addr, fd.as_raw_fd()))
        .collect()
}

/// Drop this process's duplicates of its listening sockets (it has handed
/// them over, or is stopping).
pub fn forget_listening() {
    LISTENING.lock().unwrap_or_else(|e| e.into_inner()).clear();
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
