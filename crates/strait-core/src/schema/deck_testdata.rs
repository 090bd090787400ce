//! decK's own tests as a measure of compatibility: which of decK's Kong 3.x test files
//! (`tests/integration/testdata` of the decK module `scripts/test.sh` installs) Strait
//! refuses, and why, and what decK's integration suite gives against a node. Facts, not
//! code: `tests/tests/deck_testdata.rs` and `tests/tests/deck_integration.rs` check them
//! against the real files and the real suite, and [`markdown`] puts them in
//! `docs/kong-compatibility.md`.

/// The decK release whose tests these are (also the `deck` binary the tests use).
pub const DECK_VERSION: &str = "v1.55.0";

/// Files with `_format_version: "3.0"` under decK's testdata, and how many of them
/// `strait config validate` accepts.
pub const DECK_FILES: usize = 303;
pub const DECK_FILES_VALID: usize = 137;

/// Leaf tests of decK's integration suite that run against a Kong 3.9.0 OSS gateway (the
/// rest are gated to Kong Enterprise, Konnect or other versions) and pass against Strait.
pub const DECK_SUITE_PASSED: usize = 91;
pub const DECK_SUITE_LEAVES: usize = 302;

const KONNECT: &str = "Konnect (`_konnect`): Kong's hosted control plane, which decK talks to instead of a gateway";
const WORKSPACES: &str = "Kong Enterprise workspaces (a `_workspace` other than `default`; Kong OSS has one workspace)";
const RBAC: &str = "Kong Enterprise RBAC (`rbac_roles`)";
const PARTIALS: &str = "Kong Enterprise 3.10's `partials`";
const ENTERPRISE_PLUGINS: &str =
    "Kong Enterprise plugins (`rate-limiting-advanced`, `openid-connect`, `request-validator`)";
const CUSTOM_ENTITIES: &str = "Kong Enterprise's `degraphql` plugin and its `custom_entities`";
const ENTERPRISE_VAULTS: &str =
    "Kong Enterprise vaults (`aws`, `azure`, `gcp`, `hcv`, `conjur`): Kong 3.9 OSS bundles only `env`";
const LOOKUP: &str = "references entities the file does not hold (decK's `default_lookup_tags`, or a partial file for `deck gateway apply`): decK resolves them against the running gateway, and no gateway reads such a file alone";
const TEMPLATE: &str =
    "a decK template (`${{ env \"...\" }}`): `deck file render` fills it in before any gateway sees it";
const MADE_UP_PLUGIN: &str = "`foofloat`, a plugin name made up for decK's render test";
const FILTER_CHAINS: &str = "`filter_chains` (Kong 3.4's Wasm filters): refused with `wasm = off`, the default, as Kong refuses them (and their filters are not installed here)";
const WASM_METRICS: &str = "prometheus `wasm_metrics` (Kong 3.10)";
const FAILOVER: &str = "`targets[].failover` (Kong Enterprise 3.12)";
const ENV_VAULT: &str = "a certificate and key read from `{vault://my-env-vault/...}`: valid where `MY_SECRET_CERT` and `MY_SECRET_KEY` hold them, as decK's (Enterprise-gated) test sets them";
const SKIP_HASH: &str = "`_info.skip_hash_for_basic_auth`, a decK option for Konnect only";

