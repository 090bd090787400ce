//! One write per turn for HTTP/2 connections.
//!
//! The `h2` codec writes a DATA frame of 256 bytes or more to its transport
//! on its own (its payload is not copied into the codec's buffer), so a
//! connection task that took frames from several streams in one turn made
//! one `writev` per frame. Under a gRPC load of small messages, where each
//! stream's inbox hands over a few kilobytes at a time, Strait made about
//! seven sends per event-loop turn where Envoy, which writes each
//! connection once at the end of its loop, made one or two. A send on
//! loopback also pays for the receiver's TCP work, so each extra one is
//! costly.
//!
//! [`coalesced`] splits a transport in two. [`Coalesced`], the half the
//! codec owns, keeps what the codec writes in a buffer (a flush of it is
//! free). [`Flushing`] wraps the future that drives the connection (its
//! handshake, then its loop): after every poll of it, everything the codec
//! wrote in that poll goes out in one write. A transport that cannot take
//! it all wakes the task when it can take more; what the codec may write
//! meanwhile is bounded by [`BUFFER_LIMIT`], past which its writes wait.

use std::future::Future;
use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Bytes the codec may have written but not yet sent before its writes wait
/// for the transport.
pub const BUFFER_LIMIT: usize = 64 * 1024;

/// A write this large into an empty buffer goes straight to the transport.
const DIRECT: usize = 16 * 1024;

/// A buffer that grew past this for a busy turn is freed once sent, so an
/// idle connection keeps no more than this.
const KEEP: usize = 16 * 1024;

struct Out<IO> {
    io: IO,
    buf: Vec<u8>,
    /// Bytes of `buf` already sent.
    sent: usize,
    /// A failed send, reported to the codec on its next read or write.
    failed: Option<io::ErrorKind>,
}

impl<IO: AsyncWrite + Unpin> Out<IO> {
    fn pending(&self) -> usize {
        self.buf.len() - self.sent
    }

    fn check(&self) -> io::Result<()> {
        match self.failed {
            Some(kind) => Err(kind.into()),
            None => Ok(()),
        }
    }

