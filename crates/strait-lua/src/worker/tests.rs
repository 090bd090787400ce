use std::time::{Duration, Instant};
use strait_plugins::SharedStore;

use http::header::HeaderValue;
use http::Method;

use super::*;

fn settings(mode: UntrustedLua, max_run_time: Duration) -> Arc<LuaSettings> {
    Arc::new(LuaSettings {
        untrusted_lua: mode,
        max_run_time,
        ..LuaSettings::default()
    })
}

fn call() -> Box<Call> {
    let mut headers = http::HeaderMap::new();
    headers.insert("x-api", HeaderValue::from_static("secret"));
    Box::new(Call {
        host: "example.test".into(),
        path: "/a".into(),
        query: "q=1".into(),
        headers,
        ..Call::new(Phase::Access, "pre-function", Method::GET, "127.0.0.1".parse().unwrap())
    })
}

fn access_code(plugin: &'static str, access: Vec<String>) -> Code {
    Code::new(plugin, [vec![], access, vec![], vec![], vec![]])
}

fn run(worker: &mut Worker, access: &[&str]) -> (Result<(), String>, Box<Call>) {
    let code = access_code("pre-function", access.iter().map(|s| s.to_string()).collect());
    let mut store = SharedStore::default();
    worker.run(&code, Phase::Access, Store::Write(&mut store), call())
}

fn error_of(worker: &mut Worker, source: &str) -> String {
    run(worker, &[source]).0.unwrap_err()
}

#[test]
fn the_sandbox_holds_kongs_whitelist_and_nothing_else() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let error = error_of(&mut worker, "os.execute('true')");
    assert!(
        error.contains("attempt to call field 'execute' (a nil value)"),
        "{error}"
    );
    let error = error_of(&mut worker, "io.open('/etc/hostname')");
    assert!(error.contains("attempt to index global 'io' (a nil value)"), "{error}");
    let error = error_of(&mut worker, "string.rep = nil");
    assert!(
        error.contains("Can not modify string.rep. Protected by the sandbox."),
        "{error}"
    );
    let error = error_of(&mut worker, "require 'os'");
    assert!(error.contains("require 'os' not allowed within sandbox"), "{error}");
    let error = error_of(&mut worker, "setmetatable({}, {})");
    assert!(
        error.contains("attempt to call global 'setmetatable' (a nil value)"),
        "{error}"
    );
    // What the whitelist has works.
    let (result, call) = run(
        &mut worker,
        &["kong.service.request.set_header('x-rep', string.rep('a', 3) .. math.floor(2.5) .. os.time() - os.time())"],
    );
    result.unwrap();
    assert_eq!(call.headers["x-rep"], "aaa20");
    // Globals stay in their chunk, and the state's own string table is whole.
    run(&mut worker, &["leaked = 1"]).0.unwrap();
    let (result, call) = run(
        &mut worker,
        &["kong.service.request.set_header('x-leak', tostring(leaked))"],
    );
    result.unwrap();
    assert_eq!(call.headers["x-leak"], "nil");
    assert_eq!(
        worker.lua.load("return string.rep('b', 2)").eval::<String>().unwrap(),
        "bb"
    );
}

#[test]
fn on_opens_the_state_and_off_refuses_to_load() {
    let mut open = Worker::new(settings(UntrustedLua::On, Duration::ZERO)).unwrap();
    let (result, call) = run(
        &mut open,
        &["local f = io.open('/proc/self/status') kong.service.request.set_header('x-io', tostring(f ~= nil)) f:close()"],
    );
    result.unwrap();
    assert_eq!(call.headers["x-io"], "true");
    let (result, call) = run(
        &mut open,
        &["kong.service.request.set_header('x-os', type(os.execute))"],
    );
    result.unwrap();
    assert_eq!(call.headers["x-os"], "function");
    let mut off = Worker::new(settings(UntrustedLua::Off, Duration::ZERO)).unwrap();
    assert_eq!(error_of(&mut off, "return 1"), UNTRUSTED_OFF);
}

