//! Scrapes parsed by the Prometheus text-format parser of the official
//! Python client (`prometheus_client.parser`), run from the tools venv that
//! scripts/test.sh installs (`$STRAIT_PROMETHEUS_PYTHON`, else
//! `target/tools/venv/bin/python`, else `python3`).

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use serde_json::Value;

/// One sample: its name (with `_bucket`, `_sum`, ... suffixes), labels and value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: Vec<(String, String)>,
    pub value: f64,
}

impl Sample {
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// A parsed exposition: each family's name and type, and every sample.
#[derive(Debug, Default)]
pub struct Exposition {
    pub families: Vec<(String, String)>,
    pub samples: Vec<Sample>,
}

impl Exposition {
    /// The samples named `name` whose labels include every pair of `labels`.
    pub fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .collect()
    }

    /// The one sample named `name` with `labels`; panics when there is not
    /// exactly one.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let found = self.find(name, labels);
        assert_eq!(found.len(), 1, "{name} {labels:?}: {found:?}");
        found[0].value
    }

    pub fn family_type(&self, name: &str) -> Option<&str> {
        self.families.iter().find(|(n, _)| n == name).map(|(_, t)| t.as_str())
    }
}

/// The tools venv's python (scripts/test.sh), else `python3`.
pub fn python() -> PathBuf {
    if let Some(path) = std::env::var_os("STRAIT_PROMETHEUS_PYTHON") {
        return PathBuf::from(path);
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tools/venv/bin/python");
    if venv.exists() {
        return venv;
    }
    PathBuf::from("python3")
}

const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
families, samples = [], []
for family in text_string_to_metric_families(sys.stdin.read()):
    families.append([family.name, family.type])
    for s in family.samples:
        samples.append([s.name, sorted(s.labels.items()), s.value])
print(json.dumps({"families": families, "samples": samples}))
"#;

/// Parse `text` with the official parser; panics with the parser's error
/// when the text is not valid exposition format.
pub fn parse(text: &str) -> Exposition {
    let mut child = Command::new(python())
        .args(["-c", PARSE])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run python for prometheus_client (scripts/test.sh installs it)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write exposition");
    let output = child.wait_with_output().expect("parser output");
    assert!(
        output.status.success(),
        "prometheus_client could not parse the scrape: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    let parsed: Value = serde_json::from_slice(&output.stdout).expect("parser JSON");
    let families = parsed["families"]
        .as_array()
        .expect("families")
        .iter()
        .map(|f| (f[0].as_str().unwrap().to_string(), f[1].as_str().unwrap().to_string()))
        .collect();
    let samples = parsed["samples"]
        .as_array()
        .expect("samples")
        .iter()
        .map(|s| Sample {
            name: s[0].as_str().unwrap().to_string(),
            labels: s[1]
                .as_array()
                .unwrap()
                .iter()
                .map(|pair| {
                    (
                        pair[0].as_str().unwrap().to_string(),
                        pair[1].as_str().unwrap().to_string(),
                    )
                })
                .collect(),
            value: s[2].as_f64().unwrap_or(f64::NAN),
        })
        .collect();
    Exposition { families, samples }
}
