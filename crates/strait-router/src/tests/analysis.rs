//! Index keys read from regexes: the quick literal scan agrees with the
//! syntax tree's literal extraction.

use regex_syntax::hir::literal::{ExtractKind, Extractor};

use crate::analysis::leading_literal;

#[test]
fn leading_literal_reads_plain_prefixes_and_stops_before_quantified_characters() {
    let cases = [
        (r"^/users/[[:digit:]]+$", Some("/users/")),
        (r"^/ab?/c", Some("/a")),
        (r"^/a+", Some("/")),
        (r"^/a{2}", Some("/")),
        (r"^/v1\.0", Some("/v1")),
        (r"^/é/x.y", Some("/é/x")),
        (r"^/a|^/b", None),
        (r"^(?i)/a", None),
        (r"/a", None),
        (r"^a*", None),
        (r"^.*", None),
    ];
    for (pattern, expected) in cases {
        assert_eq!(leading_literal(pattern), expected, "{pattern}");
    }
}

#[test]
fn every_extracted_literal_starts_with_the_leading_literal() {
    for pattern in [
        r"^/users/[[:digit:]]+$",
        r"^/ab?/c",
        r"^/abc/d[ef]",
        r"^/x-y_z~/q",
        r"^/a{2}b",
    ] {
        let leading = leading_literal(pattern).expect("a leading literal");
        let hir = regex_syntax::Parser::new().parse(pattern).expect("parses");
        let seq = Extractor::new().kind(ExtractKind::Prefix).extract(&hir);
        for literal in seq.literals().expect("finite") {
            let text = std::str::from_utf8(literal.as_bytes()).expect("utf-8");
            assert!(text.starts_with(leading), "{pattern}: {text:?} vs {leading:?}");
        }
    }
}
