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
