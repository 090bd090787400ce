//! Kong's commands that need no running node: `check`, `prepare`,
//! `config init`, `config parse`, `version --all`, and the prefix's
//! `.strait_env` (Kong's `.kong_env`: the settings the node runs with).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{anyhow, bail, Context, Result};

use crate::settings::{NodeSettings, RawSettings, DEFAULTS};

/// The settings the node at `prefix` started with (empty when none did).
pub fn read_env_file(prefix: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(prefix.join(".strait_env")).unwrap_or_default();
    text.lines()
        .filter_map(|line| line.split_once(" = "))
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect()
}

/// Write the resolved settings as `<prefix>/.strait_env`, readable by the
/// owner only (it holds passwords, as Kong's `.kong_env` does).
pub fn write_env_file(prefix: &Path, raw: &RawSettings) {
    use std::os::unix::fs::OpenOptionsExt;
    let path = prefix.join(".strait_env");
    let mut text = String::new();
    for (key, value) in &raw.0 {
        text.push_str(&format!("{key} = {value}\n"));
    }
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut file| file.write_all(text.as_bytes()));
    if let Err(error) = written {
        tracing::warn!(%error, path = %path.display(), "could not write the settings file of the prefix");
    }
}

/// Every error of a settings file: the lines that are not settings, then
/// each setting whose value is refused. A refused value is put back to
/// its default and the rest checked again, so one error does not hide the
/// next.
pub fn settings_errors(conf: &Path) -> Vec<String> {
    let text = match std::fs::read_to_string(conf) {
        Ok(text) => text,
        Err(error) => return vec![format!("reading {}: {error}", conf.display())],
    };
    let mut errors = Vec::new();
    let mut values: BTreeMap<String, String> = DEFAULTS.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    for (index, line) in text.lines().enumerate() {
        match crate::settings::parse_conf(line, &conf.display().to_string()) {
            Ok(parsed) => values.extend(parsed),
            Err(error) => errors.push(format!("{error:#}").replace(":1:", &format!(":{}:", index + 1))),
        }
    }
    for (name, value) in std::env::vars() {
        if let Some(key) = name.strip_prefix("STRAIT_") {
            let key = key.to_ascii_lowercase();
            if values.contains_key(&key) {
                values.insert(key, value);
            }
        }
    }
    for _ in 0..DEFAULTS.len() {
        let Err(error) = NodeSettings::from_raw(RawSettings(values.clone())) else {
            break;
        };
        let message = format!("{error:#}");
        errors.push(message.clone());
        // The settings the message is about: `key: ...` or `a and b: ...`.
        let named: Vec<String> = message
            .split(':')
            .next()
            .unwrap_or("")
            .split(" and ")
            .map(|key| key.trim().to_string())
            .filter(|key| values.contains_key(key))
            .collect();
        let mut reset = false;
        for key in named {
            let default = DEFAULTS.iter().find(|(k, _)| *k == key).map(|(_, v)| v.to_string());
            let default = default.unwrap_or_default();
            if values.get(&key) != Some(&default) {
                values.insert(key, default);
                reset = true;
            }
        }
        if !reset {
            break;
        }
    }
    errors
}

/// `strait check [conf]`: validate a settings file (default
/// `/etc/strait/strait.conf`), printing every error; exit 1 when any.
pub fn check(args: &[String]) -> Result<ExitCode> {
    let conf = match args {
        [] => PathBuf::from("/etc/strait/strait.conf"),
        [conf] => PathBuf::from(conf),
        _ => bail!("usage: strait check [CONF]"),
    };
    let errors = settings_errors(&conf);
    if errors.is_empty() {
        println!("configuration at {} is valid", conf.display());
        return Ok(ExitCode::SUCCESS);
    }
    eprintln!("Error: configuration at {} is invalid:", conf.display());
    for error in errors {
        eprintln!("  - {error}");
    }
    Ok(ExitCode::FAILURE)
}

