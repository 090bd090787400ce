//! The PDK functions Lua code calls most (`kong.request.get_header`,
//! the header setters of `kong.service.request` and `kong.response`), as
//! plain LuaJIT C functions. Through mlua a call costs about 2,000
//! instructions of argument and result conversion; these read their
//! arguments off the Lua stack and the request's call directly.
//!
//! Each handles only the common case (string arguments, a phase that
//! allows it, a valid name and value) and otherwise calls the full
//! function (pdk.rs, kept in the registry), so arguments, phases, errors
//! and messages are the full function's. The fast path itself never
//! raises a Lua error.
//!
//! This module uses `unsafe` for LuaJIT's C API; each block says why it
//! holds. The functions are `extern "C-unwind"` (mlua's `lua_CFunction`):
//! a Lua error raised in the full function, or by an allocation failing
//! under the memory cap, unwinds through them as through mlua's own.
#![allow(unsafe_code)]

use std::ffi::{c_int, CStr};

use http::header::{HeaderName, HeaderValue};
use mlua::{ffi, Function, Lua, Table};

use crate::pdk;

/// Registry keys of the full functions.
const GET_HEADER: &CStr = c"strait.pdk.request.get_header";
const UPSTREAM_SET: &CStr = c"strait.pdk.service.request.set_header";
const UPSTREAM_ADD: &CStr = c"strait.pdk.service.request.add_header";
const RESPONSE_SET: &CStr = c"strait.pdk.response.set_header";
const RESPONSE_ADD: &CStr = c"strait.pdk.response.add_header";

/// Replaces the hot functions of `request`, `service.request` and
/// `response` with their fast paths, keeping the full ones in the registry.
pub(crate) fn install(lua: &Lua, request: &Table, upstream: &Table, response: &Table) -> mlua::Result<()> {
    let entries: [(&Table, &str, &CStr, ffi::lua_CFunction); 5] = [
        (request, "get_header", GET_HEADER, get_header),
        (upstream, "set_header", UPSTREAM_SET, upstream_set_header),
        (upstream, "add_header", UPSTREAM_ADD, upstream_add_header),
        (response, "set_header", RESPONSE_SET, response_set_header),
        (response, "add_header", RESPONSE_ADD, response_add_header),
    ];
    for (table, name, key, fast) in entries {
        let full: Function = table.raw_get(name)?;
        lua.set_named_registry_value(key.to_str().expect("ASCII keys"), full)?;
        // SAFETY: `fast` is one of this module's functions, each of which
        // keeps the stack balanced and returns the number of results it
        // pushed.
        let function = unsafe { lua.create_c_function(fast)? };
        table.raw_set(name, function)?;
    }
    Ok(())
}

/// Calls the full function (kept under `key`) with this call's arguments,
/// returning its results.
///
/// # Safety
/// `state` is the running Lua state with the call's arguments on its stack.
unsafe fn full(state: *mut ffi::lua_State, key: &CStr) -> c_int {
    let arguments = ffi::lua_gettop(state);
    ffi::lua_getfield(state, ffi::LUA_REGISTRYINDEX, key.as_ptr());
    ffi::lua_insert(state, 1);
    ffi::lua_call(state, arguments, ffi::LUA_MULTRET);
    ffi::lua_gettop(state)
}

/// The bytes of string argument `index`, if it is a string (not a number:
/// those go to the full function, which applies Kong's rules).
///
/// # Safety
/// `state` is the running Lua state and `index` one of its stack slots.
/// The slice borrows the string on the stack: it is valid until the slot
/// is popped or replaced, which none of the callers do while using it.
unsafe fn string_at<'a>(state: *mut ffi::lua_State, index: c_int) -> Option<&'a [u8]> {
    if ffi::lua_type(state, index) != ffi::LUA_TSTRING {
        return None;
    }
    let mut length = 0usize;
    let pointer = ffi::lua_tolstring(state, index, &mut length);
    if pointer.is_null() {
        return None;
    }
    Some(std::slice::from_raw_parts(pointer.cast::<u8>(), length))
}

