//! Kong's `$(...)` value templates for the transformer plugins, without Lua:
//! `$(headers.name)`, `$(headers["name"])`, `$(query_params.name)`,
//! `$(uri_captures.name)`, `$(uri_captures[1])`, `$(shared.name)`, each
//! optionally followed by `or "fallback"`. Anything else is refused when the
//! plugin is built, so a request never meets an expression it cannot
//! evaluate.

use crate::context::RequestCtx;

#[derive(Debug, Clone, PartialEq)]
enum Source {
    Header(String),
    Query(String),
    Capture(String),
    Shared(String),
}

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Lookup { source: Source, fallback: Option<String> },
}

/// A value with zero or more `$(...)` lookups.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    parts: Vec<Part>,
}

/// Shared string values plugins put in [`crate::SharedStore`] for templates.
#[derive(Debug, Default, Clone)]
pub struct TemplateShared(pub Vec<(String, String)>);

fn parse_lookup(expression: &str) -> Result<Part, String> {
    let (lookup, fallback) = match expression.split_once(" or ") {
        Some((lookup, fallback)) => {
            let fallback = fallback.trim();
            let unquoted = fallback
                .strip_prefix('"')
                .and_then(|f| f.strip_suffix('"'))
                .or_else(|| fallback.strip_prefix('\'').and_then(|f| f.strip_suffix('\'')))
                .ok_or_else(|| format!("unsupported fallback '{fallback}': use a quoted string"))?;
            (lookup.trim(), Some(unquoted.to_string()))
        }
        None => (expression.trim(), None),
    };
    let (table, key) = if let Some((table, rest)) = lookup.split_once('[') {
        let key = rest
            .strip_suffix(']')
            .ok_or_else(|| format!("unsupported expression '{lookup}'"))?
            .trim();
        let key = key.trim_matches(|c| c == '"' || c == '\'').to_string();
        (table, key)
    } else if let Some((table, key)) = lookup.split_once('.') {
        (table, key.to_string())
    } else {
        return Err(format!("unsupported expression '{lookup}'"));
    };
    if key.is_empty() {
        return Err(format!("unsupported expression '{lookup}'"));
    }
    let source = match table.trim() {
        "headers" => Source::Header(key.to_ascii_lowercase().replace('_', "-")),
        "query_params" => Source::Query(key),
        "uri_captures" => Source::Capture(key),
        "shared" => Source::Shared(key),
        other => return Err(format!("unsupported template table '{other}'")),
    };
    Ok(Part::Lookup { source, fallback })
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = text;
        while let Some(start) = rest.find("$(") {
            if start > 0 {
                parts.push(Part::Text(rest[..start].to_string()));
            }
            let after = &rest[start + 2..];
            let end = after
                .find(')')
                .ok_or_else(|| format!("value '{text}' has an unclosed '$('"))?;
            parts.push(parse_lookup(&after[..end])?);
            rest = &after[end + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Text(rest.to_string()));
        }
        Ok(Template { parts })
    }

    /// The text, when the template has no lookups.
    pub fn literal_text(&self) -> Option<String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                _ => return None,
            }
        }
        Some(out)
    }

    pub fn is_literal(&self) -> bool {
        self.parts.iter().all(|p| matches!(p, Part::Text(_)))
    }

    /// The value for this request. A lookup that finds nothing and has no
    /// fallback renders as empty text.
    pub fn render(&self, ctx: &RequestCtx<'_>) -> String {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(text) => out.push_str(text),
                Part::Lookup { source, fallback } => {
                    let found = match source {
                        Source::Header(name) => ctx.header(name).map(str::to_string),
                        Source::Query(name) => ctx.query_arg(name).map(|v| v.into_owned()),
                        Source::Capture(name) => ctx.captures.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone()),
                        Source::Shared(name) => ctx
                            .shared
                            .get::<TemplateShared>()
                            .and_then(|s| s.0.iter().find(|(k, _)| k == name))
                            .map(|(_, v)| v.clone()),
                    };
                    if let Some(value) = found.or_else(|| fallback.clone()) {
                        out.push_str(&value);
                    }
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lookups_and_refuses_lua() {
        let t = Template::parse("v=$(headers.x_a or 'none')!").expect("valid");
        assert_eq!(t.parts.len(), 3);
        assert!(Template::parse("$(headers[\"X-B\"])").is_ok());
        assert!(Template::parse("$(uri_captures[1])").is_ok());
        assert!(Template::parse("plain").expect("valid").is_literal());
        assert!(Template::parse("$(os.exit())").is_err());
        assert!(Template::parse("$(headers.a").is_err());
        assert!(Template::parse("$(headers.a or b)").is_err());
    }
}
