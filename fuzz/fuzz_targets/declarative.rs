//! The declarative config parser (YAML and JSON, every router flavor): any bytes give a config
//! or a list of errors, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use strait_core::declarative::DeclarativeFormat;
use strait_core::{parse_declarative_for, RouterFlavor};

fuzz_target!(|data: &[u8]| {
    // The bundled plugins' schemas, so plugin configs are validated too.
    strait_plugins::install();
    for format in [DeclarativeFormat::Auto, DeclarativeFormat::Json, DeclarativeFormat::Yaml] {
        let _ = parse_declarative_for(data, format, 0, RouterFlavor::Expressions);
    }
    let _ = parse_declarative_for(data, DeclarativeFormat::Auto, 0, RouterFlavor::TraditionalCompatible);
});
