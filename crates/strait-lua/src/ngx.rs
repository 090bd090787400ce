//! The `ngx.*` helpers PDK plugins commonly reach for, and `cjson`:
//! regexes (`ngx.re`, compiled once per worker and cached), encodings and
//! digests, URI escaping and query arguments, time, `ngx.var`,
//! `ngx.get_phase`.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use base64::Engine;
use mlua::{Error, Function, Lua, LuaSerdeExt, MultiValue, Table, Value};
use regex::bytes::{Captures, Regex, RegexBuilder};

use crate::pdk::{current_phase, read_var};

/// Installs the helpers into `ngx`, and `cjson`/`cjson.safe` into
/// `package.preload`.
pub(crate) fn install(lua: &Lua, ngx: &Table) -> mlua::Result<()> {
    ngx.set("re", re(lua)?)?;
    ngx.set(
        "encode_base64",
        lua.create_function(|lua, (text, no_padding): (mlua::String, Option<bool>)| {
            let engine = match no_padding.unwrap_or(false) {
                true => &base64::engine::general_purpose::STANDARD_NO_PAD,
                false => &base64::engine::general_purpose::STANDARD,
            };
            lua.create_string(engine.encode(&*text.as_bytes()))
        })?,
    )?;
    ngx.set(
        "decode_base64",
        lua.create_function(|lua, text: mlua::String| {
            let bytes = text.as_bytes();
            let decoded = base64::engine::general_purpose::STANDARD
                .decode(&*bytes)
                .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(&*bytes));
            match decoded {
                Ok(bytes) => Ok(Value::String(lua.create_string(bytes)?)),
                Err(_) => Ok(Value::Nil),
            }
        })?,
    )?;
    ngx.set(
        "md5",
        lua.create_function(|_, text: mlua::String| {
            use md5::Digest;
            Ok(hex(&md5::Md5::digest(&*text.as_bytes())))
        })?,
    )?;
    ngx.set(
        "md5_bin",
        lua.create_function(|lua, text: mlua::String| {
            use md5::Digest;
            lua.create_string(md5::Md5::digest(&*text.as_bytes()))
        })?,
    )?;
    ngx.set(
        "sha1_bin",
        lua.create_function(|lua, text: mlua::String| {
            let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, &text.as_bytes());
            lua.create_string(digest.as_ref())
        })?,
    )?;
    ngx.set(
        "hmac_sha1",
        lua.create_function(|lua, (key, text): (mlua::String, mlua::String)| {
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY, &key.as_bytes());
            lua.create_string(ring::hmac::sign(&key, &text.as_bytes()).as_ref())
        })?,
    )?;
    ngx.set(
        "escape_uri",
        lua.create_function(|_, (text, kind): (Value, Option<i64>)| {
            let text = text_of(&text, "escape_uri")?;
            Ok(escape_uri(text.as_bytes(), kind.unwrap_or(2)))
        })?,
    )?;
    ngx.set(
        "unescape_uri",
        lua.create_function(|lua, text: Value| {
            let text = text_of(&text, "unescape_uri")?;
            lua.create_string(unescape(text.as_bytes(), true))
        })?,
    )?;
    ngx.set("encode_args", lua.create_function(|_, args: Table| encode_args(&args))?)?;
    ngx.set(
        "decode_args",
        lua.create_function(|lua, (text, max): (mlua::String, Option<i64>)| {
            let limit = match max {
                None => 100,
                Some(n) if n <= 0 => usize::MAX,
                Some(n) => n as usize,
            };
            decode_args(lua, &text.to_string_lossy(), limit)
        })?,
    )?;
    ngx.set("today", lua.create_function(|_, ()| Ok(civil(now_secs(), "%Y-%m-%d")))?)?;
    ngx.set(
        "localtime",
        lua.create_function(|_, ()| Ok(civil(now_secs(), "%Y-%m-%d %H:%M:%S")))?,
    )?;
    ngx.set(
        "utctime",
        lua.create_function(|_, ()| Ok(civil(now_secs(), "%Y-%m-%d %H:%M:%S")))?,
    )?;
    ngx.set(
        "http_time",
        lua.create_function(|_, secs: f64| {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0.0) as u64);
            Ok(httpdate::fmt_http_date(at))
        })?,
    )?;
    ngx.set(
        "cookie_time",
        lua.create_function(|_, secs: f64| {
            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(secs.max(0.0) as u64);
            // "Thu, 18-Nov-10 11:27:35 GMT", as nginx writes cookie expiries.
            let text = httpdate::fmt_http_date(at);
            let parts: Vec<&str> = text.split(' ').collect();
            Ok(match parts.as_slice() {
                [day, date, month, year, time, zone] => format!("{day} {date}-{month}-{year} {time} {zone}"),
                _ => text,
            })
        })?,
    )?;
    ngx.set(
        "parse_http_time",
        lua.create_function(|_, text: String| {
            Ok(httpdate::parse_http_date(&text)
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map(|d| d.as_secs() as i64))
        })?,
    )?;
    ngx.set(
        "get_phase",
        lua.create_function(|_, ()| Ok(current_phase().unwrap_or("init_worker")))?,
    )?;
    ngx.set("var", var(lua)?)?;
    let package: Table = lua.globals().get("package")?;
    let preload: Table = package.get("preload")?;
    let strict = cjson(lua, false)?;
    let safe = cjson(lua, true)?;
    preload.set("cjson", lua.create_function(move |_, ()| Ok(strict.clone()))?)?;
    preload.set("cjson.safe", lua.create_function(move |_, ()| Ok(safe.clone()))?)?;
    Ok(())
}

