use std::net::IpAddr;

use crate::{ascii_perl_classes, compile_regex, parse, Expr, Field, Literal, Op};

fn ok(input: &str) -> Expr {
    match parse(input) {
        Ok(expr) => expr,
        Err(err) => panic!("{input}: {err}"),
    }
}

fn err(input: &str) -> String {
    match parse(input) {
        Ok(expr) => panic!("{input} parsed: {expr:?}"),
        Err(err) => err.to_string(),
    }
}

#[test]
fn parses_every_field_and_operator_kind() {
    let accepted = [
        r#"http.path == "/a""#,
        r#"http.path != "/a""#,
        r#"http.path ~ "^/a/\\d+$""#,
        r#"http.path ^= "/a""#,
        r#"http.host =^ ".example.com""#,
        r#"http.headers.x_foo contains "bar""#,
        r##"lower(http.headers.user_agent) ~ r#"curl/\d"#"##,
        r#"any(http.queries.tag) == "a""#,
        r#"any(lower(http.headers.x)) == "a""#,
        r#"net.src.port >= 1024 && net.dst.port < 0x2000 && net.dst.port > 017"#,
        r#"net.src.ip in 10.0.0.0/8 || net.src.ip not in fd00::/8 || net.dst.ip == ::1"#,
        r#"net.dst.ip != 192.168.1.1"#,
        r#"http.path.segments.0 == "a" && http.path.segments.1_3 == "b/c/d""#,
        r#"http.path.segments.len <= 3"#,
        r#"tls.sni == "a.test" && net.protocol == "https" && http.method == "GET""#,
        r#"!(http.method == "GET") && (http.host == "a" || http.host == "b")"#,
        r#"! ( http.method == "GET" )"#,
        "http.path==\"/a\"\t&&\nhttp.host==\"b\"",
    ];
    for input in accepted {
        ok(input);
    }
}