#[test]
fn a_runaway_loop_ends_within_the_budget_even_when_it_catches_the_error() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::from_millis(50))).unwrap();
    for source in [
        "while true do end",
        "local n = 0 while true do n = n + 1 end",
        "while true do pcall(function() while true do end end) end",
    ] {
        let started = Instant::now();
        let error = error_of(&mut worker, source);
        assert!(error.contains("exceeded lua_max_run_time (50 ms)"), "{source}: {error}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{source}: {:?}",
            started.elapsed()
        );
    }
    // The state serves the next call, the hook cleared: code that computes
    // for less than the budget is not interrupted.
    let (result, call) = run(
        &mut worker,
        &["local n = 0 for i = 1, 200000 do n = n + i end kong.service.request.set_header('x-sum', tostring(n))"],
    );
    result.unwrap();
    assert_eq!(call.headers["x-sum"], "20000100000");
    let (result, call) = run(&mut worker, &["kong.service.request.set_header('x-after', 'yes')"]);
    result.unwrap();
    assert_eq!(call.headers["x-after"], "yes");
}

#[test]
fn exit_answers_with_a_json_table_and_stops_the_code() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let (_, call) = run(
        &mut worker,
        &[
            "kong.response.exit(403, { message = 'no key' }, { ['X-Why'] = 'test' }) kong.service.request.set_header('x-not', 'reached')",
            "kong.service.request.set_header('x-next', 'reached')",
        ],
    );
    let exit = call.exit.expect("an exit");
    assert_eq!(exit.status, 403);
    assert_eq!(&exit.body[..], br#"{"message":"no key"}"#);
    assert!(exit.headers.contains(&("x-why".into(), "test".into())));
    assert!(exit
        .headers
        .contains(&("content-type".into(), "application/json; charset=utf-8".into())));
    assert!(call.headers.get("x-not").is_none() && call.headers.get("x-next").is_none());
}

#[test]
fn a_returned_function_keeps_its_upvalues_between_requests() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let code = access_code(
        "pre-function",
        vec!["local n = 0 return function() n = n + 1 kong.service.request.set_header('x-n', n) end".into()],
    );
    for expected in ["1", "2", "3"] {
        let mut store = SharedStore::default();
        let (result, call) = worker.run(&code, Phase::Access, Store::Write(&mut store), call());
        result.unwrap();
        assert_eq!(call.headers["x-n"], expected);
    }
}

#[test]
fn the_pdk_reads_the_request_and_names_what_it_lacks() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let (result, call) = run(
        &mut worker,
        &["local r = kong.request kong.service.request.set_header('x-seen', table.concat({r.get_method(), r.get_scheme(), r.get_host(), r.get_path(), r.get_raw_query(), r.get_query_arg('q'), r.get_header('X-API'), r.get_path_with_query(), kong.client.get_ip()}, ' '))"],
    );
    result.unwrap();
    assert_eq!(
        call.headers["x-seen"],
        "GET http example.test /a q=1 1 secret /a?q=1 127.0.0.1"
    );
    let error = error_of(&mut worker, "kong.response.get_status()");
    assert!(
        error.contains("function cannot be called in access phase (only in: response, header_filter, body_filter, log, error, admin_api)"),
        "{error}"
    );
    let error = error_of(&mut worker, "return kong.db.consumers");
    assert!(error.contains("kong.db is not available in Strait"), "{error}");
    let error = error_of(&mut worker, "kong.service.request.set_header(nil, 'x')");
    assert!(
        error.contains("invalid header name \"nil\": got nil, expected string"),
        "{error}"
    );
}

#[test]
fn a_syntax_error_reads_as_luajits() {
    assert_eq!(
        syntax_error("x =").as_deref(),
        Some("[string \"x =\"]:1: unexpected symbol near '<eof>'")
    );
    assert_eq!(syntax_error("return 1"), None);
}

#[test]
fn dropped_instances_are_forgotten() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let code = access_code("pre-function", vec!["return 1".into()]);
    let mut store = SharedStore::default();
    worker
        .run(&code, Phase::Access, Store::Write(&mut store), call())
        .0
        .unwrap();
    let key = (code.id.0, Phase::Access as u8);
    assert!(worker.compiled.contains_key(&key));
    drop(code);
    worker.forget_retired();
    assert!(!worker.compiled.contains_key(&key));
}

