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

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll};

use strait_runtime::pace::Pacer;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The most one write system call is given.
pub const MAX_WRITE: usize = 64 * 1024;

/// A stream whose writes are cut to [`MAX_WRITE`] bytes.
pub struct ShortWrites<S> {
    stream: S,
    pacer: Pacer,
}

impl<S> ShortWrites<S> {
    pub fn new(stream: S) -> ShortWrites<S> {
        ShortWrites {
            stream,
            pacer: Pacer::new(),
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
        Pin::new(&mut self.stream).poll_write(cx, &buf[..len])
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
        match (count, bufs.first()) {
            (0, Some(first)) => {
                let len = first.len().min(MAX_WRITE);
                Pin::new(&mut self.stream).poll_write(cx, &first[..len])
            }
            _ => Pin::new(&mut self.stream).poll_write_vectored(cx, &bufs[..count]),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_shutdown(cx)
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
}
