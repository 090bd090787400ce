//! decK, Kong's declarative CLI, run as a user runs it against a gateway's Admin API.
//!
//! `scripts/test.sh` installs decK from the Go module proxy into `target/tools/bin`; the
//! binary is found there, at `$STRAIT_DECK_BIN`, or on `PATH`. A test that needs decK fails
//! (it does not skip) when none is found.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::gateway::Gateway;

/// The decK binary to run.
pub fn deck_bin() -> PathBuf {
    if let Some(path) = std::env::var_os("STRAIT_DECK_BIN") {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/debug/deps/<test> -> target/tools/bin/deck
    let target = exe.ancestors().nth(3).expect("target dir");
    let tools = target.join("tools").join("bin").join("deck");
    if tools.exists() {
        return tools;
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join("deck"))
        .find(|candidate| candidate.exists());
    on_path.unwrap_or_else(|| {
        panic!(
            "decK not found at {} nor on PATH: run ./scripts/test.sh (it installs decK), or set STRAIT_DECK_BIN",
            tools.display()
        )
    })
}

/// What one decK run printed.
#[derive(Debug)]
pub struct DeckOutput {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `deck <args> --kong-addr <gateway admin>` in `cwd`, bounded to 120 s.
pub async fn deck(gw: &Gateway, cwd: &Path, args: &[&str]) -> DeckOutput {
    let mut command = tokio::process::Command::new(deck_bin());
    command
        .args(args)
        .arg("--kong-addr")
        .arg(gw.admin_url())
        .current_dir(cwd)
        .env("DECK_ANALYTICS", "off")
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(120), command.output())
        .await
        .unwrap_or_else(|_| panic!("deck {args:?} timed out"))
        .unwrap_or_else(|e| panic!("running deck {args:?}: {e}"));
    DeckOutput {
        success: output.status.success(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

impl DeckOutput {
    /// Panics with both streams unless the run succeeded.
    pub fn expect_success(self, what: &str) -> DeckOutput {
        assert!(self.success, "{what} failed:\n{}\n{}", self.stdout, self.stderr);
        self
    }
}
