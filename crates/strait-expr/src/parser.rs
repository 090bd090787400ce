//! Recursive-descent parser for Kong's expressions grammar:
//!
//! ```text
//! expression := term ( ("&&" | "||") term )*      -- one operator kind per level
//! term       := "!" "(" expression ")" | "(" expression ")" | predicate
//! predicate  := lhs operator literal
//! lhs        := ident "(" lhs ")" | ident          -- functions: lower, any
//! ```
//!
//! Every predicate is type-checked as soon as it is parsed, so errors point
//! at the first wrong token.

use crate::ast::{Expr, Lhs, Op, Predicate};
use crate::literal::{is_bare_literal_char, parse_bare, scan_raw_string, scan_string, RawLiteral};
use crate::typecheck::{check_predicate, resolve_field};
use crate::{ExprError, RegexCompiler, MAX_EXPRESSION_LEN, MAX_NESTING};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Logic {
    And,
    Or,
}

impl Logic {
    fn symbol(self) -> &'static str {
        match self {
            Logic::And => "&&",
            Logic::Or => "||",
        }
    }
}

const OPERATORS: [(&str, Op); 9] = [
    ("==", Op::Equals),
    ("!=", Op::NotEquals),
    ("^=", Op::Prefix),
    ("=^", Op::Suffix),
    (">=", Op::GreaterOrEqual),
    ("<=", Op::LessOrEqual),
    ("~", Op::Regex),
    (">", Op::Greater),
    ("<", Op::Less),
];

const EXPECTED_OPERATOR: &str =
    "expected an operator: `==`, `!=`, `~`, `^=`, `=^`, `>`, `>=`, `<`, `<=`, `in`, `not in` or `contains`";

pub(crate) struct Parser<'a, 'c> {
    src: &'a str,
    pos: usize,
    depth: usize,
    regexes: &'c mut dyn RegexCompiler,
}

impl<'a, 'c> Parser<'a, 'c> {
    pub(crate) fn new(src: &'a str, regexes: &'c mut dyn RegexCompiler) -> Self {
        Parser {
            src,
            pos: 0,
            depth: 0,
            regexes,
        }
    }

    pub(crate) fn parse(mut self) -> Result<Expr, ExprError> {
        if self.src.len() > MAX_EXPRESSION_LEN {
            return Err(self.error_at(0, format!("expression is longer than {MAX_EXPRESSION_LEN} bytes")));
        }
        let expr = self.expression()?;
        self.skip_ws();
        if self.pos < self.src.len() {
            let found = self.found();
            return Err(self.error(format!(
                "expected `&&`, `||` or the end of the expression, found {found}"
            )));
        }
        Ok(expr)
    }

    pub(crate) fn error_at(&self, offset: usize, message: String) -> ExprError {
        let offset = offset.min(self.src.len());
        let column = self.src.get(..offset).map_or(offset, |s| s.chars().count()) + 1;
        ExprError {
            offset,
            column,
            message,
        }
    }

    fn error(&self, message: String) -> ExprError {
        self.error_at(self.pos, message)
    }

    fn rest(&self) -> &'a str {
        self.src.get(self.pos..).unwrap_or("")
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    /// A short description of what is at the cursor, for error messages.
    fn found(&self) -> String {
        let rest = self.rest();
        if rest.is_empty() {
            return "the end of the expression".to_string();
        }
        let token: String = rest.chars().take_while(|c| !c.is_whitespace()).take(16).collect();
        format!("`{token}`")
    }

    fn skip_ws(&mut self) {
        let rest = self.rest();
        let trimmed = rest.trim_start_matches([' ', '\t', '\r', '\n']);
        self.pos += rest.len() - trimmed.len();
    }

    fn eat(&mut self, token: &str) -> bool {
        if self.rest().starts_with(token) {
            self.pos += token.len();
            true
        } else {
            false
        }
    }

    fn expect(&mut self, token: &str) -> Result<(), ExprError> {
        self.skip_ws();
        if self.eat(token) {
            return Ok(());
        }
        let found = self.found();
        Err(self.error(format!("expected `{token}`, found {found}")))
    }

