//! Admin API connections write at most [`MAX_WRITE`] bytes per system call.
//!
//! The kernel this runs on is built without preemption inside system calls
//! (`CONFIG_PREEMPT_NONE`, the usual server setting): while a thread copies
//! a buffer into a socket, and on loopback also runs the receiving side's
//! TCP processing, nothing else gets that core, whatever the thread's
//! priority. The Admin API thread runs under `SCHED_IDLE` on the workers'
//! cores, and a `/metrics` body with 10,000 routes is 57 MB: written in one
//! call, a worker woken meanwhile waited for the whole copy (paced load,
//! scraped every 100 ms: p99 0.9 ms without scrapes, 5.3 ms with). Short
//! writes end each call within tens of microseconds, and a worker that
//! wakes takes the core back at the next return to user space. The socket
//! buffer keeps its size, so a distant client's transfer is not slowed.
//! Between writes the thread also yields the core every
//! [`strait_runtime::pace::SLICE`] (see that module).
//!
//! A write that the client leaves waiting for [`SEND_TIMEOUT`] (its window
//! stays full: it stopped reading) fails with `TimedOut`, and hyper closes
//! the connection, like nginx's `send_timeout`: the time between two
//! writes that go through, not the whole transfer. Without it, a client
//! that stops reading mid-answer would hold the connection, and what is
//! queued for it, for as long as it stays connected.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use strait_runtime::pace::Pacer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most one write system call is given.
pub const MAX_WRITE: usize = 64 * 1024;

/// How long a write may wait on a client that takes nothing.
pub const SEND_TIMEOUT: Duration = Duration::from_secs(60);

/// A stream whose writes are cut to [`MAX_WRITE`] bytes, and fail once
/// one has waited [`SEND_TIMEOUT`] without progress.
pub struct ShortWrites<S> {
    stream: S,
    pacer: Pacer,
    send_timeout: Duration,
    /// Armed by a write that had to wait; disarmed by any that goes through.
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> ShortWrites<S> {
    pub fn new(stream: S) -> ShortWrites<S> {
        ShortWrites::with_send_timeout(stream, SEND_TIMEOUT)
    }

    pub fn with_send_timeout(stream: S, send_timeout: Duration) -> ShortWrites<S> {
        ShortWrites {
            stream,
            pacer: Pacer::new(),
            send_timeout,
            stalled: None,
        }
    }

    /// `polled` as it is, unless the write it reports has been waiting for
    /// the send timeout: then `TimedOut`.
    fn watch<T>(&mut self, cx: &mut Context<'_>, polled: Poll<io::Result<T>>) -> Poll<io::Result<T>> {
        if !polled.is_pending() {
            self.stalled = None;
            return polled;
        }
        let timeout = self.send_timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        match stalled.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the client took nothing for {} s", timeout.as_secs_f64()),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for ShortWrites<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for ShortWrites<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.pacer.tick();
        let len = buf.len().min(MAX_WRITE);
        let polled = Pin::new(&mut self.stream).poll_write(cx, &buf[..len]);
        self.watch(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.pacer.tick();
        // Whole slices while they fit; a first slice larger than the limit
        // goes alone, cut.
        let mut total = 0;
        let mut count = 0;
        for buf in bufs {
            if total + buf.len() > MAX_WRITE {
                break;
            }
            total += buf.len();
            count += 1;
        }
        let polled = match (count, bufs.first()) {
            (0, Some(first)) => {
                let len = first.len().min(MAX_WRITE);
                Pin::new(&mut self.stream).poll_write(cx, &first[..len])
            }
            _ => Pin::new(&mut self.stream).poll_write_vectored(cx, &bufs[..count]),
        };
        self.watch(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_flush(cx);
        self.watch(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.stream).poll_shutdown(cx);
        self.watch(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Records the length of every write it is given.
    #[derive(Default)]
    struct Recorder {
        writes: Vec<usize>,
        data: Vec<u8>,
    }

    impl AsyncWrite for Recorder {
        fn poll_write(mut self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
            self.writes.push(buf.len());
            self.data.extend_from_slice(buf);
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_write_vectored(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            bufs: &[IoSlice<'_>],
        ) -> Poll<io::Result<usize>> {
            let len = bufs.iter().map(|b| b.len()).sum();
            self.writes.push(len);
            for buf in bufs {
                self.data.extend_from_slice(buf);
            }
            Poll::Ready(Ok(len))
        }
        fn is_write_vectored(&self) -> bool {
            true
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncRead for Recorder {
        fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, _: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn every_write_is_cut_and_every_byte_arrives() {
        let body: Vec<u8> = (0..(3 * MAX_WRITE + 17)).map(|i| (i % 251) as u8).collect();
        let mut stream = ShortWrites::new(Recorder::default());
        stream.write_all(&body).await.unwrap();
        let small = [7u8; 100];
        let slices = [IoSlice::new(&small), IoSlice::new(&body), IoSlice::new(&small)];
        let mut written = 0;
        while written < 100 {
            written += stream.write_vectored(&slices).await.unwrap();
        }
        assert!(
            stream.stream.writes.iter().all(|&len| len <= MAX_WRITE),
            "{:?}",
            stream.stream.writes
        );
        assert_eq!(&stream.stream.data[..body.len()], &body[..]);
        assert_eq!(stream.stream.writes[..4], [MAX_WRITE, MAX_WRITE, MAX_WRITE, 17]);
        // The large second slice does not ride along with the first.
        assert_eq!(stream.stream.writes[4], 100);
        let mut none = [0u8; 1];
        assert_eq!(stream.read(&mut none).await.unwrap(), 0);
    }

    /// Writes `total` bytes into `stream` (a duplex end whose peer holds
    /// 1 KiB) and flushes; a write still waiting after 10 s is a failure.
    async fn write_through(stream: &mut ShortWrites<tokio::io::DuplexStream>, total: usize) -> io::Result<()> {
        let write = async {
            stream.write_all(&vec![b'x'; total]).await?;
            stream.flush().await
        };
        tokio::time::timeout(Duration::from_secs(10), write)
            .await
            .expect("the write neither went through nor failed within 10 s")
    }

    #[tokio::test]
    async fn a_write_the_client_never_takes_fails_after_the_send_timeout() {
        let (near, _far) = tokio::io::duplex(1024);
        let timeout = Duration::from_millis(300);
        let mut stream = ShortWrites::with_send_timeout(near, timeout);
        let started = std::time::Instant::now();
        let error = write_through(&mut stream, 64 * 1024).await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::TimedOut, "{error}");
        assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn a_client_that_keeps_reading_slowly_is_never_cut_off() {
        let (near, mut far) = tokio::io::duplex(1024);
        // Each wait for the client is shorter than the timeout, their sum
        // many times longer: the timeout is between writes that go through.
        let timeout = Duration::from_millis(300);
        let mut stream = ShortWrites::with_send_timeout(near, timeout);
        let total = 8 * 1024;
        let reader = tokio::spawn(async move {
            let mut got = 0;
            let mut buf = [0u8; 512];
            while got < total {
                tokio::time::sleep(Duration::from_millis(100)).await;
                got += far.read(&mut buf).await.unwrap();
            }
            got
        });
        let started = std::time::Instant::now();
        write_through(&mut stream, total).await.unwrap();
        assert!(started.elapsed() > 4 * timeout, "{:?}", started.elapsed());
        assert_eq!(reader.await.unwrap(), total);
    }
}
