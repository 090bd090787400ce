//! External test tools (decK, h2spec, schemathesis) that `scripts/test.sh` installs into
//! `target/tools`. A tool is found at its environment variable, in `target/tools/bin`, in
//! `target/tools/venv/bin`, or on `PATH`; a test that needs one fails (never skips) without it.

use std::path::PathBuf;

/// The path of tool `name`, or a panic that says how to install it.
pub fn tool(name: &str, env_var: &str) -> PathBuf {
    if let Some(path) = std::env::var_os(env_var) {
        return PathBuf::from(path);
    }
    let exe = std::env::current_exe().expect("current_exe");
    // target/debug/deps/<test> -> target/tools
    let tools = exe.ancestors().nth(3).expect("target dir").join("tools");
    let local = [tools.join("bin").join(name), tools.join("venv").join("bin").join(name)];
    if let Some(found) = local.iter().find(|candidate| candidate.exists()) {
        return found.clone();
    }
    let on_path = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|paths| std::env::split_paths(&paths).collect::<Vec<_>>())
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.exists());
    on_path.unwrap_or_else(|| {
        panic!(
            "{name} not found under {} nor on PATH: run ./scripts/test.sh (it installs it), or set {env_var}",
            tools.display()
        )
    })
}

/// Where `scripts/test.sh` built decK's own integration suite: `integration.test`, and the decK
/// module's `tests/integration` (its test files under `testdata`) beside it, for the decK
/// release strait-core's compatibility notes are about. Panics that say how to build it.
pub fn deck_suite() -> PathBuf {
    let dir = match std::env::var_os("STRAIT_DECK_SUITE") {
        Some(dir) => PathBuf::from(dir),
        None => {
            let exe = std::env::current_exe().expect("current_exe");
            exe.ancestors().nth(3).expect("target dir").join("tools/deck-suite")
        }
    };
    let version = std::fs::read_to_string(dir.join("version")).unwrap_or_else(|_| {
        panic!(
            "decK's integration suite is not at {}: run ./scripts/test.sh (it builds it), or set STRAIT_DECK_SUITE",
            dir.display()
        )
    });
    let wanted = strait_core::schema::deck_testdata::DECK_VERSION;
    assert_eq!(version.trim(), wanted, "the suite at {} is another decK", dir.display());
    dir
}
