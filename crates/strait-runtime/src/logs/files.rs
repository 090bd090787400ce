//! Appending log lines to files without a worker ever touching the disk.
//!
//! Workers hand lines to one writer thread through a bounded channel
//! ([`append`] never blocks: a full channel drops the line and counts it).
//! The writer keeps each file open and buffered, flushing whenever the
//! channel runs empty and at least every 100 ms under steady load.
//! [`reopen_all`] (the node calls it on SIGUSR1) makes the writer close
//! every file and open it again by name on its next line, so `logrotate`
//! can move a file away and signal.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, OnceLock};

use std::time::{Duration, Instant};

/// Lines that may wait for the writer.
const CHANNEL: usize = 65_536;
/// The most a line waits in a buffer under steady load.
const FLUSH_EVERY: Duration = Duration::from_millis(100);

static GENERATION: AtomicU64 = AtomicU64::new(0);
static DROPPED: AtomicU64 = AtomicU64::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);

enum Message {
    Line(Line),
    Flush(SyncSender<()>),
}

struct Line {
    path: Arc<Path>,
    bytes: Vec<u8>,
    /// Close the file after this line (file-log's `reopen`).
    close_after: bool,
}

fn writer() -> &'static SyncSender<Message> {
    static SENDER: OnceLock<SyncSender<Message>> = OnceLock::new();
    SENDER.get_or_init(|| {
        let (sender, receiver) = mpsc::sync_channel(CHANNEL);
        std::thread::Builder::new()
            .name("strait-log-files".into())
            .spawn(move || run(receiver))
            .expect("spawning the log file writer");
        sender
    })
}

/// Queue `bytes` (one or more whole lines) for the end of file `path`.
/// Returns false when the writer is behind by [`CHANNEL`] lines: the line
/// is dropped and counted in [`dropped_total`].
pub fn append(path: &Arc<Path>, bytes: Vec<u8>, close_after: bool) -> bool {
    let line = Line {
        path: path.clone(),
        bytes,
        close_after,
    };
    match writer().try_send(Message::Line(line)) {
        Ok(()) => true,
        Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
            DROPPED.fetch_add(1, Ordering::Relaxed);
            false
        }
    }
}

/// Close every log file; each is opened again by name on its next line.
pub fn reopen_all() {
    GENERATION.fetch_add(1, Ordering::Relaxed);
}

/// Lines dropped because the writer was behind.
pub fn dropped_total() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Lines lost because a file could not be opened or written.
pub fn failed_total() -> u64 {
    FAILED.load(Ordering::Relaxed)
}

/// Waits (up to 5 s) until every line queued before the call is written
/// and flushed (tests, and the node before it exits).
pub fn flush() {
    let (done, wait) = mpsc::sync_channel(1);
    if writer().send(Message::Flush(done)).is_ok() {
        let _ = wait.recv_timeout(Duration::from_secs(5));
    }
}

struct Open {
    file: BufWriter<File>,
    generation: u64,
}

fn open(path: &Path) -> std::io::Result<File> {
    let mut options = OpenOptions::new();
    options.create(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o644);
    }
    options.open(path)
}

fn report(path: &Path, error: &std::io::Error) {
    static LAST: AtomicU64 = AtomicU64::new(u64::MAX);
    FAILED.fetch_add(1, Ordering::Relaxed);
    if crate::once_a_second(&LAST) {
        tracing::error!(path = %path.display(), %error, failed_total = failed_total(), "could not write a log file");
    }
}

fn run(receiver: Receiver<Message>) {
    let mut files: HashMap<PathBuf, Open> = HashMap::new();
    loop {
        let first = match receiver.recv_timeout(FLUSH_EVERY) {
            Ok(message) => message,
            Err(RecvTimeoutError::Timeout) => {
                flush_all(&mut files);
                continue;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        };
        // Write what is already queued (for at most FLUSH_EVERY), then
        // flush once.
        let started = Instant::now();
        let mut next = Some(first);
        while let Some(message) = next.take() {
            match message {
                Message::Line(line) => write_line(&mut files, line),
                Message::Flush(done) => {
                    flush_all(&mut files);
                    let _ = done.try_send(());
                }
            }
            if started.elapsed() < FLUSH_EVERY {
                next = receiver.try_recv().ok();
            }
        }
        flush_all(&mut files);
    }
    flush_all(&mut files);
}

fn write_line(files: &mut HashMap<PathBuf, Open>, line: Line) {
    let generation = GENERATION.load(Ordering::Relaxed);
    let stale = files.get(&*line.path).is_some_and(|open| open.generation != generation);
    if stale {
        if let Some(mut old) = files.remove(&*line.path) {
            if let Err(error) = old.file.flush() {
                report(&line.path, &error);
            }
        }
    }
    if !files.contains_key(&*line.path) {
        match open(&line.path) {
            Ok(file) => {
                files.insert(
                    line.path.to_path_buf(),
                    Open {
                        file: BufWriter::with_capacity(64 * 1024, file),
                        generation,
                    },
                );
            }
            Err(error) => {
                report(&line.path, &error);
                return;
            }
        }
    }
    let Some(open) = files.get_mut(&*line.path) else { return };
    if let Err(error) = open.file.write_all(&line.bytes) {
        report(&line.path, &error);
    }
    if line.close_after {
        if let Some(mut closed) = files.remove(&*line.path) {
            if let Err(error) = closed.file.flush() {
                report(&line.path, &error);
            }
        }
    }
}

fn flush_all(files: &mut HashMap<PathBuf, Open>) {
    for (path, open) in files.iter_mut() {
        if let Err(error) = open.file.flush() {
            report(path, &error);
        }
    }
}
