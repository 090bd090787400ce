//! A running node seen from outside: its PID file, systemd's readiness
//! protocol, and the commands that signal it (`strait quit`, `stop`,
//! `reload`, `restart`, `health`), with Kong's flags and exit codes.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

use crate::settings::RawSettings;

/// Where a node writes its process id (Kong: `pids/nginx.pid`).
pub fn pid_path(prefix: &Path) -> PathBuf {
    prefix.join("pids").join("strait.pid")
}

/// Where `strait reload` leaves its request and the node its answer.
pub fn reload_request_path(prefix: &Path) -> PathBuf {
    prefix.join("pids").join("reload.request")
}

pub fn reload_result_path(prefix: &Path) -> PathBuf {
    prefix.join("pids").join("reload.result")
}

/// Where a node reports that the process `strait restart` started failed.
pub fn restart_failed_path(prefix: &Path) -> PathBuf {
    prefix.join("pids").join("restart.failed")
}

/// Record this process as the node serving `prefix`.
pub fn write_pid(prefix: &Path) -> Result<()> {
    let path = pid_path(prefix);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    let temporary = path.with_extension("pid.tmp");
    std::fs::write(&temporary, format!("{}\n", std::process::id()))
        .and_then(|_| std::fs::rename(&temporary, &path))
        .with_context(|| format!("writing {}", path.display()))
}

/// Remove the PID file if it still names this process (a successor that
/// took over has written its own).
pub fn remove_pid_if_ours(prefix: &Path) {
    let path = pid_path(prefix);
    if read_pid(&path) == Some(std::process::id()) {
        let _ = std::fs::remove_file(path);
    }
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Whether `pid` is a live Strait process (not a reused pid).
fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks that the process exists.
    let exists = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
        || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
    if !exists {
        return false;
    }
    // A zombie has exited.
    let status = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let state = status
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    if state == Some('Z') {
        return false;
    }
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .map(|comm| comm.trim().starts_with("strait"))
        .unwrap_or(true)
}

/// The pid of the node serving `prefix`, if one is running.
pub fn running_pid(prefix: &Path) -> Option<u32> {
    read_pid(&pid_path(prefix)).filter(|pid| alive(*pid))
}

/// Tell systemd (`Type=notify`, `NotifyAccess=all`) about this process:
/// `READY=1`, `RELOADING=1`, `MAINPID=`, `STOPPING=1`. Nothing without
/// `NOTIFY_SOCKET`.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let Ok(datagram) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let socket = socket.to_string_lossy().to_string();
    let sent = match socket.strip_prefix('@') {
        // An abstract socket.
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
                .and_then(|addr| datagram.send_to_addr(state.as_bytes(), &addr))
        }
        None => datagram.send_to(state.as_bytes(), &socket),
    };
    if let Err(error) = sent {
        tracing::debug!(%error, "could not notify systemd");
    }
}

fn signal(pid: u32, signal: libc::c_int) -> Result<()> {
    // SAFETY: sending a signal to a process id has no memory effects here.
    if unsafe { libc::kill(pid as libc::pid_t, signal) } != 0 {
        return Err(std::io::Error::last_os_error()).with_context(|| format!("signalling process {pid}"));
    }
    Ok(())
}

fn wait_gone(pid: u32, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if !alive(pid) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    !alive(pid)
}

/// The flags every node command takes: `-p/--prefix`, `-c/--conf`, and
/// the command's own (`--wait`, `--timeout`, with values in seconds).
struct Flags {
    prefix: PathBuf,
    conf: Option<PathBuf>,
    wait: f64,
    timeout: f64,
}

