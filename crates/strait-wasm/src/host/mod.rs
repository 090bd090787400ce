//! The host functions a filter imports: proxy-wasm's (`env`, ABI 0.2.0 and
//! 0.2.1) and the WASI preview 1 calls Go's and Rust's `wasip1` builds
//! import (`wasi_snapshot_preview1`). An import this host does not serve
//! is still defined, answering `UNIMPLEMENTED` (proxy-wasm) or `ENOSYS`
//! (WASI), so that every filter built with a full SDK links; a filter that
//! relies on one of those gets the error code, never a crash.

mod env;
pub(crate) mod maps;
pub(crate) mod memory;
mod properties;
mod shared;
mod wasi;

use wasmtime::{ExternType, Linker, Module, Val, ValType};

use crate::instance::HostState;

/// proxy-wasm's status codes.
pub(crate) mod status {
    pub const OK: i32 = 0;
    pub const NOT_FOUND: i32 = 1;
    pub const BAD_ARGUMENT: i32 = 2;
    pub const EMPTY: i32 = 7;
    pub const CAS_MISMATCH: i32 = 8;
    pub const UNIMPLEMENTED: i32 = 12;
}

/// WASI's `ENOSYS`.
const WASI_ENOSYS: i32 = 52;

/// A linker with every host function `module` imports.
pub(crate) fn linker(module: &Module) -> wasmtime::Result<Linker<HostState>> {
    let mut linker = Linker::new(module.engine());
    env::define(&mut linker)?;
    wasi::define(&mut linker)?;
    let mut probe = wasmtime::Store::new(module.engine(), HostState::idle());
    for import in module.imports() {
        let ExternType::Func(ty) = import.ty() else { continue };
        let (module_name, name) = (import.module(), import.name());
        if linker.get_by_import(&mut probe, &import).is_some() {
            continue;
        }
        let answer = match module_name {
            "wasi_snapshot_preview1" => WASI_ENOSYS,
            _ => status::UNIMPLEMENTED,
        };
        let results: Vec<ValType> = ty.results().collect();
        let label = format!("{module_name}.{name}");
        linker.func_new(module_name, name, ty, move |_, _, out| {
            match (results.as_slice(), out.first_mut()) {
                ([ValType::I32], Some(slot)) => *slot = Val::I32(answer),
                ([], None) => {}
                _ => return Err(wasmtime::Error::msg(format!("{label} is not available in this host"))),
            }
            Ok(())
        })?;
    }
    Ok(linker)
}
