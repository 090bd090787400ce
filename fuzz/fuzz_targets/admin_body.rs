//! Admin API request bodies: the first byte picks the content type (JSON, form, multipart, none),
//! the rest is the body, parsed, typed and validated as every entity kind.
#![no_main]

use libfuzzer_sys::fuzz_target;

const CONTENT_TYPES: [&str; 5] = [
    "application/json",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=xyz",
    "multipart/form-data",
    "",
];

fuzz_target!(|data: &[u8]| {
    strait_plugins::install();
    let Some((selector, body)) = data.split_first() else { return };
    let content_type = CONTENT_TYPES[usize::from(*selector) % CONTENT_TYPES.len()];
    strait_admin::fuzzing::write_body(content_type, body);
});