fn flags(command: &str, args: &[String], timeout: f64) -> Result<Flags> {
    let mut prefix = None;
    let mut conf = None;
    let mut wait = 0.0;
    let mut limit = timeout;
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let mut value = || rest.next().cloned().ok_or_else(|| anyhow!("{flag} needs a value"));
        let seconds = |text: String| -> Result<f64> {
            text.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .ok_or_else(|| anyhow!("{flag}: expected a number of seconds, got {text:?}"))
        };
        match flag.as_str() {
            "-p" | "--prefix" => prefix = Some(PathBuf::from(value()?)),
            "-c" | "--conf" => conf = Some(PathBuf::from(value()?)),
            "-w" | "--wait" if command == "quit" => wait = seconds(value()?)?,
            "-t" | "--timeout" => limit = seconds(value()?)?,
            "--v" | "--vv" => {}
            other => bail!("unknown flag {other:?} for {command}"),
        }
    }
    let prefix = match prefix {
        Some(prefix) => prefix,
        None => PathBuf::from(
            RawSettings::load(conf.as_deref(), std::env::vars())?
                .0
                .get("prefix")
                .cloned()
                .unwrap_or_default(),
        ),
    };
    Ok(Flags {
        prefix,
        conf,
        wait,
        timeout: limit,
    })
}

fn not_running(prefix: &Path) -> anyhow::Error {
    anyhow!("Strait is not running at {}", prefix.display())
}

/// `strait quit`: finish what is in flight, then exit (SIGQUIT); after
/// `--timeout` seconds (default 10), stop it now (SIGTERM). `--wait`
/// seconds pass first (time for a load balancer to notice).
pub fn quit(args: &[String]) -> Result<ExitCode> {
    let flags = flags("quit", args, 10.0)?;
    let pid = running_pid(&flags.prefix).ok_or_else(|| not_running(&flags.prefix))?;
    if flags.wait > 0.0 {
        println!("Waiting {}s before stopping Strait", flags.wait);
        std::thread::sleep(Duration::from_secs_f64(flags.wait));
    }
    signal(pid, libc::SIGQUIT)?;
    if wait_gone(pid, Duration::from_secs_f64(flags.timeout)) {
        println!("Strait stopped (gracefully)");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "Strait did not stop gracefully within {}s, forcing shutdown",
        flags.timeout
    );
    signal(pid, libc::SIGTERM)?;
    if wait_gone(pid, Duration::from_secs(10)) {
        println!("Strait stopped (forced)");
        return Ok(ExitCode::SUCCESS);
    }
    bail!("Strait (pid {pid}) did not stop")
}

/// `strait stop`: stop now (SIGTERM), without waiting for requests in
/// flight, and wait until the process is gone.
pub fn stop(args: &[String]) -> Result<ExitCode> {
    let flags = flags("stop", args, 30.0)?;
    let pid = running_pid(&flags.prefix).ok_or_else(|| not_running(&flags.prefix))?;
    signal(pid, libc::SIGTERM)?;
    if wait_gone(pid, Duration::from_secs_f64(flags.timeout)) {
        println!("Strait stopped");
        return Ok(ExitCode::SUCCESS);
    }
    bail!("Strait (pid {pid}) did not stop within {}s", flags.timeout)
}

