//! Handing the listening sockets from a running node to its successor
//! (`strait restart`, a binary upgrade), as nginx and Pingora do: the new
//! process asks the running one over a Unix socket in the prefix, receives
//! duplicates of every listening socket (`SCM_RIGHTS`), serves them, and
//! tells the old one, which stops accepting and drains as with `strait
//! quit`. The sockets are never closed in between, so a connection waiting
//! in a listen queue is served by one process or the other, never reset.
//!
//! The exchange, one line each way, fds after `SOCKETS`:
//!
//! ```text
//! new → old   TAKEOVER <pid>
//! old → new   SOCKETS <count>      then <count> descriptors, in messages of up to 64
//! new → old   READY                the new process serves the sockets
//! old → new   DRAINING <version>   the old one accepts nothing more; its Admin API is closed
//! ```
//!
//! A successor that goes away before `READY` changes nothing: the running
//! node keeps serving.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

/// Descriptors per message (the kernel takes up to 253).
const FDS_PER_MESSAGE: usize = 64;

/// Where the running node listens for its successor.
pub fn socket_path(prefix: &Path) -> PathBuf {
    prefix.join("sockets").join("handover.sock")
}

/// What the serving side learns from a successor that is ready.
pub struct Successor {
    stream: UnixStream,
    pub pid: u32,
}

impl Successor {
    /// Tell the successor this node has stopped accepting and closed its
    /// Admin API; `version`: the configuration version it served last.
    pub fn draining(mut self, version: u64) {
        let _ = writeln!(self.stream, "DRAINING {version}");
    }
}

/// Listen for a successor in `prefix`; `on_ready` is called, on the
/// listening thread, with each successor that took the sockets and serves
/// them (after that, the thread ends: a node hands over once).
pub fn listen(prefix: &Path, on_ready: impl Fn(Successor) + Send + 'static) -> Result<()> {
    let path = socket_path(prefix);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    // A file left by a node that is gone (the PID file said so), or the
    // one this process's predecessor listened on: this node's now.
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).with_context(|| format!("listening on {}", path.display()))?;
    std::thread::Builder::new()
        .name("strait-handover".to_string())
        .spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                match serve_one(stream) {
                    Ok(successor) => {
                        tracing::info!(
                            pid = successor.pid,
                            "hand-over: the new process serves the sockets; draining"
                        );
                        on_ready(successor);
                        return;
                    }
                    Err(error) => tracing::warn!(%error, "hand-over abandoned; this process keeps serving"),
                }
            }
        })
        .context("starting the hand-over thread")?;
    Ok(())
}

fn serve_one(mut stream: UnixStream) -> Result<Successor> {
    // The successor starts everything else before it asks; a stalled one
    // does not hold the socket.
    stream.set_read_timeout(Some(Duration::from_secs(120)))?;
    let line = read_line(&mut stream)?;
    let pid = line
        .strip_prefix("TAKEOVER ")
        .and_then(|pid| pid.trim().parse::<u32>().ok())
        .ok_or_else(|| anyhow!("unexpected request {line:?}"))?;
    let sockets = strait_proxy::wire::listen::listening_sockets();
    tracing::info!(pid, sockets = sockets.len(), "hand-over: passing the listening sockets");
    writeln!(stream, "SOCKETS {}", sockets.len())?;
    let fds: Vec<RawFd> = sockets.iter().map(|(_, fd)| *fd).collect();
    for chunk in fds.chunks(FDS_PER_MESSAGE) {
        send_fds(&stream, chunk)?;
    }
    let line = read_line(&mut stream)?;
    if line != "READY" {
        bail!("the new process (pid {pid}) did not take the sockets: {line:?}");
    }
    Ok(Successor { stream, pid })
}

/// The successor's side, kept until the old node said it drains.
pub struct Takeover {
    stream: UnixStream,
}

/// Ask the node serving `prefix` for its listening sockets; they are
/// claimed by the listeners this process binds
/// ([`strait_proxy::wire::listen::inherit`]).
pub fn take_over(prefix: &Path) -> Result<Takeover> {
    let path = socket_path(prefix);
    let mut stream = UnixStream::connect(&path)
        .with_context(|| format!("connecting to the running node's hand-over socket {}", path.display()))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    writeln!(stream, "TAKEOVER {}", std::process::id())?;
    let line = read_line(&mut stream)?;
    let count: usize = line
        .strip_prefix("SOCKETS ")
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| anyhow!("unexpected answer {line:?}"))?;
    let mut sockets = Vec::with_capacity(count);
    while sockets.len() < count {
        let fds = receive_fds(&stream, (count - sockets.len()).min(FDS_PER_MESSAGE))?;
        if fds.is_empty() {
            bail!(
                "the running node closed the hand-over after {} of {count} sockets",
                sockets.len()
            );
        }
        sockets.extend(fds.into_iter().map(|fd| {
            // SAFETY: the descriptor was just received with SCM_RIGHTS: it
            // is open, ours alone, and a listening TCP socket.
            unsafe { std::net::TcpListener::from_raw_fd(fd) }
        }));
    }
    tracing::info!(sockets = count, "hand-over: listening sockets received");
    strait_proxy::wire::listen::inherit(sockets);
    Ok(Takeover { stream })
}

