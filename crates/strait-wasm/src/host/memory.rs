//! Reading and writing the filter's linear memory from a host call, and
//! handing values to it in memory the filter allocated itself
//! (`proxy_on_memory_allocate`), as the proxy-wasm ABI wants.

use wasmtime::{Caller, Result};

use crate::instance::HostState;

/// The bytes at `ptr..ptr+len` of the caller's memory, copied out.
pub(crate) fn read(caller: &mut Caller<'_, HostState>, ptr: i32, len: i32) -> Result<Vec<u8>> {
    let memory = caller
        .data()
        .memory
        .ok_or_else(|| wasmtime::Error::msg("the filter exports no memory"))?;
    let mut out = vec![0; len as u32 as usize];
    memory.read(&*caller, ptr as u32 as usize, &mut out)?;
    Ok(out)
}

/// The bytes at `ptr..ptr+len` as text (lossy: header names and values
/// the filter wrote are bytes, not always UTF-8).
pub(crate) fn read_text(caller: &mut Caller<'_, HostState>, ptr: i32, len: i32) -> Result<String> {
    let bytes = read(caller, ptr, len)?;
    Ok(match String::from_utf8(bytes) {
        Ok(text) => text,
        Err(error) => String::from_utf8_lossy(error.as_bytes()).into_owned(),
    })
}

/// Writes `bytes` at `ptr`.
pub(crate) fn write(caller: &mut Caller<'_, HostState>, ptr: i32, bytes: &[u8]) -> Result<()> {
    let memory = caller
        .data()
        .memory
        .ok_or_else(|| wasmtime::Error::msg("the filter exports no memory"))?;
    memory.write(&mut *caller, ptr as u32 as usize, bytes)?;
    Ok(())
}

pub(crate) fn write_u32(caller: &mut Caller<'_, HostState>, ptr: i32, value: u32) -> Result<()> {
    write(caller, ptr, &value.to_le_bytes())
}

pub(crate) fn write_u64(caller: &mut Caller<'_, HostState>, ptr: i32, value: u64) -> Result<()> {
    write(caller, ptr, &value.to_le_bytes())
}

/// Hands `bytes` to the filter: memory from its allocator, filled, its
/// address and length written at `ptr_ptr` and `len_ptr`. Nothing is
/// allocated for an empty value (Go's SDK allocator cannot allocate zero
/// bytes): the filter reads address 0, length 0.
pub(crate) fn give(caller: &mut Caller<'_, HostState>, bytes: &[u8], ptr_ptr: i32, len_ptr: i32) -> Result<()> {
    let address = match bytes.is_empty() {
        true => 0,
        false => {
            let allocate = caller
                .data()
                .allocate
                .clone()
                .ok_or_else(|| wasmtime::Error::msg("the filter exports no proxy_on_memory_allocate"))?;
            let address = allocate.call(&mut *caller, bytes.len() as i32)?;
            if address == 0 {
                return Err(wasmtime::Error::msg("the filter's allocator returned null"));
            }
            write(caller, address, bytes)?;
            address as u32
        }
    };
    write_u32(caller, ptr_ptr, address)?;
    write_u32(caller, len_ptr, bytes.len() as u32)
}
