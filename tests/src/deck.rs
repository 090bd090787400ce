//! decK, Kong's declarative CLI, run as a user runs it against a gateway's Admin API.
//!
//! `scripts/test.sh` installs decK from the Go module proxy into `target/tools/bin`; the
//! binary is found as [`crate::tools::tool`] says. A test that needs decK fails (it does not
//! skip) when none is found.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::gateway::Gateway;

/// The decK binary to run.
pub fn deck_bin() -> PathBuf {
    crate::tools::tool("deck", "STRAIT_DECK_BIN")
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

    /// Panics unless this `deck gateway diff` output reports nothing to
    /// create, update or delete; `context` is shown beside it (e.g. what sync said).
    pub fn expect_no_changes(&self, context: &str) {
        for line in ["Created: 0", "Updated: 0", "Deleted: 0"] {
            assert!(
                self.stdout.contains(line),
                "diff after sync:\n{}\n(sync said:\n{context})",
                self.stdout
            );
        }
    }
}