    /// Send everything buffered, then flush the transport.
    fn send(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        while self.sent < self.buf.len() {
            let written = match Pin::new(&mut self.io).poll_write(cx, &self.buf[self.sent..]) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Ok(0)) => Err(io::ErrorKind::WriteZero.into()),
                Poll::Ready(result) => result,
            };
            match written {
                Ok(n) => self.sent += n,
                Err(error) => {
                    self.failed = Some(error.kind());
                    return Poll::Ready(Err(error));
                }
            }
        }
        if self.buf.capacity() > KEEP {
            self.buf = Vec::new();
        } else {
            self.buf.clear();
        }
        self.sent = 0;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    /// Copy `slices` into the buffer. An empty one starts at [`KEEP`] bytes, so
    /// a turn's writes seldom make it grow step by step.
    fn append<S: std::ops::Deref<Target = [u8]>>(&mut self, slices: &[S]) {
        let total: usize = slices.iter().map(|s| s.len()).sum();
        let wanted = if self.buf.capacity() == 0 {
            total.max(KEEP)
        } else {
            total
        };
        self.buf.reserve(wanted);
        for slice in slices {
            self.buf.extend_from_slice(slice);
        }
    }

    /// Room for the codec's next write: `Pending` while the buffer is full
    /// and the transport takes no more.
    fn make_room(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        if self.pending() >= BUFFER_LIMIT {
            ready!(self.send(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

/// Split `io` into the transport for the codec and the [`Flusher`] that
/// sends what it wrote.
pub fn coalesced<IO>(io: IO) -> (Coalesced<IO>, Flusher<IO>) {
    let out = Arc::new(Mutex::new(Out {
        io,
        buf: Vec::new(),
        sent: 0,
        failed: None,
    }));
    (Coalesced { out: out.clone() }, Flusher { out })
}

fn lock<IO>(out: &Mutex<Out<IO>>) -> MutexGuard<'_, Out<IO>> {
    out.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The codec's half: reads go to the transport, writes to the buffer.
pub struct Coalesced<IO> {
    out: Arc<Mutex<Out<IO>>>,
}

impl<IO: AsyncRead + AsyncWrite + Unpin> AsyncRead for Coalesced<IO> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut out = lock(&self.out);
        out.check()?;
        Pin::new(&mut out.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Coalesced<IO> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut out = lock(&self.out);
        ready!(out.make_room(cx))?;
        if out.pending() == 0 && data.len() >= DIRECT {
            return Pin::new(&mut out.io).poll_write(cx, data);
        }
        out.append(&[data]);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let mut out = lock(&self.out);
        ready!(out.make_room(cx))?;
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        if out.pending() == 0 && total >= DIRECT {
            return Pin::new(&mut out.io).poll_write_vectored(cx, bufs);
        }
        out.append(bufs);
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    /// Free while bytes wait in the buffer: [`Flushing`] sends them when the
    /// codec's turn ends.
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut out = lock(&self.out);
        out.check()?;
        if out.pending() > 0 {
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut out.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut out = lock(&self.out);
        ready!(out.send(cx))?;
        Pin::new(&mut out.io).poll_shutdown(cx)
    }
}

/// The half that sends: held by the task that drives the connection.
pub struct Flusher<IO> {
    out: Arc<Mutex<Out<IO>>>,
}

impl<IO> Clone for Flusher<IO> {
    fn clone(&self) -> Self {
        Flusher { out: self.out.clone() }
    }
}

impl<IO> Flusher<IO> {
    /// The transport back, with what the codec wrote that it has not taken
    /// yet, once the codec's end and every other flusher are gone.
    pub fn into_io(self) -> Option<(IO, Vec<u8>)> {
        let out = Arc::try_unwrap(self.out).ok()?;
        let out = out.into_inner().unwrap_or_else(|poisoned| poisoned.into_inner());
        let unsent = out.buf.get(out.sent..).map(<[u8]>::to_vec).unwrap_or_default();
        Some((out.io, unsent))
    }
}

impl<IO: AsyncWrite + Unpin> Flusher<IO> {
    /// Send what the codec wrote. A transport that is full wakes the task
    /// when it drains; a failure is kept for the codec, and the task woken
    /// so the codec meets it.
    fn send(&self, cx: &mut Context<'_>) {
        let mut out = lock(&self.out);
        if out.pending() == 0 {
            return;
        }
        if let Poll::Ready(Err(_)) = out.send(cx) {
            cx.waker().wake_by_ref();
        }
    }
}

/// Drives `future` (a connection's handshake or loop) and sends what its
/// codec wrote after every poll.
pub struct Flushing<F, IO> {
    future: Pin<Box<F>>,
    flusher: Flusher<IO>,
}

impl<F: Future, IO: AsyncWrite + Unpin> Flushing<F, IO> {
    pub fn new(future: F, flusher: Flusher<IO>) -> Self {
        Flushing {
            future: Box::pin(future),
            flusher,
        }
    }
}

impl<F: Future, IO: AsyncWrite + Unpin> Future for Flushing<F, IO> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let polled = self.future.as_mut().poll(cx);
        self.flusher.send(cx);
        polled
    }
}

#[cfg(test)]
mod tests {
    use std::future::poll_fn;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt, DuplexStream};

    use super::*;

    /// A transport that counts the writes that reach it.
    struct Counted {
        io: DuplexStream,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncRead for Counted {
        fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for Counted {
        fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
            let written = Pin::new(&mut self.io).poll_write(cx, data);
            if let Poll::Ready(Ok(_)) = written {
                self.writes.fetch_add(1, Ordering::Relaxed);
            }
            written
        }

        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_flush(cx)
        }

        fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.io).poll_shutdown(cx)
        }
    }

    fn counted(capacity: usize) -> (Counted, DuplexStream, Arc<AtomicUsize>) {
        let (near, far) = duplex(capacity);
        let writes = Arc::new(AtomicUsize::new(0));
        let io = Counted {
            io: near,
            writes: writes.clone(),
        };
        (io, far, writes)
    }

    /// Write `chunk` as the codec does with a DATA frame it chains: the
    /// bytes, then a flush.
    fn write_frame<IO: AsyncWrite + Unpin>(io: &mut Coalesced<IO>, cx: &mut Context<'_>, chunk: &[u8]) {
        let mut pinned = Pin::new(io);
        assert!(matches!(pinned.as_mut().poll_write(cx, chunk), Poll::Ready(Ok(n)) if n == chunk.len()));
        assert!(matches!(pinned.poll_flush(cx), Poll::Ready(Ok(()))));
    }

    #[tokio::test]
    async fn what_the_codec_writes_in_one_turn_goes_out_in_one_write() {
        let (io, mut far, writes) = counted(1 << 20);
        let (mut io, flusher) = coalesced(io);
        let frames: Vec<Vec<u8>> = (0..3u8).map(|i| vec![i; 1000]).collect();
        // One poll: three frames, each flushed, as h2 writes frames it chains.
        Flushing::new(
            poll_fn(|cx| {
                for frame in &frames {
                    write_frame(&mut io, cx, frame);
                }
                assert_eq!(writes.load(Ordering::Relaxed), 0, "nothing is sent inside the turn");
                Poll::Ready(())
            }),
            flusher,
        )
        .await;
        assert_eq!(writes.load(Ordering::Relaxed), 1);
        let mut got = vec![0; 3000];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(got, frames.concat());
    }

    #[tokio::test]
    async fn a_full_transport_makes_writes_wait_and_loses_nothing() {
        // A pipe of 4 KiB: the buffer fills and the codec's writes wait for the reader.
        let (io, mut far, _) = counted(4096);
        let (mut io, flusher) = coalesced(io);
        let data: Vec<u8> = (0..(1usize << 20)).map(|i| (i % 251) as u8).collect();
        let expected = data.clone();
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            far.read_to_end(&mut got).await.unwrap();
            got
        });
        Flushing::new(
            async move {
                for piece in data.chunks(700) {
                    io.write_all(piece).await.unwrap();
                    io.flush().await.unwrap();
                    let held = lock(&io.out).pending();
                    assert!(held < BUFFER_LIMIT + 700, "{held} bytes held");
                }
                io.shutdown().await.unwrap();
            },
            flusher,
        )
        .await;
        assert_eq!(reader.await.unwrap(), expected);
    }

    #[tokio::test]
    async fn a_buffer_grown_by_a_busy_turn_is_freed_once_sent() {
        let (io, mut far, _) = counted(1 << 20);
        let (mut io, flusher) = coalesced(io);
        Flushing::new(
            poll_fn(|cx| {
                for _ in 0..40 {
                    write_frame(&mut io, cx, &[7u8; 1000]);
                }
                assert!(lock(&io.out).buf.capacity() >= 40_000);
                Poll::Ready(())
            }),
            flusher,
        )
        .await;
        assert!(lock(&io.out).buf.capacity() <= KEEP);
        let mut got = vec![0; 40_000];
        far.read_exact(&mut got).await.unwrap();
        assert!(got.iter().all(|&b| b == 7));
    }

    #[tokio::test]
    async fn small_and_large_writes_keep_their_order() {
        let (io, mut far, _) = counted(1 << 20);
        let (mut io, flusher) = coalesced(io);
        let small = vec![1u8; 100];
        let large = vec![2u8; DIRECT * 2];
        Flushing::new(
            async {
                io.write_all(&small).await.unwrap();
                io.write_all(&large).await.unwrap();
                io.flush().await.unwrap();
                io.write_all(&large).await.unwrap();
                io.write_all(&small).await.unwrap();
                io.shutdown().await.unwrap();
            },
            flusher,
        )
        .await;
        let mut got = Vec::new();
        far.read_to_end(&mut got).await.unwrap();
        assert_eq!(got, [&small[..], &large[..], &large[..], &small[..]].concat());
    }

    #[tokio::test]
    async fn a_failed_send_reaches_the_codec() {
        let (io, far, _) = counted(1 << 20);
        let (mut io, flusher) = coalesced(io);
        drop(far);
        Flushing::new(
            async {
                // Buffered: the write itself succeeds ...
                io.write_all(b"frame").await.unwrap();
            },
            flusher,
        )
        .await;
        // ... the send at the end of the turn fails, and the codec meets it next.
        let error = io.write_all(b"more").await.unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::BrokenPipe);
        let mut buf = [0u8; 8];
        assert!(io.read(&mut buf).await.is_err());
    }
}