#[test]
fn a_call_past_the_memory_cap_fails_alone() {
    let limits = Arc::new(LuaSettings {
        memory_limit: 32 << 20,
        max_run_time: Duration::ZERO,
        ..LuaSettings::default()
    });
    let mut worker = Worker::new(limits).unwrap();
    let error = error_of(
        &mut worker,
        "local t = {} for i = 1, 1e8 do t[i] = string.rep('x', 64) .. i end",
    );
    assert!(error.contains("not enough memory"), "{error}");
    assert!(!worker.spent, "the table was garbage: collected");
    let (result, call) = run(&mut worker, &["kong.service.request.set_header('x-after', 'fine')"]);
    result.unwrap();
    assert_eq!(call.headers["x-after"], "fine");
    // Data kept past the call (a global of the open environment's state)
    // leaves the state spent.
    let mut open = Worker::new(Arc::new(LuaSettings {
        untrusted_lua: UntrustedLua::On,
        memory_limit: 32 << 20,
        max_run_time: Duration::ZERO,
        ..LuaSettings::default()
    }))
    .unwrap();
    let error = error_of(
        &mut open,
        "_G.kept = {} for i = 1, 1e8 do _G.kept[i] = string.rep('y', 64) .. i end",
    );
    assert!(error.contains("not enough memory"), "{error}");
    assert!(open.spent);
}

#[test]
fn kong_ctx_lives_as_long_as_its_request() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let first = access_code(
        "pre-function",
        vec![
            "kong.ctx.shared.tenant = kong.request.get_header('x-api') kong.ctx.plugin.mine = 'pre' ngx.ctx.seen = 1"
                .into(),
        ],
    );
    let second = access_code("post-function", vec![
            "kong.service.request.set_header('x-tenant', tostring(kong.ctx.shared.tenant) .. ' ' .. tostring(kong.ctx.plugin.mine) .. ' ' .. tostring(ngx.ctx.seen)) kong.log.set_serialize_value('request.tenant', kong.ctx.shared.tenant)"
                .into(),
        ]);
    let mut store = SharedStore::default();
    worker
        .run(&first, Phase::Access, Store::Write(&mut store), call())
        .0
        .unwrap();
    let (result, call_after) = worker.run(&second, Phase::Access, Store::Write(&mut store), call());
    result.unwrap();
    // Shared across plugins, each plugin's own table apart.
    assert_eq!(call_after.headers["x-tenant"], "secret nil 1");
    assert_eq!(call_after.serialize.len(), 1);
    assert_eq!(call_after.serialize[0].0, "request.tenant");
    // Another request sees none of it.
    let mut other = SharedStore::default();
    let (_, call_other) = worker.run(&second, Phase::Access, Store::Write(&mut other), call());
    assert_eq!(call_other.headers["x-tenant"], "nil nil nil");
    assert_eq!(crate::ctx::live(), 2);
    drop(store);
    drop(other);
    let mut third = SharedStore::default();
    worker
        .run(&first, Phase::Access, Store::Write(&mut third), call())
        .0
        .unwrap();
    assert_eq!(crate::ctx::live(), 1, "the ended requests' tables are gone");
}

#[test]
fn bodies_are_read_and_set_as_kong_does() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let code = |source: &str| access_code("pre-function", vec![source.to_string()]);
    let run_with = |worker: &mut Worker, source: &str, body: &str, content_type: &str| {
        let mut request = call();
        request.body = Some(bytes::Bytes::from(body.to_string()));
        request
            .headers
            .insert("content-type", HeaderValue::from_str(content_type).unwrap());
        let mut store = SharedStore::default();
        worker.run(&code(source), Phase::Access, Store::Write(&mut store), request)
    };
    let (result, call) = run_with(
        &mut worker,
        "local b = kong.request.get_body() kong.service.request.set_body({ seen = b.name, n = 2 }, 'application/json')",
        r#"{"name":"ann"}"#,
        "application/json",
    );
    result.unwrap();
    let (body, content_type) = call.body_set.unwrap();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json, serde_json::json!({ "seen": "ann", "n": 2 }));
    assert_eq!(content_type.unwrap(), "application/json");
    let (result, call) = run_with(
        &mut worker,
        "local b = kong.request.get_body() kong.service.request.set_body({ z = b.a, a = { '1', '2' }, flag = true })",
        "a=x%20y",
        "application/x-www-form-urlencoded",
    );
    result.unwrap();
    assert_eq!(&call.body_set.unwrap().0[..], b"a=1&a=2&flag&z=x%20y");
    let (result, call) = run_with(
        &mut worker,
        "kong.service.request.set_raw_body(kong.request.get_raw_body() .. '!')",
        "raw",
        "text/plain",
    );
    result.unwrap();
    assert_eq!(&call.body_set.unwrap().0[..], b"raw!");
    let (result, _) = run_with(&mut worker, "kong.service.request.set_body({})", "", "text/plain");
    assert!(result.unwrap_err().contains("unsupported content type 'text/plain'"));
}

