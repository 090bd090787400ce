//! Kong's regexes are PCRE, where `\d`, `\w` and `\s` are ASCII classes.
//! The `regex` crate makes them Unicode classes, which both differ from
//! Kong (`\d` would match `٣`) and cost about six times the memory per
//! compiled regex. Route regexes are therefore rewritten to the ASCII POSIX
//! classes (`[[:digit:]]`, ...) before compiling, using the parsed syntax
//! tree so classes inside brackets (`[\d-]`) are rewritten correctly.

use std::borrow::Cow;

use regex_syntax::ast::{self, Ast, ClassPerlKind, ClassSetItem, Span, Visitor};

/// One Perl class occurrence: where, which, negated, inside brackets.
type Occurrence = (Span, ClassPerlKind, bool, bool);

struct PerlClasses(Vec<Occurrence>);

impl Visitor for PerlClasses {
    type Output = Vec<Occurrence>;
    type Err = ();

    fn finish(self) -> Result<Self::Output, ()> {
        Ok(self.0)
    }

    fn visit_pre(&mut self, ast: &Ast) -> Result<(), ()> {
        if let Ast::ClassPerl(class) = ast {
            self.0.push((class.span, class.kind.clone(), class.negated, false));
        }
        Ok(())
    }

    fn visit_class_set_item_pre(&mut self, item: &ClassSetItem) -> Result<(), ()> {
        if let ClassSetItem::Perl(class) = item {
            self.0.push((class.span, class.kind.clone(), class.negated, true));
        }
        Ok(())
    }
}

fn posix(kind: &ClassPerlKind, negated: bool, inside_brackets: bool) -> String {
    let name = match kind {
        ClassPerlKind::Digit => "digit",
        ClassPerlKind::Space => "space",
        ClassPerlKind::Word => "word",
    };
    let caret = if negated { "^" } else { "" };
    if inside_brackets {
        format!("[:{caret}{name}:]")
    } else {
        format!("[[:{caret}{name}:]]")
    }
}

/// `pattern` with `\d \D \w \W \s \S` as ASCII classes. A pattern that does
/// not parse is returned unchanged (compiling it reports the error).
pub fn ascii_perl_classes(pattern: &str) -> Cow<'_, str> {
    if !pattern.contains('\\') {
        return Cow::Borrowed(pattern);
    }
    if let Some(rewritten) = rewrite_without_brackets(pattern) {
        return rewritten;
    }
    let Ok(parsed) = ast::parse::Parser::new().parse(pattern) else {
        return Cow::Borrowed(pattern);
    };
    let Ok(mut found) = ast::visit(&parsed, PerlClasses(Vec::new())) else {
        return Cow::Borrowed(pattern);
    };
    if found.is_empty() {
        return Cow::Borrowed(pattern);
    }
    found.sort_by_key(|(span, ..)| std::cmp::Reverse(span.start.offset));
    let mut out = pattern.to_string();
    for (span, kind, negated, inside) in found {
        out.replace_range(span.start.offset..span.end.offset, &posix(&kind, negated, inside));
    }
    Cow::Owned(out)
}

/// The common case without a parse: a pattern with no bracket class, where
/// every `\\x` pair is one escape and a Perl class can only appear outside
/// brackets. `None` when the pattern has a `[` (the syntax tree decides).
fn rewrite_without_brackets(pattern: &str) -> Option<Cow<'_, str>> {
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut chars = pattern.char_indices();
    while let Some((at, c)) = chars.next() {
        match c {
            '[' => return None,
            '\\' => {
                let Some((_, escaped)) = chars.next() else {
                    break;
                };
                let (kind, negated) = match escaped {
                    'd' => (ClassPerlKind::Digit, false),
                    'D' => (ClassPerlKind::Digit, true),
                    's' => (ClassPerlKind::Space, false),
                    'S' => (ClassPerlKind::Space, true),
                    'w' => (ClassPerlKind::Word, false),
                    'W' => (ClassPerlKind::Word, true),
                    _ => continue,
                };
                let text = out.get_or_insert_with(|| String::with_capacity(pattern.len() + 16));
                text.push_str(&pattern[copied..at]);
                text.push_str(&posix(&kind, negated, false));
                copied = at + 2;
            }
            _ => {}
        }
    }
    Some(match out {
        Some(mut text) => {
            text.push_str(&pattern[copied..]);
            Cow::Owned(text)
        }
        None => Cow::Borrowed(pattern),
    })
}