fn text_of(value: &Value, function: &str) -> mlua::Result<String> {
    match value {
        Value::String(text) => Ok(text.to_string_lossy()),
        Value::Integer(n) => Ok(n.to_string()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Nil => Ok(String::new()),
        other => Err(Error::runtime(format!(
            "bad argument #1 to '{function}' (string expected, got {})",
            other.type_name()
        ))),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A UTC time as `%Y-%m-%d` or `%Y-%m-%d %H:%M:%S` (the node runs in UTC
/// for these: Strait does not read the local time zone).
fn civil(secs: u64, format: &str) -> String {
    let days = (secs / 86_400) as i64;
    let rest = secs % 86_400;
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    let date = format!("{year:04}-{month:02}-{day:02}");
    match format {
        "%Y-%m-%d" => date,
        _ => format!("{date} {:02}:{:02}:{:02}", rest / 3600, rest / 60 % 60, rest % 60),
    }
}

/// nginx's `ngx_escape_uri`: type 2 (the default, `escape_uri`) escapes
/// everything but unreserved characters; type 0 leaves `/` and more.
fn escape_uri(bytes: &[u8], kind: i64) -> String {
    let keep = |b: u8| match kind {
        0 => b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:@/?".contains(&b),
        _ => b.is_ascii_alphanumeric() || b"-._~".contains(&b),
    };
    let mut out = String::with_capacity(bytes.len());
    for &b in bytes {
        match keep(b) {
            true => out.push(b as char),
            false => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// `%XX` decoded, and `+` as a space when `plus`.
pub(crate) fn unescape(bytes: &[u8], plus: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |b: u8| (b as char).to_digit(16);
        match bytes[at] {
            b'%' if at + 2 < bytes.len() => match (hex(bytes[at + 1]), hex(bytes[at + 2])) {
                (Some(high), Some(low)) => {
                    out.push((high * 16 + low) as u8);
                    at += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' if plus => out.push(b' '),
            other => out.push(other),
        }
        at += 1;
    }
    out
}

/// `ngx.encode_args`: `key=value` pairs joined by `&`, escaped; a `true`
/// value writes the key alone, `false` skips it, an array repeats the key.
pub(crate) fn encode_args(args: &Table) -> mlua::Result<String> {
    let mut pairs: Vec<(String, Option<String>)> = Vec::new();
    for pair in args.pairs::<Value, Value>() {
        let (key, value) = pair?;
        let key = match key {
            Value::String(text) => text.to_string_lossy(),
            Value::Integer(n) => n.to_string(),
            other => {
                return Err(Error::runtime(format!(
                    "bad argument #1 to 'encode_args' (invalid key type {})",
                    other.type_name()
                )))
            }
        };
        let mut push = |value: &Value| -> mlua::Result<()> {
            match value {
                Value::Boolean(true) => pairs.push((key.clone(), None)),
                Value::Boolean(false) => {}
                Value::String(text) => pairs.push((key.clone(), Some(text.to_string_lossy()))),
                Value::Integer(n) => pairs.push((key.clone(), Some(n.to_string()))),
                Value::Number(n) => pairs.push((key.clone(), Some(n.to_string()))),
                other => {
                    return Err(Error::runtime(format!(
                        "attempt to use {} as query arg value",
                        other.type_name()
                    )))
                }
            }
            Ok(())
        };
        match &value {
            Value::Table(list) => {
                for item in list.clone().sequence_values::<Value>() {
                    push(&item?)?;
                }
            }
            other => push(other)?,
        }
    }
    pairs.sort();
    Ok(pairs
        .iter()
        .map(|(key, value)| match value {
            None => escape_uri(key.as_bytes(), 2),
            Some(value) => format!("{}={}", escape_uri(key.as_bytes(), 2), escape_uri(value.as_bytes(), 2)),
        })
        .collect::<Vec<_>>()
        .join("&"))
}

/// `ngx.decode_args` (and `kong.request.get_query`): a table of the
/// arguments, repeated keys as arrays, a key without `=` as `true`.
pub(crate) fn decode_args(lua: &Lua, query: &str, limit: usize) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    for pair in query.split('&').filter(|p| !p.is_empty()).take(limit) {
        let (key, value) = match pair.split_once('=') {
            Some((key, value)) => (key, Some(value)),
            None => (pair, None),
        };
        let key = lua.create_string(unescape(key.as_bytes(), true))?;
        let value = match value {
            Some(value) => Value::String(lua.create_string(unescape(value.as_bytes(), true))?),
            None => Value::Boolean(true),
        };
        match table.raw_get::<Value>(&key)? {
            Value::Nil => table.raw_set(key, value)?,
            Value::Table(list) => list.raw_push(value)?,
            first => {
                let list = lua.create_sequence_from([first, value])?;
                table.raw_set(key, list)?;
            }
        }
    }
    Ok(table)
}

/// `ngx.var`: the common variables, read-only.
fn var(lua: &Lua) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let meta = lua.create_table()?;
    meta.set(
        "__index",
        lua.create_function(|lua, (_, name): (Value, String)| match read_var(&name)? {
            Some(text) => Ok(Value::String(lua.create_string(text)?)),
            None => Ok(Value::Nil),
        })?,
    )?;
    meta.set(
        "__newindex",
        lua.create_function(|_, (_, name): (Value, String)| -> mlua::Result<()> {
            Err(Error::runtime(format!("ngx.var.{name} cannot be set in Strait")))
        })?,
    )?;
    t.set_metatable(Some(meta))?;
    Ok(t)
}

/// Compiled regexes by pattern and flags, per worker state.
type Cache = Rc<RefCell<HashMap<(Vec<u8>, String), Rc<Compiled>>>>;

struct Compiled {
    regex: Regex,
    anchored: bool,
}

/// The most regexes one worker keeps compiled; past it the cache starts over.
const CACHE_LIMIT: usize = 1024;

fn compile(cache: &Cache, pattern: &[u8], flags: &str) -> Result<Rc<Compiled>, String> {
    let key = (pattern.to_vec(), flags.to_string());
    if let Some(found) = cache.borrow().get(&key) {
        return Ok(found.clone());
    }
    let mut builder_flags = (false, false, false, false, false, false);
    for flag in flags.chars() {
        match flag {
            'i' => builder_flags.0 = true,
            'm' => builder_flags.1 = true,
            's' => builder_flags.2 = true,
            'x' => builder_flags.3 = true,
            'u' | 'U' => builder_flags.4 = true,
            'a' => builder_flags.5 = true,
            // JIT, compile once, DFA, duplicate names, JavaScript mode:
            // how PCRE runs, not what matches.
            'j' | 'o' | 'd' | 'D' | 'J' => {}
            other => return Err(format!("unknown flag \"{other}\" (flags \"{flags}\")")),
        }
    }
    let (insensitive, multi, dotall, extended, unicode, anchored) = builder_flags;
    let text = std::str::from_utf8(pattern).map_err(|_| "the pattern is not valid UTF-8".to_string())?;
    let regex = RegexBuilder::new(text)
        .case_insensitive(insensitive)
        .multi_line(multi)
        .dot_matches_new_line(dotall)
        .ignore_whitespace(extended)
        .unicode(unicode)
        .build()
        .map_err(|e| {
            let text = e.to_string();
            let why = text.lines().last().unwrap_or("invalid pattern").trim();
            format!("pcre_compile() failed: {}", why.trim_start_matches("error: "))
        })?;
    let compiled = Rc::new(Compiled { regex, anchored });
    let mut cache = cache.borrow_mut();
    if cache.len() >= CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(key, compiled.clone());
    Ok(compiled)
}

/// The first match at or after `from` (a byte offset), honouring `a`.
fn search<'s>(compiled: &Compiled, subject: &'s [u8], from: usize) -> Option<Captures<'s>> {
    if from > subject.len() {
        return None;
    }
    let found = compiled.regex.captures_at(subject, from)?;
    match compiled.anchored && found.get(0).is_some_and(|m| m.start() != from) {
        true => None,
        false => Some(found),
    }
}

/// A match as OpenResty's captures table: `[0]` the whole match, `[n]`
/// each group (`false` when it did not take part), names as keys.
fn captures_table(lua: &Lua, regex: &Regex, found: &Captures<'_>) -> mlua::Result<Table> {
    let table = lua.create_table()?;
    for (at, group) in found.iter().enumerate() {
        let value = match group {
            Some(m) => Value::String(lua.create_string(m.as_bytes())?),
            None => Value::Boolean(false),
        };
        table.raw_set(at as i64, value)?;
    }
    for name in regex.capture_names().flatten() {
        let value = match found.name(name) {
            Some(m) => Value::String(lua.create_string(m.as_bytes())?),
            None => Value::Boolean(false),
        };
        table.raw_set(name, value)?;
    }
    Ok(table)
}

/// `ctx.pos` (1-based) as a byte offset, and the table to update.
fn start_of(ctx: &Option<Table>) -> mlua::Result<usize> {
    Ok(match ctx {
        Some(ctx) => match ctx.get::<Option<i64>>("pos")? {
            Some(pos) if pos >= 1 => (pos - 1) as usize,
            _ => 0,
        },
        None => 0,
    })
}

fn re(lua: &Lua) -> mlua::Result<Table> {
    let cache: Cache = Rc::new(RefCell::new(HashMap::new()));
    let t = lua.create_table()?;
    let failed = |lua: &Lua, message: String| -> mlua::Result<MultiValue> {
        Ok(MultiValue::from_vec(vec![
            Value::Nil,
            Value::String(lua.create_string(message)?),
        ]))
    };
    {
        let cache = cache.clone();
        t.set(
            "match",
            lua.create_function(
                move |lua, (subject, pattern, flags, ctx): (mlua::String, mlua::String, Option<String>, Option<Table>)| {
                    let compiled = match compile(&cache, &pattern.as_bytes(), flags.as_deref().unwrap_or("")) {
                        Ok(compiled) => compiled,
                        Err(message) => return failed(lua, message),
                    };
                    let subject = subject.as_bytes();
                    let from = start_of(&ctx)?;
                    match search(&compiled, &subject, from) {
                        None => Ok(MultiValue::from_vec(vec![Value::Nil])),
                        Some(found) => {
                            if let (Some(ctx), Some(whole)) = (&ctx, found.get(0)) {
                                ctx.set("pos", whole.end() as i64 + 1)?;
                            }
                            let table = captures_table(lua, &compiled.regex, &found)?;
                            Ok(MultiValue::from_vec(vec![Value::Table(table)]))
                        }
                    }
                },
            )?,
        )?;
    }
    {
        let cache = cache.clone();
        t.set(
            "find",
            lua.create_function(
                move |lua,
                      (subject, pattern, flags, ctx, nth): (
                    mlua::String,
                    mlua::String,
                    Option<String>,
                    Option<Table>,
                    Option<usize>,
                )| {
                    let compiled = match compile(&cache, &pattern.as_bytes(), flags.as_deref().unwrap_or("")) {
                        Ok(compiled) => compiled,
                        Err(message) => return failed(lua, message),
                    };
                    let subject = subject.as_bytes();
                    let from = start_of(&ctx)?;
                    let Some(found) = search(&compiled, &subject, from) else {
                        return Ok(MultiValue::from_vec(vec![Value::Nil]));
                    };
                    if let (Some(ctx), Some(whole)) = (&ctx, found.get(0)) {
                        ctx.set("pos", whole.end() as i64 + 1)?;
                    }
                    match found.get(nth.unwrap_or(0)) {
                        Some(m) => Ok(MultiValue::from_vec(vec![
                            Value::Integer(m.start() as i64 + 1),
                            Value::Integer(m.end() as i64),
                        ])),
                        None => Ok(MultiValue::from_vec(vec![Value::Nil])),
                    }
                },
            )?,
        )?;
    }
    {
        let cache = cache.clone();
        t.set(
            "gmatch",
            lua.create_function(
                move |lua, (subject, pattern, flags): (mlua::String, mlua::String, Option<String>)| {
                    let compiled = match compile(&cache, &pattern.as_bytes(), flags.as_deref().unwrap_or("")) {
                        Ok(compiled) => compiled,
                        Err(message) => return Ok((Value::Nil, Value::String(lua.create_string(message)?))),
                    };
                    let subject = subject.as_bytes().to_vec();
                    let position = std::cell::Cell::new(Some(0usize));
                    let iterator = lua.create_function(move |lua, ()| {
                        let Some(from) = position.get() else {
                            return Ok(Value::Nil);
                        };
                        match search(&compiled, &subject, from) {
                            None => {
                                position.set(None);
                                Ok(Value::Nil)
                            }
                            Some(found) => {
                                let whole = found.get(0).expect("group 0");
                                // An empty match moves one byte on.
                                let next = if whole.end() == whole.start() {
                                    whole.end() + 1
                                } else {
                                    whole.end()
                                };
                                position.set(Some(next));
                                Ok(Value::Table(captures_table(lua, &compiled.regex, &found)?))
                            }
                        }
                    })?;
                    Ok((Value::Function(iterator), Value::Nil))
                },
            )?,
        )?;
    }
    for (name, global) in [("gsub", true), ("sub", false)] {
        let cache = cache.clone();
        t.set(
            name,
            lua.create_function(
                move |lua, (subject, pattern, replace, flags): (mlua::String, mlua::String, Value, Option<String>)| {
                    let compiled = match compile(&cache, &pattern.as_bytes(), flags.as_deref().unwrap_or("")) {
                        Ok(compiled) => compiled,
                        Err(message) => return failed(lua, message),
                    };
                    let subject = subject.as_bytes();
                    let mut out = Vec::with_capacity(subject.len());
                    let mut last = 0;
                    let mut from = 0;
                    let mut count = 0i64;
                    while let Some(found) = search(&compiled, &subject, from) {
                        let whole = found.get(0).expect("group 0");
                        out.extend_from_slice(&subject[last..whole.start()]);
                        match &replace {
                            Value::String(template) => expand(&template.as_bytes(), &found, &mut out)?,
                            Value::Function(function) => {
                                let table = captures_table(lua, &compiled.regex, &found)?;
                                let replaced: mlua::String = Function::call(function, table)?;
                                out.extend_from_slice(&replaced.as_bytes());
                            }
                            Value::Integer(_) | Value::Number(_) => {
                                out.extend_from_slice(crate::pdk::display_value(&replace).as_bytes())
                            }
                            other => {
                                return Err(Error::runtime(format!(
                                    "bad argument #3 to '{name}' (string, number, or function expected, got {})",
                                    other.type_name()
                                )))
                            }
                        }
                        count += 1;
                        last = whole.end();
                        from = if whole.end() == whole.start() {
                            if whole.end() < subject.len() {
                                out.push(subject[whole.end()]);
                            }
                            last = whole.end() + 1;
                            whole.end() + 1
                        } else {
                            whole.end()
                        };
                        if !global || from > subject.len() {
                            break;
                        }
                    }
                    if last < subject.len() {
                        out.extend_from_slice(&subject[last..]);
                    }
                    Ok(MultiValue::from_vec(vec![
                        Value::String(lua.create_string(out)?),
                        Value::Integer(count),
                    ]))
                },
            )?,
        )?;
    }
    Ok(t)
}

/// A replacement template: `$0`..`$9`, `${n}`, `$$`.
fn expand(template: &[u8], found: &Captures<'_>, out: &mut Vec<u8>) -> mlua::Result<()> {
    let mut at = 0;
    while at < template.len() {
        if template[at] != b'$' {
            out.push(template[at]);
            at += 1;
            continue;
        }
        let rest = &template[at + 1..];
        let (group, used) = match rest.first() {
            Some(b'$') => {
                out.push(b'$');
                at += 2;
                continue;
            }
            Some(digit) if digit.is_ascii_digit() => ((digit - b'0') as usize, 1),
            Some(b'{') => {
                let end = rest.iter().position(|b| *b == b'}');
                let number = end.and_then(|end| std::str::from_utf8(&rest[1..end]).ok()?.parse::<usize>().ok());
                match (number, end) {
                    (Some(number), Some(end)) => (number, end + 1),
                    _ => return Err(Error::runtime("failed to compile the replacement template")),
                }
            }
            _ => return Err(Error::runtime("failed to compile the replacement template")),
        };
        if let Some(m) = found.get(group) {
            out.extend_from_slice(m.as_bytes());
        }
        at += 1 + used;
    }
    Ok(())
}

/// `cjson` (errors raised) or `cjson.safe` (nil and the message).
fn cjson(lua: &Lua, safe: bool) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    t.set("null", Value::NULL)?;
    let empty = lua.create_table()?;
    empty.set_metatable(Some(lua.array_metatable()))?;
    t.set("empty_array", empty)?;
    t.set("array_mt", lua.array_metatable())?;
    t.set("empty_array_mt", lua.array_metatable())?;
    let answer = move |lua: &Lua, result: Result<Value, String>| -> mlua::Result<MultiValue> {
        match (result, safe) {
            (Ok(value), _) => Ok(MultiValue::from_vec(vec![value])),
            (Err(message), true) => Ok(MultiValue::from_vec(vec![
                Value::Nil,
                Value::String(lua.create_string(message)?),
            ])),
            (Err(message), false) => Err(Error::runtime(message)),
        }
    };
    t.set(
        "encode",
        lua.create_function(move |lua, value: Value| {
            let json: Result<serde_json::Value, String> =
                lua.from_value(value).map_err(|e| format!("Cannot serialise: {e}"));
            let text = json.and_then(|json| serde_json::to_string(&json).map_err(|e| e.to_string()));
            let result = match text {
                Ok(text) => lua.create_string(text).map(Value::String).map_err(|e| e.to_string()),
                Err(message) => Err(message),
            };
            answer(lua, result)
        })?,
    )?;
    t.set(
        "decode",
        lua.create_function(move |lua, text: Value| {
            let Value::String(text) = text else {
                return answer(lua, Err("Expected value but found invalid token at character 1".into()));
            };
            let parsed: Result<serde_json::Value, String> = serde_json::from_slice(&text.as_bytes())
                .map_err(|e| format!("Expected value but found invalid JSON: {e}"));
            let result = parsed.and_then(|json| lua.to_value(&json).map_err(|e| e.to_string()));
            answer(lua, result)
        })?,
    )?;
    // Settings plugins call; the defaults already are what they ask for.
    for setter in [
        "encode_empty_table_as_object",
        "decode_array_with_array_mt",
        "encode_escape_forward_slash",
        "encode_number_precision",
        "encode_max_depth",
        "decode_max_depth",
    ] {
        t.set(setter, lua.create_function(|_, _: MultiValue| Ok(()))?)?;
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates_are_utc_calendar_dates() {
        assert_eq!(civil(0, "%Y-%m-%d"), "1970-01-01");
        assert_eq!(civil(951_782_400, "%Y-%m-%d"), "2000-02-29");
        assert_eq!(civil(1_700_000_000, "%Y-%m-%d %H:%M:%S"), "2023-11-14 22:13:20");
    }

    #[test]
    fn uris_escape_as_nginx_does() {
        assert_eq!(escape_uri(b"a b/c?d=e&f", 2), "a%20b%2Fc%3Fd%3De%26f");
        assert_eq!(unescape(b"a%20b+c%2", true), b"a b c%2");
    }
}
