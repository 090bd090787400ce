//! Appending log lines to files without a worker ever touching the disk.
//!
//! Workers hand lines to one writer thread through a bounded channel
//! ([`append`] never blocks: a full channel drops the line and counts it).
//! The writer keeps each file open and buffered, flushing whenever the
//! channel runs empty and at least every 100 ms under steady load.
//!
//! A busy file (the proxy's access log) is better written through a
//! [`Batch`]: each worker formats its lines into a buffer of its own, under
//! an uncontended lock and with no system call, and the writer gets the
//! buffer whole, when it holds [`BATCH`] bytes or every 100 ms, and writes
//! it with one `write(2)`. A line handed over one at a time costs a wake-up
//! of the writer thread, and on a busy core a context switch, per request.
//! [`reopen_all`] (the node calls it on SIGUSR1) makes the writer close
//! every file and open it again by name on its next line, so `logrotate`
//! can move a file away and signal.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};

use std::time::{Duration, Instant};

/// Lines that may wait for the writer.
const CHANNEL: usize = 65_536;
/// The most a line waits in a buffer under steady load.
const FLUSH_EVERY: Duration = Duration::from_millis(100);
/// Bytes a [`Batch`] gathers before it is handed to the writer (nginx's
/// `access_log ... buffer=64k`).
pub const BATCH: usize = 64 * 1024;

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

/// Lines of one file gathered where they are made (one batch per proxy
/// worker) and handed to the writer whole: by the worker when [`BATCH`]
/// bytes wait, and by the writer itself every 100 ms and on [`flush`].
pub struct Batch {
    path: Arc<Path>,
    waiting: Mutex<Waiting>,
}

#[derive(Default)]
struct Waiting {
    bytes: Vec<u8>,
    lines: u64,
}

/// Every batch alive, for the writer to collect from.
fn batches() -> &'static Mutex<Vec<Weak<Batch>>> {
    static BATCHES: OnceLock<Mutex<Vec<Weak<Batch>>>> = OnceLock::new();
    BATCHES.get_or_init(|| Mutex::new(Vec::new()))
}

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl Batch {
    /// A new batch for file `path`, collected by the writer until dropped.
    pub fn new(path: Arc<Path>) -> Arc<Batch> {
        writer();
        let batch = Arc::new(Batch {
            path,
            waiting: Mutex::new(Waiting {
                bytes: Vec::with_capacity(BATCH),
                lines: 0,
            }),
        });
        let mut all = locked(batches());
        all.retain(|weak| weak.strong_count() > 0);
        all.push(Arc::downgrade(&batch));
        batch
    }

    /// Adds the line `write` appends (ending with its newline). Never blocks
    /// on the disk: a full batch is handed to the writer, or dropped and
    /// counted in [`dropped_total`] when the writer is that far behind.
    pub fn push(&self, write: impl FnOnce(&mut Vec<u8>)) {
        let mut waiting = locked(&self.waiting);
        write(&mut waiting.bytes);
        waiting.lines += 1;
        if waiting.bytes.len() >= BATCH {
            let bytes = std::mem::replace(&mut waiting.bytes, Vec::with_capacity(BATCH));
            let lines = std::mem::take(&mut waiting.lines);
            // Sent while the lock is held: the writer takes the rest of this
            // batch under the same lock, so it always finds this part queued
            // first and writes the lines in order.
            self.send(bytes, lines);
        }
    }

    fn send(&self, bytes: Vec<u8>, lines: u64) {
        let line = Line {
            path: self.path.clone(),
            bytes,
            close_after: false,
        };
        if writer().try_send(Message::Line(line)).is_err() {
            DROPPED.fetch_add(lines, Ordering::Relaxed);
        }
    }

    /// What waits, taken by the writer.
    fn take(&self) -> Option<Line> {
        let mut waiting = locked(&self.waiting);
        if waiting.bytes.is_empty() {
            return None;
        }
        waiting.lines = 0;
        let bytes = std::mem::replace(&mut waiting.bytes, Vec::with_capacity(BATCH));
        Some(Line {
            path: self.path.clone(),
            bytes,
            close_after: false,
        })
    }
}

