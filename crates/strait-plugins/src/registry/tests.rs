use std::collections::BTreeSet;
use std::path::Path;

use super::*;

#[test]
fn every_plugin_in_the_registry_has_its_schema_registered() {
    install();
    let registered = strait_core::schema::plugins_with_schema();
    for name in AVAILABLE {
        assert!(registered.iter().any(|r| r == name), "{name} has no schema");
        assert!(strait_core::schema::plugin_schema_json(name).is_some(), "{name}");
    }
}

#[test]
fn every_available_plugin_has_a_priority_matching_its_instance() {
    for name in AVAILABLE {
        let config = Map::new();
        if let Ok(plugin) = build_plugin(name, &config) {
            assert_eq!(Some(plugin.priority()), priority_of(name), "{name}");
            assert_eq!(plugin.name(), *name);
        }
    }
    assert!(build_plugin("no-such-plugin", &Map::new()).is_err(), "not a plugin");
}

/// The registry is the only list of bundled plugins: each folder of
/// `src/bundled/` is one entry (named after its folder), and no other
/// source file of the workspace spells out the bundled plugins' names.
#[test]
fn the_registry_is_the_only_list_of_plugins() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let folders: BTreeSet<String> = std::fs::read_dir(crate_dir.join("src/bundled"))
        .expect("src/bundled")
        .filter_map(Result::ok)
        .filter(|entry| entry.path().is_dir())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .collect();
    let listed: BTreeSet<String> = AVAILABLE.iter().map(|name| name.replace('-', "_")).collect();
    assert_eq!(folders, listed, "a folder of src/bundled/ and the registry disagree");
    let mut sorted = AVAILABLE.to_vec();
    sorted.sort_unstable();
    assert_eq!(AVAILABLE, sorted.as_slice(), "the registry lists plugins by name");

    // Kong's names of the plugins it bundles (strait-core's BUNDLED_PLUGINS,
    // what a Kong file may name, run here or not) is Kong's list, not ours.
    let allowed = [Path::new("strait-core/src/schema/identity.rs")];
    let crates = crate_dir.parent().expect("crates/");
    let mut offenders = Vec::new();
    let mut stack = vec![crates.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("readable").filter_map(Result::ok) {
            let path = entry.path();
            let relative = path.strip_prefix(crates).expect("under crates/");
            if path.is_dir() {
                let skip = relative.ends_with("target") || relative == Path::new("strait-plugins/src/bundled");
                if !skip {
                    stack.push(path);
                }
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "rs") || allowed.contains(&relative) {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let named = AVAILABLE
                .iter()
                .filter(|name| text.contains(&format!("\"{name}\"")))
                .count();
            // A second list names them all; a file about a few plugins names a few.
            if named * 2 > AVAILABLE.len() {
                offenders.push(format!("{} names {named} plugins", relative.display()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "plugins listed outside the registry: {offenders:?}"
    );
}

/// docs/plugins.md's table of bundled plugins is generated from the
/// registry (`STRAIT_WRITE_DOCS=1 cargo test -p strait-plugins registry`
/// rewrites it), and every plugin there has its own section.
#[test]
fn the_docs_table_of_plugins_is_the_registry() {
    const BEGIN: &str =
        "<!-- generated from the registry (crates/strait-plugins/src/bundled/mod.rs): STRAIT_WRITE_DOCS=1 cargo test -p strait-plugins registry -->";
    const END: &str = "<!-- end of the generated table -->";
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/plugins.md");
    let text = std::fs::read_to_string(&path).expect("docs/plugins.md");
    let mut table = String::from("| Plugin | Kong priority | Folder |\n|---|---|---|\n");
    for plugin in crate::bundled::BUNDLED {
        let folder = plugin.name.replace('-', "_");
        table.push_str(&format!(
            "| `{}` | {} | [`bundled/{folder}/`](../crates/strait-plugins/src/bundled/{folder}/) |\n",
            plugin.name, plugin.priority
        ));
    }
    let (Some(start), Some(stop)) = (text.find(BEGIN), text.find(END)) else {
        panic!("docs/plugins.md has no generated table (the markers {BEGIN:?} and {END:?})");
    };
    let generated = format!("{}{BEGIN}\n{table}{}", &text[..start], &text[stop..]);
    if std::env::var_os("STRAIT_WRITE_DOCS").is_some() {
        std::fs::write(&path, &generated).expect("write docs/plugins.md");
    } else {
        assert!(
            generated == text,
            "docs/plugins.md's table of plugins is stale: STRAIT_WRITE_DOCS=1 cargo test -p strait-plugins registry"
        );
    }
    for plugin in crate::bundled::BUNDLED {
        let documented = text
            .lines()
            .any(|line| line.starts_with("### ") && line.contains(&format!("{} ({})", plugin.name, plugin.priority)));
        assert!(
            documented,
            "docs/plugins.md has no section `{} ({})`",
            plugin.name, plugin.priority
        );
    }
}

/// docs/kong-compatibility.md's plugin table (strait-core's
/// `PLUGINS_NOT_RUN`) says exactly which of Kong's bundled plugins this
/// build refuses.
#[test]
fn the_compatibility_page_lists_what_this_build_refuses() {
    use strait_core::schema::compat::PLUGINS_NOT_RUN;
    // Kong's Lua function plugins run on strait-lua's LuaJIT, registered there.
    let lua = ["pre-function", "post-function"];
    for name in strait_core::schema::BUNDLED_PLUGINS {
        let runs = AVAILABLE.contains(name) || lua.contains(name);
        let refused = PLUGINS_NOT_RUN.iter().any(|(p, _)| p == name);
        assert!(runs != refused, "{name}: runs here {runs}, listed as refused {refused}");
    }
}