impl Takeover {
    /// Tell the old node this one serves, and wait (up to `limit`) until it
    /// stopped accepting and closed its Admin API; the version it served
    /// last, when it said.
    pub fn ready(mut self, limit: Duration) -> Option<u64> {
        if writeln!(self.stream, "READY").is_err() {
            return None;
        }
        let _ = self.stream.set_read_timeout(Some(limit));
        let line = read_line(&mut self.stream).ok()?;
        line.strip_prefix("DRAINING ").and_then(|v| v.trim().parse().ok())
    }
}

/// One line, read a byte at a time so no byte past it (one carrying
/// descriptors) is consumed.
fn read_line(stream: &mut UnixStream) -> Result<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        match stream.read(&mut byte)? {
            0 => bail!("the other process closed the hand-over socket"),
            _ if byte[0] == b'\n' => break,
            _ if line.len() > 256 => bail!("hand-over line too long"),
            _ => line.push(byte[0]),
        }
    }
    String::from_utf8(line).map_err(|_| anyhow!("hand-over line is not text"))
}

/// A message header with one data buffer (`iov`) and `space` bytes of
/// control buffer (`control`, 8-byte aligned as cmsg headers need).
fn message_header(iov: &mut libc::iovec, control: &mut [u64], space: usize) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is a valid empty header.
    let mut message: libc::msghdr = unsafe { std::mem::zeroed() };
    message.msg_iov = iov;
    message.msg_iovlen = 1;
    message.msg_control = control.as_mut_ptr().cast();
    message.msg_controllen = space as _;
    message
}

fn send_fds(stream: &UnixStream, fds: &[RawFd]) -> Result<()> {
    let payload = [b'F'];
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: 1,
    };
    let data_len = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE computes a size from a length.
    let space = unsafe { libc::CMSG_SPACE(data_len as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let message = message_header(&mut iov, &mut control, space);
    // SAFETY: the header points into `iov` and `control`, which outlive the
    // sendmsg call; the control buffer holds one SCM_RIGHTS message of
    // `fds.len()` descriptors (CMSG_SPACE of their size).
    unsafe {
        let header = libc::CMSG_FIRSTHDR(&message);
        (*header).cmsg_level = libc::SOL_SOCKET;
        (*header).cmsg_type = libc::SCM_RIGHTS;
        (*header).cmsg_len = libc::CMSG_LEN(data_len as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr(), libc::CMSG_DATA(header).cast::<RawFd>(), fds.len());
        if libc::sendmsg(stream.as_raw_fd(), &message, libc::MSG_NOSIGNAL) < 0 {
            return Err(std::io::Error::last_os_error()).context("sending the listening sockets");
        }
    }
    Ok(())
}

fn receive_fds(stream: &UnixStream, most: usize) -> Result<Vec<RawFd>> {
    let mut payload = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: CMSG_SPACE computes a size from a length.
    let space = unsafe { libc::CMSG_SPACE((most * std::mem::size_of::<RawFd>()) as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut fds = Vec::new();
    let mut message = message_header(&mut iov, &mut control, space);
    // SAFETY: the msghdr points into buffers that outlive recvmsg; the
    // control messages read are bounded by msg_controllen as the kernel set
    // it, and each SCM_RIGHTS payload holds whole descriptors.
    unsafe {
        let read = libc::recvmsg(stream.as_raw_fd(), &mut message, libc::MSG_CMSG_CLOEXEC);
        if read < 0 {
            return Err(std::io::Error::last_os_error()).context("receiving the listening sockets");
        }
        if read == 0 {
            return Ok(fds);
        }
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header).cast::<RawFd>();
                for index in 0..bytes / std::mem::size_of::<RawFd>() {
                    fds.push(std::ptr::read_unaligned(data.add(index)));
                }
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
        if message.msg_flags & libc::MSG_CTRUNC != 0 {
            for fd in &fds {
                libc::close(*fd);
            }
            bail!("the listening sockets did not fit the message (truncated)");
        }
    }
    Ok(fds)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Descriptors sent in chunks arrive whole and are the same sockets:
    /// a connection queued on the sender's socket is accepted from the
    /// received one.
    #[test]
    fn listening_sockets_cross_a_unix_socket() {
        let (left, right) = UnixStream::pair().expect("pair");
        let listeners: Vec<std::net::TcpListener> = (0..70)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").expect("bind"))
            .collect();
        let fds: Vec<RawFd> = listeners.iter().map(|l| l.as_raw_fd()).collect();
        for chunk in fds.chunks(FDS_PER_MESSAGE) {
            send_fds(&left, chunk).expect("send");
        }
        let mut received = Vec::new();
        while received.len() < fds.len() {
            received.extend(receive_fds(&right, FDS_PER_MESSAGE).expect("receive"));
        }
        assert_eq!(received.len(), 70);
        let queued = std::net::TcpStream::connect(listeners[69].local_addr().expect("addr")).expect("connect");
        // SAFETY: a descriptor just received, open and owned by nobody else.
        let taken = unsafe { std::net::TcpListener::from_raw_fd(received[69]) };
        assert_eq!(
            taken.local_addr().expect("addr"),
            listeners[69].local_addr().expect("addr")
        );
        drop(listeners);
        let (accepted, _) = taken.accept().expect("the queued connection, from the received socket");
        assert_eq!(accepted.peer_addr().expect("peer"), queued.local_addr().expect("local"));
        for fd in &received[..69] {
            // SAFETY: each is an open descriptor this test owns.
            unsafe { libc::close(*fd) };
        }
    }
}
