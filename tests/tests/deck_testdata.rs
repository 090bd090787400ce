//! decK's test files for Kong 3.x (`_format_version: "3.0"` under the decK module's
//! `tests/integration/testdata`, which `scripts/test.sh` installs) through `strait config
//! validate`: each one is accepted, or refused for a reason listed in
//! `strait_core::schema::deck_testdata` (and so in docs/kong-compatibility.md). An
//! unlisted refusal, or a listed file that is accepted, fails this test.

use std::path::{Path, PathBuf};

use strait_core::schema::deck_testdata::{refusal_of, DECK_FILES, DECK_FILES_REFUSED, DECK_FILES_VALID, DECK_VERSION};
use strait_e2e::strait_bin;
use strait_e2e::tools::deck_suite;

fn testdata() -> PathBuf {
    deck_suite().join("tests/integration/testdata")
}

/// Every file under `dir`, sorted.
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).expect("read testdata") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                pending.push(path);
            } else {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A Kong 3.x declarative file: `_format_version` 3.0, in YAML or JSON, quoted or not.
fn is_kong_3x(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim().trim_start_matches('"');
        line.strip_prefix("_format_version")
            .map(|rest| rest.trim_start_matches('"').trim_start_matches(':').trim())
            .is_some_and(|value| value.trim_matches(['"', '\'', ','].as_slice()) == "3.0")
    })
}

#[test]
fn every_kong_3x_test_file_of_deck_validates_or_is_listed_with_its_reason() {
    let root = testdata();
    let files: Vec<(String, PathBuf)> = files_under(&root)
        .into_iter()
        .filter(|path| std::fs::read_to_string(path).is_ok_and(|text| is_kong_3x(&text)))
        .map(|path| {
            let relative = path
                .strip_prefix(&root)
                .expect("under testdata")
                .to_string_lossy()
                .into_owned();
            (relative, path)
        })
        .collect();
    // Four validations at a time: each is a process of its own.
    let results: Vec<(String, bool, String)> = std::thread::scope(|scope| {
        let chunks: Vec<_> = files.chunks(files.len().div_ceil(4).max(1)).collect();
        let handles: Vec<_> = chunks
            .into_iter()
            .map(|chunk| {
                scope.spawn(move || {
                    chunk
                        .iter()
                        .map(|(relative, path)| {
                            let out = std::process::Command::new(strait_bin())
                                .args(["config", "validate"])
                                .arg(path)
                                .stdin(std::process::Stdio::null())
                                .output()
                                .expect("run strait config validate");
                            let text = String::from_utf8_lossy(&out.stderr) + String::from_utf8_lossy(&out.stdout);
                            (relative.clone(), out.status.success(), text.into_owned())
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("validation thread"))
            .collect()
    });

    let mut unlisted = Vec::new();
    let mut listed_but_valid = Vec::new();
    for (relative, valid, output) in &results {
        match (valid, refusal_of(relative)) {
            (false, None) => unlisted.push(format!("{relative}: {}", output.trim())),
            (true, Some((prefix, _))) if prefix == relative => listed_but_valid.push(relative.clone()),
            _ => {}
        }
    }
    let stale: Vec<&str> = DECK_FILES_REFUSED
        .iter()
        .map(|(prefix, _)| *prefix)
        .filter(|prefix| {
            !results
                .iter()
                .any(|(relative, valid, _)| !valid && refusal_of(relative).is_some_and(|(p, _)| p == prefix))
        })
        .collect();
    assert!(
        unlisted.is_empty(),
        "refused without a listed reason:\n{}",
        unlisted.join("\n")
    );
    assert!(
        listed_but_valid.is_empty(),
        "listed as refused but valid: {listed_but_valid:?}"
    );
    assert!(stale.is_empty(), "entries that cover no refused file: {stale:?}");
    let valid = results.iter().filter(|(_, valid, _)| *valid).count();
    eprintln!(
        "decK {DECK_VERSION}: {valid} of {} Kong 3.x test files validate",
        results.len()
    );
    assert_eq!((valid, results.len()), (DECK_FILES_VALID, DECK_FILES));
}
