//! strait-expr: Kong's router expressions language — parser, syntax tree and
//! type checker. No I/O, no matching.
//!
//! It is its own crate so that `strait-core` can reject an invalid
//! `expression` while validating a configuration (with the field path of the
//! route) and `strait-router` can compile the same text into its index,
//! without `strait-core` depending on the router. Matching lives in
//! `strait-router`; this crate only says what an expression means.
//!
//! Differences from Kong's parser, on purpose: `&&` and `||` at one level
//! without parentheses is an error (Kong silently gives them a precedence),
//! and errors carry a column and what was expected.
#![forbid(unsafe_code)]

mod ast;
mod literal;
mod parser;
mod pattern;
mod regex;
mod typecheck;

use std::fmt;
use std::sync::Arc;

pub use ast::{Cidr, Expr, Field, Lhs, Literal, Op, Predicate, RegexLiteral, Type};
pub use pattern::ascii_perl_classes;
pub use regex::{compile_regex, compile_regex_key, regex_key, validate_regex, RouteRegex, Search};

/// Longest expression accepted, in bytes.
pub const MAX_EXPRESSION_LEN: usize = 64 * 1024;
/// Deepest nesting of parentheses and functions accepted.
pub const MAX_NESTING: usize = 64;
/// Longest regex pattern accepted, in bytes.
pub const MAX_REGEX_LEN: usize = 8 * 1024;
/// Compiled-size budget of one regex (a pathological pattern is an error).
pub const REGEX_SIZE_LIMIT: usize = 512 * 1024;

/// A parse or type error: where it is and what was expected there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExprError {
    /// Byte offset into the expression.
    pub offset: usize,
    /// 1-based column (in characters) of `offset`.
    pub column: usize,
    pub message: String,
}

impl fmt::Display for ExprError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "at column {}: {}", self.column, self.message)
    }
}

impl std::error::Error for ExprError {}

/// Compiles the regexes an expression contains; lets a router share one
/// compiled regex between every route that uses the same pattern.
pub trait RegexCompiler {
    fn compile(&mut self, pattern: &str) -> Result<Arc<RouteRegex>, String>;
}

/// Compiles every regex afresh (validation).
#[derive(Debug, Default)]
pub struct FreshRegexes;

impl RegexCompiler for FreshRegexes {
    fn compile(&mut self, pattern: &str) -> Result<Arc<RouteRegex>, String> {
        compile_regex(pattern, false).map(Arc::new)
    }
}

/// Parse and type-check an expression, compiling its regexes afresh.
pub fn parse(input: &str) -> Result<Expr, ExprError> {
    parse_with(input, &mut FreshRegexes)
}

/// Parse and type-check an expression, compiling regexes with `regexes`.
pub fn parse_with(input: &str, regexes: &mut dyn RegexCompiler) -> Result<Expr, ExprError> {
    parser::Parser::new(input, regexes).parse()
}

#[cfg(test)]
mod tests;