/// decK test files `strait config validate` refuses, as path prefixes under `testdata/`,
/// each with the reason. Every refused file is covered by an entry, and every entry covers
/// at least one refused file (checked by `tests/tests/deck_testdata.rs`).
pub const DECK_FILES_REFUSED: &[(&str, &str)] = &[
    ("apply/003-foreign-keys-consumers/plugin-01.yaml", LOOKUP),
    ("apply/004-foreign-keys-consumer-groups/consumer-01.yaml", LOOKUP),
    ("apply/005-foreign-keys-services/plugin-01.yaml", LOOKUP),
    ("apply/006-foreign-keys-routes/plugin-01.yaml", LOOKUP),
    ("apply/008-custom-entities/", CUSTOM_ENTITIES),
    ("apply/008-update-existing-nested-entity/consumer-group-0", LOOKUP),
    (
        "apply/008-update-existing-nested-entity/consumer-group-expected-state-konnect.yaml",
        KONNECT,
    ),
    (
        "apply/008-update-existing-nested-entity/route-expected-state-konnect.yaml",
        KONNECT,
    ),
    ("diff/001-not-existing-workspace/", WORKSPACES),
    ("diff/002-mask/", TEMPLATE),
    ("diff/004-no-diff-plugin/", ENTERPRISE_PLUGINS),
    ("dump/001-entities-with-tags/expected310.yaml", WASM_METRICS),
    ("dump/001-entities-with-tags/expected311.yaml", WASM_METRICS),
    ("dump/001-entities-with-tags/expected312.yaml", FAILOVER),
    ("dump/002-skip-consumers/expected-no-skip_konnect.yaml", KONNECT),
    ("dump/002-skip-consumers/expected_konnect.yaml", KONNECT),
    ("dump/002-skip-consumers/", ENTERPRISE_PLUGINS),
    ("dump/003-consumer-group-consumers-custom_id/konnect.yaml", KONNECT),
    ("dump/004-filter-chains/", FILTER_CHAINS),
    (
        "dump/004-skip-consumers-with-consumer-groups/expected-konnect.yaml",
        KONNECT,
    ),
    ("dump/007-keys-and-key_sets/konnect-", KONNECT),
    ("dump/008-sanitizer/consumergroup-plugins", ENTERPRISE_PLUGINS),
    ("dump/008-sanitizer/env-vault.yaml", ENTERPRISE_PLUGINS),
    ("dump/008-sanitizer/expected.yaml", PARTIALS),
    ("dump/008-sanitizer/kong.yaml", PARTIALS),
    ("dump/008-sanitizer/vault-configs", ENTERPRISE_VAULTS),
    ("dump/009-skip-defaults/enterprise/3.10+/plugin-partial", PARTIALS),
    ("dump/009-skip-defaults/enterprise/3.11+/vaults", ENTERPRISE_VAULTS),
    ("dump/009-skip-defaults/enterprise/3.4/vaults", ENTERPRISE_VAULTS),
    ("dump/009-skip-defaults/enterprise/", ENTERPRISE_PLUGINS),
    ("dump/009-skip-defaults/konnect/", KONNECT),
    ("dump/010-services-tls-sans/konnect", KONNECT),
    ("render/001-mocked-env/input.yaml", TEMPLATE),
    ("render/001-mocked-env/expected.yaml", MADE_UP_PLUGIN),
    ("render/002-populated-env/expected.yaml", MADE_UP_PLUGIN),
    ("sync/012-vaults/kong3x.yaml", ENV_VAULT),
    ("sync/015-consumer-groups/", LOOKUP),
    ("sync/016-consumer-groups-and-plugins/", ENTERPRISE_PLUGINS),
    ("sync/017-consumer-groups-rla-application/", ENTERPRISE_PLUGINS),
    ("sync/019-skip-consumers/", ENTERPRISE_PLUGINS),
    ("sync/025-consumer-groups-scoped-plugins/", ENTERPRISE_PLUGINS),
    ("sync/026-konnect-rename/", KONNECT),
    ("sync/029-lookup-tags-consumers/", LOOKUP),
    ("sync/030-lookup-tags-routes/", LOOKUP),
    ("sync/031-consumer-group-consumers-from-upstream/", LOOKUP),
    ("sync/033-filter-chains/", FILTER_CHAINS),
    ("sync/034-lookup-tags-consumerGroups/", LOOKUP),
    ("sync/035-lookup-tags-services/", LOOKUP),
    ("sync/036-degraphql-routes/", CUSTOM_ENTITIES),
    ("sync/037-consumer-group-policy-overrides/", ENTERPRISE_PLUGINS),
    ("sync/038-skip-consumers-with-cgs/base.yaml", ENTERPRISE_PLUGINS),
    ("sync/038-skip-consumers-with-cgs/consumers.yaml", LOOKUP),
    ("sync/039-partials/", PARTIALS),
    ("sync/044-partials-tagging/", PARTIALS),
    ("sync/045-skip-custom-entities/", CUSTOM_ENTITIES),
    ("sync/047-basic-auth-skip-hash/expected-dump.yaml", KONNECT),
    ("sync/047-basic-auth-skip-hash/kong-with-info", SKIP_HASH),
    ("sync/xxx-rbac-endpoint-permissions/", RBAC),
    ("validate/001-partials/", PARTIALS),
    ("validate/kong-ee-", WORKSPACES),
    ("validate/konnect.yaml", KONNECT),
    ("validate/rbac-resources.yaml", RBAC),
];

/// The entry of [`DECK_FILES_REFUSED`] that covers `path` (relative to `testdata/`):
/// the first, so a file entry listed before its folder's takes precedence.
pub fn refusal_of(path: &str) -> Option<&'static (&'static str, &'static str)> {
    DECK_FILES_REFUSED.iter().find(|(prefix, _)| path.starts_with(prefix))
}

/// The section of `docs/kong-compatibility.md` on decK's tests.
pub fn markdown() -> String {
    let mut out = String::new();
    out.push_str("## decK's own tests\n\n");
    out.push_str(&format!(
        "**Integration suite.** decK {DECK_VERSION}'s integration suite (`tests/integration` of the \
         decK module, build tag `integration`), run unchanged against a Strait node as decK's CI runs \
         it against Kong 3.9 (`DECK_KONG_ADDR` and `KONG_ADMIN_URL` set to the node's Admin API): of \
         its {DECK_SUITE_LEAVES} leaf tests, the {DECK_SUITE_PASSED} that a Kong 3.9.0 OSS gateway \
         runs all pass, and the rest skip themselves (Kong Enterprise, Konnect, other Kong versions, \
         Wasm). `tests/tests/deck_integration.rs` runs it on every CI run, on the embedded store and \
         on PostgreSQL; by hand: `./scripts/test.sh` installs it, then `cargo test -p strait-e2e \
         --test deck_integration -- --nocapture`.\n\n"
    ));
    out.push_str(&format!(
        "**Test files.** Of decK's {DECK_FILES} test files written for Kong 3.x (`_format_version: \
         \"3.0\"` under `tests/integration/testdata`), `strait config validate` accepts \
         {DECK_FILES_VALID}. Each of the others needs something Kong 3.9 OSS does not have, or is \
         not a file a gateway reads on its own; `tests/tests/deck_testdata.rs` validates every one \
         and checks this list:\n\n"
    ));
    out.push_str("| files (`testdata/...`) | why Strait refuses them |\n|---|---|\n");
    for (prefix, why) in DECK_FILES_REFUSED {
        let shown = if prefix.ends_with(".yaml") || prefix.ends_with('/') {
            format!("`{prefix}`")
        } else {
            format!("`{prefix}*`")
        };
        out.push_str(&format!("| {shown} | {why} |\n"));
    }
    out
}