/// `strait reload`: the node reads its settings again (`--conf`: from
/// this file), applies those that can change live and answers which need
/// a restart, in which case nothing changes. Exit 0 when applied.
pub fn reload(args: &[String]) -> Result<ExitCode> {
    let flags = flags("reload", args, 30.0)?;
    let pid = running_pid(&flags.prefix).ok_or_else(|| not_running(&flags.prefix))?;
    let token = uuid::Uuid::new_v4().to_string();
    let conf = match &flags.conf {
        Some(conf) => std::fs::canonicalize(conf).with_context(|| format!("reading {}", conf.display()))?,
        None => PathBuf::new(),
    };
    let request = reload_request_path(&flags.prefix);
    std::fs::write(&request, format!("{token}\n{}\n", conf.display()))
        .with_context(|| format!("writing {}", request.display()))?;
    signal(pid, libc::SIGHUP)?;
    let result = reload_result_path(&flags.prefix);
    let deadline = Instant::now() + Duration::from_secs_f64(flags.timeout);
    while Instant::now() < deadline {
        if let Ok(text) = std::fs::read_to_string(&result) {
            let mut lines = text.lines();
            if lines.next() == Some(token.as_str()) {
                let verdict = lines.next().unwrap_or("");
                let rest: Vec<&str> = lines.collect();
                return Ok(match verdict {
                    "applied" => {
                        println!("Strait reloaded");
                        for line in rest {
                            println!("  {line}");
                        }
                        ExitCode::SUCCESS
                    }
                    _ => {
                        eprintln!("Error: Strait was not reloaded; nothing changed");
                        for line in rest {
                            eprintln!("  {line}");
                        }
                        ExitCode::FAILURE
                    }
                });
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!("Strait (pid {pid}) did not answer the reload within {}s", flags.timeout)
}

/// `strait restart`: a new process (the binary now at the path this one
/// was started from) takes over the listening sockets and this one
/// drains; exit 0 once the new one serves.
pub fn restart(args: &[String]) -> Result<ExitCode> {
    let flags = flags("restart", args, 60.0)?;
    let pid = running_pid(&flags.prefix).ok_or_else(|| {
        anyhow!(
            "Strait is not running at {} (`strait start` starts it)",
            flags.prefix.display()
        )
    })?;
    let failed = restart_failed_path(&flags.prefix);
    let _ = std::fs::remove_file(&failed);
    signal(pid, libc::SIGUSR2)?;
    let deadline = Instant::now() + Duration::from_secs_f64(flags.timeout);
    // The old process may finish draining before the new one has written the PID
    // file (it does so once its Admin API is open): a grace before calling it lost.
    let mut gone_since: Option<Instant> = None;
    while Instant::now() < deadline {
        if let Ok(why) = std::fs::read_to_string(&failed) {
            let _ = std::fs::remove_file(&failed);
            bail!("{}", why.trim());
        }
        if let Some(new) = running_pid(&flags.prefix).filter(|new| *new != pid) {
            println!("Strait restarted: process {new} serves, {pid} drains");
            return Ok(ExitCode::SUCCESS);
        }
        if !alive(pid) && gone_since.get_or_insert_with(Instant::now).elapsed() > Duration::from_secs(10) {
            bail!("Strait (pid {pid}) stopped and no new process took over; see the error log");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    bail!(
        "no new process took over within {}s; process {pid} keeps serving (see the error log)",
        flags.timeout
    )
}

/// `strait health`: whether a node runs at the prefix (exit 0) and the
/// listeners it serves, each checked with a connection.
pub fn health(args: &[String]) -> Result<ExitCode> {
    let flags = flags("health", args, 0.0)?;
    let Some(pid) = running_pid(&flags.prefix) else {
        eprintln!("Error: Strait is not running at {}", flags.prefix.display());
        return Ok(ExitCode::FAILURE);
    };
    println!("strait.......running (pid {pid})");
    let env = crate::cli::read_env_file(&flags.prefix);
    let mut healthy = true;
    for key in [
        "proxy_listen",
        "admin_listen",
        "admin_gui_listen",
        "status_listen",
        "cluster_listen",
    ] {
        let Some(value) = env.get(key) else { continue };
        let Ok(specs) = strait_proxy::parse_listen(value) else {
            continue;
        };
        if key == "cluster_listen" && env.get("role").map(String::as_str) != Some("control_plane") {
            continue;
        }
        for spec in specs {
            let mut probe = spec.addr;
            if probe.ip().is_unspecified() {
                probe.set_ip(match probe {
                    std::net::SocketAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
                    std::net::SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            let up = std::net::TcpStream::connect_timeout(&probe, Duration::from_secs(2)).is_ok();
            healthy &= up;
            println!(
                "{key:.<20}{} {}",
                spec.addr,
                if up { "listening" } else { "NOT ANSWERING" }
            );
        }
    }
    if healthy {
        println!("Strait is healthy at {}", flags.prefix.display());
        Ok(ExitCode::SUCCESS)
    } else {
        eprintln!(
            "Error: some listeners of Strait at {} do not answer",
            flags.prefix.display()
        );
        Ok(ExitCode::FAILURE)
    }
}