/// Runs `source` in access on a fresh call, sets the result into
/// `x-out` via `kong.service.request.set_header`, and returns it.
fn out_of(worker: &mut Worker, source: &str) -> String {
    let code = access_code(
        "pre-function",
        vec![format!(
            "kong.service.request.set_header('x-out', tostring(({source})))"
        )],
    );
    let mut store = SharedStore::default();
    let (result, call) = worker.run(&code, Phase::Access, Store::Write(&mut store), call());
    result.unwrap_or_else(|e| panic!("{source}: {e}"));
    call.headers["x-out"].to_str().unwrap().to_string()
}

#[test]
fn ngx_helpers_answer_as_openresty_does() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let cases = [
        ("ngx.encode_base64('hello?')", "aGVsbG8/"),
        ("ngx.decode_base64('aGVsbG8/')", "hello?"),
        ("ngx.md5('abc')", "900150983cd24fb0d6963f7d28e17f72"),
        ("ngx.encode_base64(ngx.sha1_bin('abc'))", "qZk+NkcGgWq6PiVxeFDCbJzQ2J0="),
        (
            "ngx.encode_base64(ngx.hmac_sha1('key', 'The quick brown fox jumps over the lazy dog'))",
            "3nybhbi3iqa8ino29wqQcBydtNk=",
        ),
        ("ngx.escape_uri('a b/ü')", "a%20b%2F%C3%BC"),
        ("ngx.unescape_uri('a%20b+c')", "a b c"),
        (
            "ngx.encode_args({ b = 'x y', a = true, c = { '1', '2' } })",
            "a&b=x%20y&c=1&c=2",
        ),
        ("ngx.decode_args('a=1&a=2&b')['a'][2]", "2"),
        ("ngx.re.match('hello 2026', '(\\\\d+)')[1]", "2026"),
        ("ngx.re.match('Key: v', '^(?<k>\\\\w+): (v)$', 'i').k", "Key"),
        ("ngx.re.match('abc', 'x')", "nil"),
        (
            "select(2, ngx.re.match('abc', '('))",
            "pcre_compile() failed: unclosed group",
        ),
        ("select(2, ngx.re.find('hello world', 'wor'))", "9"),
        ("ngx.re.gsub('a1b22', '\\\\d+', '<$0>')", "a<1>b<22>"),
        ("ngx.re.sub('a1b22', '(\\\\d)', '${1}$$')", "a1$b22"),
        ("ngx.re.gsub('ab', 'b', function(m) return m[0]:upper() end)", "aB"),
        (
            "(function() local n = 0 for m in ngx.re.gmatch('a1b2c3', '\\\\d') do n = n + m[0] end return n end)()",
            "6",
        ),
        (
            "require('cjson.safe').encode({ a = { 1, 2, ngx.null } })",
            r#"{"a":[1,2,null]}"#,
        ),
        ("require('cjson.safe').decode('{\"x\": [true]}').x[1]", "true"),
        (
            "select(2, require('cjson.safe').decode('{'))",
            "Expected value but found invalid JSON: EOF while parsing an object at line 1 column 1",
        ),
        ("ngx.var.request_uri", "/a?q=1"),
        ("ngx.var.http_x_api", "secret"),
        ("ngx.var.arg_q", "1"),
        ("ngx.get_phase()", "access"),
        ("kong.request.get_query().q", "1"),
        ("kong.ip.is_trusted('10.0.0.1')", "false"),
        ("#kong.node.get_id()", "36"),
        (
            "(function() local t = kong.table.new(2, 0) t[1] = 1 kong.table.clear(t) return #t end)()",
            "0",
        ),
        ("ngx.http_time(0)", "Thu, 01 Jan 1970 00:00:00 GMT"),
        ("ngx.cookie_time(0)", "Thu, 01-Jan-1970 00:00:00 GMT"),
    ];
    for (source, expected) in cases {
        // `require` of cjson needs it allowed (Kong's sandbox too).
        let mut open = Worker::new(settings(UntrustedLua::On, Duration::ZERO)).unwrap();
        let worker = if source.contains("require") {
            &mut open
        } else {
            &mut worker
        };
        assert_eq!(out_of(worker, source), expected, "{source}");
    }
}