#[test]
fn literals_keep_their_values() {
    let expr = ok(r#"http.path == "a\"b\\c\n" && net.src.port == -12 && net.dst.port == 0x1F && net.src.port == 010"#);
    let values: Vec<String> = expr.predicates().iter().map(|p| format!("{:?}", p.rhs)).collect();
    assert_eq!(values, vec![r#"String("a\"b\\c\n")"#, "Int(-12)", "Int(31)", "Int(8)"]);
    let expr = ok(r##"http.path == r#"a\"b"#"##);
    match &expr.predicates()[0].rhs {
        Literal::String(s) => assert_eq!(&**s, r#"a\"b"#),
        other => panic!("{other:?}"),
    }
    let expr = ok("net.src.ip in 10.1.0.0/16");
    match &expr.predicates()[0].rhs {
        Literal::Cidr(c) => {
            assert!(c.contains(&"10.1.200.3".parse::<IpAddr>().expect("ip")));
            assert!(!c.contains(&"10.2.0.1".parse::<IpAddr>().expect("ip")));
            assert!(!c.contains(&"::1".parse::<IpAddr>().expect("ip")));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn fields_resolve_with_transformations() {
    let expr = ok(r#"lower(any(http.headers.X_Api_Key)) == "k""#);
    let p = expr.predicates()[0];
    assert_eq!(p.lhs.field, Field::Header("x_api_key".into()));
    assert!(p.lhs.lower && p.lhs.any);
    assert_eq!(p.op, Op::Equals);
    assert_eq!(
        ok("http.path.segments.2_4 == \"x\"").predicates()[0].lhs.field,
        Field::PathSegmentRange(2, 4)
    );
}

#[test]
fn mixing_and_or_without_parentheses_is_refused_with_both_readings() {
    let message = err(r#"http.host == "a" && http.path ^= "/b" || http.method == "GET""#);
    assert!(message.contains("cannot be mixed without parentheses"), "{message}");
    assert!(
        message.contains(r#"`(http.host == "a" && http.path ^= "/b") || http.method == "GET"`"#),
        "{message}"
    );
    assert!(
        message.contains(r#"`http.host == "a" && (http.path ^= "/b" || http.method == "GET")`"#),
        "{message}"
    );
    assert!(message.starts_with("at column 39:"), "{message}");
    ok(r#"(http.host == "a" && http.path ^= "/b") || http.method == "GET""#);
    ok(r#"http.host == "a" && (http.path ^= "/b" || http.method == "GET")"#);
}

#[test]
fn mixing_inside_parentheses_names_that_level_and_later_errors_come_first() {
    let message = err(r#"net.protocol == "http" && (http.host == "a" || http.path ^= "/b" && http.method == "GET")"#);
    assert!(
        message.starts_with("at column 66: `||` and `&&` cannot be mixed without parentheses"),
        "{message}"
    );
    assert!(
        message.contains(r#"`(http.host == "a" || http.path ^= "/b") && http.method == "GET"`"#),
        "{message}"
    );
    assert!(
        message.contains(r#"`http.host == "a" || (http.path ^= "/b" && http.method == "GET")`"#),
        "{message}"
    );
    // The whole level is read before the mix is reported.
    let message = err(r#"http.host == "a" && http.path ^= "/b" || http.bogus == "x""#);
    assert!(
        message.starts_with("at column 42: unknown field `http.bogus`"),
        "{message}"
    );
}

#[test]
fn type_errors_say_where_and_what_was_expected() {
    let cases = [
        (
            r#"http.host == 12"#,
            "at column 14: `http.host ==` expects a string literal, found integer `12`",
        ),
        (
            r#"net.src.port == "80""#,
            "at column 17: `net.src.port ==` expects an integer",
        ),
        (
            r#"http.host > "a""#,
            "at column 11: operator `>` does not apply to `http.host` (String)",
        ),
        (r#"net.src.ip in 10.0.0.1"#, "expects a CIDR"),
        (r#"net.src.ip == 10.0.0.0/8"#, "expects an IP address"),
        (
            r#"lower(net.src.port) == 1"#,
            "at column 1: `lower()` applies to String fields",
        ),
        (r#"http.nope == "a""#, "at column 1: unknown field `http.nope`"),
        (r#"http.path.segments.2_1 == "a""#, "with N < M"),
        (r#"http.path.segments.x == "a""#, "invalid field"),
        (r#"upper(http.host) == "a""#, "unknown function `upper`"),
        (r#"http.path ~ "(unclosed""#, "at column 13: invalid regex"),
        (r#"http.path "/a""#, "at column 11: expected an operator"),
        (
            r#"http.path == "/a" garbage"#,
            "at column 19: expected `&&`, `||` or the end",
        ),
        (r#"!http.path == "/a""#, "expected `(` after `!`"),
        (r#"(http.path == "/a""#, "expected `)`, found the end of the expression"),
        (r#"http.path == "/a"#, "unterminated string"),
        (r#"http.path == "\q""#, "invalid escape"),
        (r#"http.path == "#, "expected a value"),
        (r#"net.src.ip in 10.0.0.0/33"#, "too long"),
        (r#"net.src.port == 99999999999999999999"#, "does not fit"),
        ("", "expected a field"),
    ];
    for (input, expected) in cases {
        let message = err(input);
        assert!(message.contains(expected), "{input}: {message}");
    }
}

#[test]
fn limits_turn_hostile_input_into_errors() {
    let deep = format!("{}http.path == \"/\"{}", "(".repeat(200), ")".repeat(200));
    assert!(err(&deep).contains("nests deeper"));
    let long = format!("http.path == \"{}\"", "a".repeat(crate::MAX_EXPRESSION_LEN));
    assert!(err(&long).contains("longer than"));
    let huge = r#"http.path ~ "(((a{100}){100}){100})""#;
    assert!(err(huge).contains("invalid regex"));
    assert!(compile_regex(&"a".repeat(crate::MAX_REGEX_LEN + 1), false).is_err());
}

#[test]
fn columns_count_characters_not_bytes() {
    let message = err(r#"http.path == "é" &&"#);
    assert!(message.starts_with("at column 20:"), "{message}");
}

/// A bounded, dependency-free stand-in for the cargo-fuzz target: mutate the
/// fuzz seeds and parse; nothing may panic.
#[test]
fn mutated_seeds_never_panic() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/corpus/expression");
    let mut seeds: Vec<Vec<u8>> = std::fs::read_dir(dir)
        .map(|entries| entries.flatten().filter_map(|e| std::fs::read(e.path()).ok()).collect())
        .unwrap_or_default();
    seeds.push(b"http.path == \"/\"".to_vec());
    const ALPHABET: &[u8] = b"()!&|\"=^~<>r#\\ 019ax./:_-,{}[]*+?$\n\xc3\xa9";
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |bound: usize| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        (state % bound.max(1) as u64) as usize
    };
    for _ in 0..20_000 {
        let mut input = seeds[next(seeds.len())].clone();
        for _ in 0..=next(4) {
            let at = next(input.len() + 1);
            match next(4) {
                0 => input.insert(at, ALPHABET[next(ALPHABET.len())]),
                1 if at < input.len() => {
                    let end = (at + next(8)).min(input.len());
                    input.drain(at..end);
                }
                2 => {
                    let end = (at + next(16)).min(input.len());
                    let copy = input[at..end].to_vec();
                    input.splice(at..at, copy);
                }
                _ => input.truncate(at),
            }
        }
        let text = String::from_utf8_lossy(&input);
        let _ = parse(&text);
    }
}

#[test]
fn perl_classes_are_ascii_as_in_pcre() {
    assert_eq!(
        ascii_perl_classes(r"^/u/(\d+)\W[\s\D-]x"),
        r"^/u/([[:digit:]]+)[[:^word:]][[:space:][:^digit:]-]x"
    );
    assert_eq!(
        ascii_perl_classes(r"\\d"),
        r"\\d",
        "an escaped backslash is not a class"
    );
    assert_eq!(ascii_perl_classes("(unclosed"), "(unclosed");
    assert_eq!(
        ascii_perl_classes(r"^/u/(\d+)\S\.x\\w$"),
        r"^/u/([[:digit:]]+)[[:^space:]]\.x\\w$",
        "without brackets the rewrite needs no parse and keeps other escapes"
    );
    let error = compile_regex(r"^/u/\d+(", false).expect_err("unclosed group");
    assert!(
        error.contains(r"\d+("),
        "the error shows the pattern as written: {error}"
    );
    assert!(!error.contains("[[:digit:]]"), "{error}");
    let digits = compile_regex(r"^\d+$", false).expect("compiles");
    assert!(digits.is_match("123"));
    assert!(!digits.is_match("\u{663}"), "Arabic-Indic digit is not \\d in PCRE");
}
