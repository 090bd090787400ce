//! Many UDP datagrams in few system calls: `sendmmsg(2)` on a connected
//! socket, up to [`BATCH`] datagrams a call (statsd's and datadog's lines,
//! a datagram each by default: a `sendto` per line cost a system call and
//! a pass through tokio's readiness each).
//!
//! One of the crate's two modules with `unsafe` (with `background`): the
//! `sendmmsg` call, whose pointers are to locals that outlive it and that
//! the kernel only reads.
#![allow(unsafe_code)]

use std::io;

use tokio::io::Interest;
use tokio::net::UdpSocket;

/// The most datagrams one call sends (Linux's `UIO_MAXIOV`).
const BATCH: usize = 1024;

/// Sends each of `datagrams` to the socket's connected peer, in order.
pub async fn send_all(socket: &UdpSocket, datagrams: &[&[u8]]) -> io::Result<()> {
    let mut at = 0;
    while at < datagrams.len() {
        socket.writable().await?;
        match socket.try_io(Interest::WRITABLE, || send_batch(socket, &datagrams[at..])) {
            Ok(sent) => at += sent,
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => {}
            Err(error) => return Err(error),
        }
    }
    Ok(())
}

#[cfg(target_os = "linux")]
fn send_batch(socket: &UdpSocket, datagrams: &[&[u8]]) -> io::Result<usize> {
    use std::os::fd::AsRawFd;
    let count = datagrams.len().min(BATCH);
    let mut iovecs: Vec<libc::iovec> = datagrams[..count]
        .iter()
        .map(|datagram| libc::iovec {
            iov_base: datagram.as_ptr() as *mut libc::c_void,
            iov_len: datagram.len(),
        })
        .collect();
    let mut messages: Vec<libc::mmsghdr> = iovecs
        .iter_mut()
        .map(|iovec| {
            // SAFETY: an all-zero mmsghdr is a valid one (no name, no
            // control data, no flags); the fields set below are the only
            // ones the call reads besides those.
            let mut message: libc::mmsghdr = unsafe { std::mem::zeroed() };
            message.msg_hdr.msg_iov = iovec;
            message.msg_hdr.msg_iovlen = 1;
            message
        })
        .collect();
    // SAFETY: `messages` holds `count` initialized headers, each pointing at
    // one iovec of `iovecs`, each pointing at a datagram of `datagrams`: all
    // live until the call returns and are only read by the kernel (it writes
    // each header's `msg_len`, inside `messages`). The socket is connected,
    // so no address is given.
    let sent = unsafe {
        libc::sendmmsg(
            socket.as_raw_fd(),
            messages.as_mut_ptr(),
            count as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    match sent {
        n if n < 0 => Err(io::Error::last_os_error()),
        // Zero sent without an error: nothing was ready, try when writable.
        0 => Err(io::ErrorKind::WouldBlock.into()),
        n => Ok(n as usize),
    }
}

#[cfg(not(target_os = "linux"))]
fn send_batch(socket: &UdpSocket, datagrams: &[&[u8]]) -> io::Result<usize> {
    socket.try_send(datagrams[0]).map(|_| 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Datagrams sent in batches arrive, each whole and in order.
    #[tokio::test]
    async fn every_datagram_arrives_whole_and_in_order() {
        let receiver = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        receiver
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.connect(receiver.local_addr().unwrap()).await.unwrap();
        let lines: Vec<Vec<u8>> = (0..1500).map(|n| format!("kong.metric.{n}:1|c").into_bytes()).collect();
        let datagrams: Vec<&[u8]> = lines.iter().map(Vec::as_slice).collect();
        let reading = std::thread::spawn(move || {
            let mut got = Vec::new();
            let mut buf = [0u8; 256];
            while got.len() < 1500 {
                let n = receiver.recv(&mut buf).unwrap();
                got.push(buf[..n].to_vec());
            }
            got
        });
        for chunk in datagrams.chunks(100) {
            send_all(&socket, chunk).await.unwrap();
            // The receiver's buffer is finite: let it read.
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        assert_eq!(reading.join().unwrap(), lines);
    }
}