#[test]
fn kong_cache_calls_back_once_and_keeps_errors_out() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let source = "(function() \
        local calls = 0 \
        local function load(x) calls = calls + 1 return x .. '!' end \
        local a = kong.cache:get('k', nil, load, 'v') \
        local b, err, level = kong.cache:get('k', nil, load, 'other') \
        local c, failed = kong.cache:get('bad', nil, function() error('boom') end) \
        local ttl, _, probed = kong.cache:probe('k') \
        kong.cache:invalidate('k') \
        local d = kong.cache:get('k', { ttl = 10 }, load, 'again') \
        return table.concat({ a, b, level, calls, tostring(c), failed:match('callback threw an error') and 'err' or failed, probed, d }, ',') \
      end)()";
    assert_eq!(out_of(&mut worker, source), "v!,v!,1,2,nil,err,v!,again!");
}

#[test]
fn request_line_setters_and_errors_reach_the_call() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let code = access_code(
        "pre-function",
        vec!["kong.service.request.set_path('/v2/items') kong.service.request.set_query({ page = 2 }) kong.service.request.set_method('POST')".into()],
    );
    let mut store = SharedStore::default();
    let (result, call) = worker.run(&code, Phase::Access, Store::Write(&mut store), call());
    result.unwrap();
    assert_eq!(call.more.upstream_path.as_deref(), Some("/v2/items"));
    assert_eq!(call.more.upstream_query.as_deref(), Some("page=2"));
    assert_eq!(call.more.upstream_method, Some(Method::POST));
    let (result, _) = run(&mut worker, &["kong.service.request.set_path('v2')"]);
    assert!(result.unwrap_err().contains("path must start with /"));
    let (result, _) = run(&mut worker, &["kong.service.request.set_method('BREW')"]);
    assert!(result.unwrap_err().contains("invalid method: BREW"));

    let (_, call) = run(&mut worker, &["return kong.response.error(403)"]);
    let exit = call.exit.expect("answered");
    assert_eq!(exit.status, 403);
    assert_eq!(&exit.body[..], br#"{"message":"Forbidden"}"#);
    let (_, call) = run(
        &mut worker,
        &["return kong.response.error(429, 'slow down', { ['Retry-After'] = 5 })"],
    );
    let exit = call.exit.expect("answered");
    assert_eq!(&exit.body[..], br#"{"message":"slow down"}"#);
    assert!(exit.headers.iter().any(|(n, v)| n == "retry-after" && v == "5"));
}

#[test]
fn body_filter_code_buffers_and_replaces_the_body() {
    let mut worker = Worker::new(settings(UntrustedLua::Sandbox, Duration::ZERO)).unwrap();
    let code = Code::new(
        "post-function",
        [
            vec![],
            vec![],
            vec![],
            vec![
                "local body = kong.response.get_raw_body() if body then kong.response.set_raw_body(body:upper()) end"
                    .into(),
            ],
            vec![],
        ],
    );
    let mut store = SharedStore::default();
    let mut piece = |data: &str, eof: bool, buffered: Option<bytes::BytesMut>, store: &mut SharedStore| {
        let mut request = call();
        request.phase = Phase::BodyFilter;
        request.chunk = Some(bytes::Bytes::from(data.to_string()));
        request.eof = eof;
        request.buffered = buffered;
        let (result, call) = worker.run(&code, Phase::BodyFilter, Store::Write(store), request);
        result.unwrap();
        call
    };
    let first = piece("hello ", false, None, &mut store);
    assert!(first.chunk.is_none(), "nothing sent before the last piece");
    let last = piece("world", true, first.buffered, &mut store);
    assert_eq!(&last.chunk.unwrap()[..], b"HELLO WORLD");
    let (result, _) = run(&mut worker, &["kong.response.get_raw_body()"]);
    assert!(result
        .unwrap_err()
        .contains("function cannot be called in access phase (only in: body_filter)"));
}