impl Drop for Batch {
    /// A worker that stops hands over what it had not.
    fn drop(&mut self) {
        let waiting = std::mem::take(self.waiting.get_mut().unwrap_or_else(|poisoned| poisoned.into_inner()));
        if !waiting.bytes.is_empty() {
            self.send(waiting.bytes, waiting.lines);
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
    let mut collected = Instant::now();
    loop {
        let until_collect = FLUSH_EVERY.saturating_sub(collected.elapsed());
        match receiver.recv_timeout(until_collect) {
            Ok(first) => {
                // Write what is already queued (for at most FLUSH_EVERY).
                let started = Instant::now();
                let mut next = Some(first);
                while let Some(message) = next.take() {
                    handle(&mut files, &receiver, message);
                    if started.elapsed() < FLUSH_EVERY {
                        next = receiver.try_recv().ok();
                    }
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if collected.elapsed() >= FLUSH_EVERY {
            collect(&mut files, &receiver);
            collected = Instant::now();
        }
        flush_all(&mut files);
    }
    flush_all(&mut files);
}

fn handle(files: &mut HashMap<PathBuf, Open>, receiver: &Receiver<Message>, message: Message) {
    match message {
        Message::Line(line) => write_line(files, line),
        Message::Flush(done) => {
            collect(files, receiver);
            flush_all(files);
            let _ = done.try_send(());
        }
    }
}

/// Writes what every [`Batch`] holds. Each batch's earlier, full parts were
/// queued under its lock before the rest could be taken, so the queue is
/// written first: a file gets its lines in the order they were made.
fn collect(files: &mut HashMap<PathBuf, Open>, receiver: &Receiver<Message>) {
    let alive: Vec<Arc<Batch>> = locked(batches()).iter().filter_map(Weak::upgrade).collect();
    let rests: Vec<Line> = alive.iter().filter_map(|batch| batch.take()).collect();
    if rests.is_empty() {
        return;
    }
    let mut flushes = Vec::new();
    while let Ok(message) = receiver.try_recv() {
        match message {
            Message::Line(line) => write_line(files, line),
            Message::Flush(done) => flushes.push(done),
        }
    }
    for rest in rests {
        write_line(files, rest);
    }
    for done in flushes {
        flush_all(files);
        let _ = done.try_send(());
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> Arc<Path> {
        let dir = std::env::temp_dir().join(format!("strait-files-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        let path = dir.join("access.log");
        let _ = std::fs::remove_file(&path);
        Arc::from(path.as_path())
    }

    fn line(n: usize) -> String {
        format!("line {n:06} {}\n", "x".repeat(90))
    }

    #[test]
    fn a_batch_writes_its_lines_in_order_across_many_batches() {
        let path = scratch("order");
        let batch = Batch::new(path.clone());
        let mut expected = String::new();
        for n in 0..20_000 {
            let text = line(n);
            batch.push(|buf| buf.extend_from_slice(text.as_bytes()));
            expected.push_str(&text);
        }
        flush();
        let written = std::fs::read_to_string(&path).expect("the log");
        assert_eq!(
            written.len(),
            expected.len(),
            "{} batches' worth",
            expected.len() / BATCH
        );
        assert!(written == expected, "lines out of order or lost");
    }

    #[test]
    fn a_quiet_batch_is_written_within_the_flush_interval_and_a_dropped_one_whole() {
        let path = scratch("quiet");
        let batch = Batch::new(path.clone());
        batch.push(|buf| buf.extend_from_slice(b"one\n"));
        let pushed = Instant::now();
        while std::fs::read_to_string(&path).unwrap_or_default() != "one\n" {
            assert!(pushed.elapsed() < Duration::from_secs(2), "not written without a flush");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(pushed.elapsed() < Duration::from_millis(600), "{:?}", pushed.elapsed());
        batch.push(|buf| buf.extend_from_slice(b"two\n"));
        drop(batch);
        flush();
        assert_eq!(std::fs::read_to_string(&path).expect("the log"), "one\ntwo\n");
    }
}