/// `strait prepare [-c conf] [-p prefix]`: lay out the prefix (logs,
/// pids, sockets, the default certificate, `.strait_env`) without
/// starting.
pub fn prepare(args: &[String]) -> Result<ExitCode> {
    let mut conf = None;
    let mut overrides = Vec::new();
    let mut rest = args.iter();
    while let Some(flag) = rest.next() {
        let mut value = || rest.next().cloned().ok_or_else(|| anyhow!("{flag} needs a value"));
        match flag.as_str() {
            "-c" | "--conf" => conf = Some(PathBuf::from(value()?)),
            "-p" | "--prefix" => overrides.push(("STRAIT_PREFIX".to_string(), value()?)),
            "--v" | "--vv" => {}
            other => bail!("unknown flag {other:?} for prepare"),
        }
    }
    let raw = RawSettings::load(conf.as_deref(), std::env::vars().chain(overrides))?;
    let settings = NodeSettings::from_raw(raw)?;
    let prefix = &settings.prefix;
    for dir in ["", "logs", "pids", "sockets"] {
        let dir = prefix.join(dir);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    crate::node::proxy_certificate(&settings)?;
    write_env_file(prefix, &settings.raw);
    println!("prefix {} prepared", prefix.display());
    Ok(ExitCode::SUCCESS)
}

const STARTER: &str = r#"# A declarative configuration for Strait (Kong's format 3.0), written by
# `strait config init`. Load it with `declarative_config = <this file>` in
# strait.conf, `strait start --declarative-config <this file>`, or
# `curl -X POST localhost:8001/config -F config=@<this file>`.
#
# One service and its route: requests to /example are sent to
# https://httpbin.org/anything. Uncomment the rest to add a consumer with
# a key and require it on the route.
_format_version: "3.0"
_transform: true

services:
- name: example-service
  url: https://httpbin.org/anything
  tags: [example]
  routes:
  - name: example-route
    paths: [/example]
#   plugins:
#   - name: key-auth

# consumers:
# - username: example-user
#   keyauth_credentials:
#   - key: my-key

# plugins:
# - name: rate-limiting
#   config:
#     minute: 60
#     policy: local

# upstreams:
# - name: example-upstream
#   targets:
#   - target: 127.0.0.1:8080
#     weight: 100
"#;

/// `strait config init [file]`: write a starter declarative file (default
/// `./kong.yml`), never over an existing one.
pub fn config_init(args: &[String]) -> Result<ExitCode> {
    let file = PathBuf::from(args.first().map(String::as_str).unwrap_or("kong.yml"));
    if file.exists() {
        bail!("{} already exists; will not overwrite it", file.display());
    }
    std::fs::write(&file, STARTER).with_context(|| format!("writing {}", file.display()))?;
    println!("{} written: a starter declarative configuration", file.display());
    Ok(ExitCode::SUCCESS)
}

/// `strait config parse <file>`: check a declarative file as a node
/// would load it, without loading it; `parse successful` or every error.
pub fn config_parse(args: &[String]) -> Result<ExitCode> {
    let file = args.first().ok_or_else(|| anyhow!("usage: strait config parse FILE"))?;
    crate::validate(Some(file), "parse successful")
}

/// `strait version [--all]`.
pub fn version(args: &[String]) -> Result<ExitCode> {
    match args.first().map(String::as_str) {
        None => println!("Strait {}", strait_core::VERSION),
        Some("-a" | "--all") => {
            println!("Strait: {}", strait_core::VERSION);
            println!("Kong compatibility: {}", strait_admin::KONG_COMPATIBLE_VERSION);
            println!("Lua: {}", strait_lua::lua_version());
            println!("proxy-wasm: wasmtime {}", strait_wasm::WASMTIME_VERSION);
            println!("TLS: rustls (ring)");
            println!("target: {}-{}", std::env::consts::ARCH, std::env::consts::OS);
        }
        Some(other) => bail!("unknown flag {other:?} for version (--all)"),
    }
    Ok(ExitCode::SUCCESS)
}