    fn enter(&mut self) -> Result<(), ExprError> {
        self.depth += 1;
        if self.depth > MAX_NESTING {
            return Err(self.error(format!("expression nests deeper than {MAX_NESTING} levels")));
        }
        Ok(())
    }

    fn expression(&mut self) -> Result<Expr, ExprError> {
        self.enter()?;
        let start = self.pos;
        let mut terms = Vec::new();
        let mut logic = None;
        let mut mixed = false;
        while let Some((op, _)) = self.next_term(&mut terms, None)? {
            mixed |= logic.is_some_and(|first| first != op);
            logic = logic.or(Some(op));
        }
        self.depth -= 1;
        if mixed {
            return Err(self.mixed_logic_error(start));
        }
        Ok(match (terms.len(), logic) {
            (1, _) | (_, None) => terms.pop().unwrap_or(Expr::And(Vec::new())),
            (_, Some(Logic::And)) => Expr::And(terms),
            (_, Some(Logic::Or)) => Expr::Or(terms),
        })
    }

    /// Parse one term into `terms` (and its span into `spans`, when given),
    /// then the `&&` or `||` after it, if any, with its offset.
    fn next_term(
        &mut self,
        terms: &mut Vec<Expr>,
        spans: Option<&mut Vec<(usize, usize)>>,
    ) -> Result<Option<(Logic, usize)>, ExprError> {
        self.skip_ws();
        let start = self.pos;
        terms.push(self.term()?);
        if let Some(spans) = spans {
            spans.push((start, self.pos));
        }
        self.skip_ws();
        let at = self.pos;
        Ok(if self.eat("&&") {
            Some((Logic::And, at))
        } else if self.eat("||") {
            Some((Logic::Or, at))
        } else {
            None
        })
    }

    /// The error for a level starting at `start` that mixes `&&` and `||`.
    /// Only this needs the terms' spans, so the level (which parsed once
    /// already) is parsed again to record them.
    fn mixed_logic_error(&mut self, start: usize) -> ExprError {
        self.pos = start;
        self.depth += 1;
        let (mut terms, mut spans, mut ops) = (Vec::new(), Vec::new(), Vec::new());
        loop {
            match self.next_term(&mut terms, Some(&mut spans)) {
                Ok(Some(op)) => ops.push(op),
                Ok(None) => break,
                Err(error) => return error,
            }
        }
        self.depth -= 1;
        let first = ops.first().map(|(op, _)| *op);
        match ops.iter().position(|(op, _)| Some(*op) != first) {
            Some(k) => self.mixed_logic_message(&spans, &ops, k),
            None => self.error_at(start, "`&&` and `||` cannot be mixed without parentheses".to_string()),
        }
    }

    /// `a && b || c`: refuse, and show both parenthesised readings.
    fn mixed_logic_message(&self, spans: &[(usize, usize)], ops: &[(Logic, usize)], k: usize) -> ExprError {
        let text = |i: usize| self.src.get(spans[i].0..spans[i].1).unwrap_or("");
        let join = |from: usize, to: usize| {
            let mut out = text(from).to_string();
            for i in from + 1..=to {
                out.push_str(&format!(" {} {}", ops[i - 1].0.symbol(), text(i)));
            }
            out
        };
        let last = spans.len() - 1;
        let (first, second) = (ops[0].0.symbol(), ops[k].0.symbol());
        let left_grouped = if k < last {
            format!("({}) {second} {}", join(0, k), join(k + 1, last))
        } else {
            format!("({}) {second} {}", join(0, k), text(last))
        };
        let right_grouped = format!("{} {first} ({})", join(0, k - 1), join(k, last));
        let message = format!(
            "`{first}` and `{second}` cannot be mixed without parentheses; write `{left_grouped}` or `{right_grouped}`"
        );
        self.error_at(ops[k].1, message)
    }

    fn term(&mut self) -> Result<Expr, ExprError> {
        match self.peek() {
            Some('!') => {
                self.pos += 1;
                self.skip_ws();
                if self.peek() != Some('(') {
                    let found = self.found();
                    return Err(self.error(format!("expected `(` after `!`, found {found}")));
                }
                self.parenthesised().map(|e| Expr::Not(Box::new(e)))
            }
            Some('(') => self.parenthesised(),
            _ => self.predicate().map(Expr::Predicate),
        }
    }