unsafe extern "C-unwind" fn get_header(state: *mut ffi::lua_State) -> c_int {
    // SAFETY (the whole function): `state` is the state LuaJIT called us
    // with; the one argument is read in place and one result pushed.
    let name = match (ffi::lua_gettop(state), string_at(state, 1)) {
        (1, Some(name)) => name,
        _ => return full(state, GET_HEADER),
    };
    let Ok(name) = std::str::from_utf8(name) else {
        return full(state, GET_HEADER);
    };
    let pushed = pdk::fast_call(|call| {
        if !pdk::REQUEST_PHASES.contains(&call.phase) {
            return None;
        }
        match pdk::header_value(&call.headers, name) {
            Some(value) => {
                let bytes = value.as_bytes();
                ffi::lua_pushlstring(state, bytes.as_ptr().cast(), bytes.len());
            }
            None => ffi::lua_pushnil(state),
        }
        Some(())
    });
    match pushed {
        Some(()) => 1,
        None => full(state, GET_HEADER),
    }
}

/// A `set_header`/`add_header` of `target` when both arguments are plain
/// strings Kong would take as they are; otherwise the full function.
///
/// # Safety
/// `state` is the running Lua state with the call's arguments on its stack.
unsafe fn set_header(state: *mut ffi::lua_State, target: pdk::Target, replace: bool, key: &CStr) -> c_int {
    let (name, value) = match (ffi::lua_gettop(state), string_at(state, 1), string_at(state, 2)) {
        (2, Some(name), Some(value)) if !value.is_empty() => (name, value),
        _ => return full(state, key),
    };
    let (Some(name), Ok(value)) = (header_name(name), HeaderValue::from_bytes(value)) else {
        return full(state, key);
    };
    let written = pdk::fast_call(|call| {
        if target.check(call).is_err() {
            return None;
        }
        target.write_one(call, &name, value, replace);
        Some(())
    });
    match written {
        Some(()) => 0,
        None => full(state, key),
    }
}

/// A header name Lua code gave, parsed once per worker for the few names
/// code sets over and over (parsing a name that is not a standard one
/// allocates).
fn header_name(bytes: &[u8]) -> Option<HeaderName> {
    const KEPT: usize = 16;
    thread_local! {
        static NAMES: std::cell::RefCell<Vec<(Box<[u8]>, HeaderName)>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    NAMES.with(|cell| {
        let mut names = cell.borrow_mut();
        if let Some((_, name)) = names.iter().find(|(given, _)| **given == *bytes) {
            return Some(name.clone());
        }
        let name = HeaderName::from_bytes(bytes).ok()?;
        if names.len() == KEPT {
            names.remove(0);
        }
        names.push((bytes.into(), name.clone()));
        Some(name)
    })
}

unsafe extern "C-unwind" fn upstream_set_header(state: *mut ffi::lua_State) -> c_int {
    set_header(state, pdk::Target::Upstream, true, UPSTREAM_SET)
}

unsafe extern "C-unwind" fn upstream_add_header(state: *mut ffi::lua_State) -> c_int {
    set_header(state, pdk::Target::Upstream, false, UPSTREAM_ADD)
}

unsafe extern "C-unwind" fn response_set_header(state: *mut ffi::lua_State) -> c_int {
    set_header(state, pdk::Target::Response, true, RESPONSE_SET)
}

unsafe extern "C-unwind" fn response_add_header(state: *mut ffi::lua_State) -> c_int {
    set_header(state, pdk::Target::Response, false, RESPONSE_ADD)
}

#[cfg(test)]
mod tests {
    /// The fast paths answer as the full functions do, for what they take
    /// and for what they hand on (worker/tests.rs runs the PDK through
    /// them); this checks the one difference a caller could see: none.
    #[test]
    fn the_fast_path_and_the_full_function_agree() {
        let lua = mlua::Lua::new();
        let tables = crate::pdk::install(&lua).unwrap();
        let kong = tables.kong;
        let request: mlua::Table = kong.get("request").unwrap();
        let get_header: mlua::Function = request.get("get_header").unwrap();
        // Outside a request: the full function's message.
        let error = get_header.call::<mlua::Value>("x-a").unwrap_err().to_string();
        assert!(
            error.contains("kong.request.get_header can only be called while a request is handled"),
            "{error}"
        );
        let error = get_header.call::<mlua::Value>(5).unwrap_err().to_string();
        assert!(
            error.contains("kong.request.get_header can only be called while a request is handled"),
            "{error}"
        );
    }
}