    fn parenthesised(&mut self) -> Result<Expr, ExprError> {
        self.pos += 1; // '('
        let inner = self.expression()?;
        self.expect(")")?;
        Ok(inner)
    }

    fn predicate(&mut self) -> Result<Predicate, ExprError> {
        let lhs_at = self.pos;
        let lhs = self.lhs()?;
        self.skip_ws();
        let op_at = self.pos;
        let op = self.operator()?;
        self.skip_ws();
        let rhs_at = self.pos;
        let rhs = self.literal()?;
        check_predicate(lhs, op, rhs, self.regexes).map_err(|err| {
            let at = match err.place {
                crate::typecheck::Place::Lhs => lhs_at,
                crate::typecheck::Place::Op => op_at,
                crate::typecheck::Place::Rhs => rhs_at,
            };
            self.error_at(at, err.message)
        })
    }

    fn ident(&mut self) -> Option<&'a str> {
        let rest = self.rest();
        let first = rest.chars().next()?;
        if !first.is_ascii_alphabetic() {
            return None;
        }
        let len = rest
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
            .unwrap_or(rest.len());
        self.pos += len;
        Some(&rest[..len])
    }

    fn lhs(&mut self) -> Result<Lhs, ExprError> {
        self.enter()?;
        let at = self.pos;
        let Some(name) = self.ident() else {
            let found = self.found();
            return Err(self.error(format!("expected a field such as `http.path`, found {found}")));
        };
        let after_name = self.pos;
        self.skip_ws();
        let lhs = if self.peek() == Some('(') {
            self.function(at, name)?
        } else {
            self.pos = after_name;
            let field = resolve_field(name).map_err(|message| self.error_at(at, message))?;
            Lhs {
                field,
                lower: false,
                any: false,
            }
        };
        self.depth -= 1;
        Ok(lhs)
    }

    fn function(&mut self, at: usize, name: &str) -> Result<Lhs, ExprError> {
        if name != "lower" && name != "any" {
            let message = format!("unknown function `{name}`; expected `lower` or `any`");
            return Err(self.error_at(at, message));
        }
        self.pos += 1; // '('
        self.skip_ws();
        let mut inner = self.lhs()?;
        self.expect(")")?;
        if name == "lower" {
            inner.lower = true;
        } else {
            inner.any = true;
        }
        Ok(inner)
    }

    fn operator(&mut self) -> Result<Op, ExprError> {
        for (symbol, op) in OPERATORS {
            if self.eat(symbol) {
                return Ok(op);
            }
        }
        let start = self.pos;
        let word = self.ident();
        match word {
            Some("in") => return Ok(Op::In),
            Some("contains") => return Ok(Op::Contains),
            Some("not") => {
                self.skip_ws();
                if self.ident() == Some("in") {
                    return Ok(Op::NotIn);
                }
            }
            _ => {}
        }
        self.pos = start;
        let found = self.found();
        Err(self.error(format!("{EXPECTED_OPERATOR}, found {found}")))
    }

    fn literal(&mut self) -> Result<RawLiteral, ExprError> {
        let rest = self.rest();
        let start = self.pos;
        let scanned = if rest.starts_with('"') {
            scan_string(rest).map(|(s, used)| (RawLiteral::String(s), used))
        } else if rest.starts_with("r#\"") {
            scan_raw_string(rest).map(|(s, used)| (RawLiteral::String(s), used))
        } else {
            let len = rest.find(|c: char| !is_bare_literal_char(c)).unwrap_or(rest.len());
            if len == 0 {
                let found = self.found();
                let message = format!("expected a value (string, integer, IP address or CIDR), found {found}");
                return Err(self.error(message));
            }
            parse_bare(&rest[..len]).map(|lit| (lit, len)).map_err(|m| (0, m))
        };
        match scanned {
            Ok((literal, used)) => {
                self.pos += used;
                Ok(literal)
            }
            Err((offset, message)) => Err(self.error_at(start + offset, message)),
        }
    }
}
