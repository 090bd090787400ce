//! `.proto` files as the gRPC plugins use them: compiled once (with the
//! `google/api/http.proto` and `annotations.proto` imports built in), their
//! methods by gRPC path, their `google.api.http` bindings as path templates,
//! and messages moved between JSON (proto3 JSON mapping, proto field names,
//! defaults written out as Kong does) and the protobuf wire format.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use bytes::Bytes;
use http::Method;
use prost::Message as _;
use prost_reflect::{
    DeserializeOptions, DynamicMessage, FieldDescriptor, Kind, MessageDescriptor, MethodDescriptor, SerializeOptions,
    Value as ProtoValue,
};
use protox::file::{ChainFileResolver, File, FileResolver, GoogleFileResolver, IncludeFileResolver};
use serde_json::{Map, Value};

/// `google/api/http.proto`: the `HttpRule` message (field numbers as published by Google).
const HTTP_PROTO: &str = r#"syntax = "proto3";
package google.api;
message Http {
  repeated HttpRule rules = 1;
  bool fully_decode_reserved_expansion = 2;
}
message HttpRule {
  string selector = 1;
  oneof pattern {
    string get = 2;
    string put = 3;
    string post = 4;
    string delete = 5;
    string patch = 6;
    CustomHttpPattern custom = 8;
  }
  string body = 7;
  string response_body = 12;
  repeated HttpRule additional_bindings = 11;
}
message CustomHttpPattern {
  string kind = 1;
  string path = 2;
}
"#;

/// `google/api/annotations.proto`: the `google.api.http` method option.
const ANNOTATIONS_PROTO: &str = r#"syntax = "proto3";
package google.api;
import "google/api/http.proto";
import "google/protobuf/descriptor.proto";
extend google.protobuf.MethodOptions {
  HttpRule http = 72295728;
}
"#;

struct GoogleApi;

impl FileResolver for GoogleApi {
    fn open_file(&self, name: &str) -> Result<File, protox::Error> {
        match name {
            "google/api/http.proto" => File::from_source(name, HTTP_PROTO),
            "google/api/annotations.proto" => File::from_source(name, ANNOTATIONS_PROTO),
            _ => Err(protox::Error::file_not_found(name)),
        }
    }
}

/// A compiled `.proto` file.
#[derive(Debug)]
pub struct Protos {
    /// By gRPC path, `/package.Service/Method`.
    methods: HashMap<String, MethodDescriptor>,
    /// The `google.api.http` bindings, in file order.
    pub bindings: Vec<Binding>,
}

/// One `google.api.http` binding of a method.
#[derive(Debug)]
pub struct Binding {
    pub verb: Method,
    pub template: Template,
    /// `body`: `*`, a field name, or none (the query string fills fields).
    pub body: Option<String>,
    pub response_body: Option<String>,
    pub method: MethodDescriptor,
}

impl Protos {
    /// The method a gRPC path (`/package.Service/Method`, the path's last
    /// two segments) names.
    pub fn method_for_path(&self, path: &str) -> Option<&MethodDescriptor> {
        let mut parts = path.rsplitn(3, '/');
        let method = parts.next()?;
        let service = parts.next()?;
        self.methods.get(&format!("/{service}/{method}"))
    }

    /// The first binding for `verb` whose template matches `path`, with the
    /// path variables it captured (field path, value).
    pub fn binding_for(&self, verb: &Method, path: &str) -> Option<(&Binding, Vec<(String, String)>)> {
        self.bindings
            .iter()
            .filter(|binding| binding.verb == verb)
            .find_map(|binding| binding.template.matches(path).map(|vars| (binding, vars)))
    }
}

/// Compiled files by path, with the modification time they were compiled at.
type Compiled = HashMap<PathBuf, (Option<SystemTime>, Arc<Protos>)>;

/// The compiled file a plugin's `config.proto` names, if any.
pub(crate) fn configured(reader: &crate::config::ConfigReader<'_>) -> Result<Option<Arc<Protos>>, crate::PluginError> {
    match reader.string("proto")? {
        Some(path) => Ok(Some(
            load(&path).map_err(|error| crate::PluginError::invalid("proto", error))?,
        )),
        None => Ok(None),
    }
}

/// Compiles `path` (cached while the file's modification time stays).
pub fn load(path: &str) -> Result<Arc<Protos>, String> {
    static CACHE: OnceLock<Mutex<Compiled>> = OnceLock::new();
    let file = Path::new(path);
    let modified = std::fs::metadata(file)
        .map_err(|error| format!("cannot read '{path}': {error}"))?
        .modified()
        .ok();
    let cache = CACHE.get_or_init(Default::default);
    if let Some((when, protos)) = cache.lock().unwrap_or_else(|e| e.into_inner()).get(file) {
        if *when == modified {
            return Ok(protos.clone());
        }
    }
    let protos = Arc::new(compile(file)?);
    cache
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(file.to_path_buf(), (modified, protos.clone()));
    Ok(protos)
}

fn compile(file: &Path) -> Result<Protos, String> {
    let shown = file.display();
    let dir = file
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| format!("'{shown}' is not a file name"))?;
    let mut resolver = ChainFileResolver::new();
    resolver.add(IncludeFileResolver::new(dir.to_path_buf()));
    resolver.add(GoogleApi);
    resolver.add(GoogleFileResolver::new());
    let mut compiler = protox::Compiler::with_file_resolver(resolver);
    compiler
        .open_file(name)
        .map_err(|error| format!("cannot compile '{shown}': {error}"))?;
    let pool = compiler.descriptor_pool();
    let http = pool.get_extension_by_name("google.api.http");
    let mut methods = HashMap::new();
    let mut bindings = Vec::new();
    for service in pool.services() {
        for method in service.methods() {
            methods.insert(format!("/{}/{}", service.full_name(), method.name()), method.clone());
            let Some(http) = &http else { continue };
            let options = method.options();
            if !options.has_extension(http) {
                continue;
            }
            if let ProtoValue::Message(rule) = options.get_extension(http).as_ref() {
                add_bindings(rule, &method, &mut bindings, 0)?;
            }
        }
    }
    Ok(Protos { methods, bindings })
}

fn add_bindings(
    rule: &DynamicMessage,
    method: &MethodDescriptor,
    bindings: &mut Vec<Binding>,
    depth: usize,
) -> Result<(), String> {
    let text = |field: &str| match rule.get_field_by_name(field).as_deref() {
        Some(ProtoValue::String(s)) if !s.is_empty() => Some(s.clone()),
        _ => None,
    };
    let verb = ["get", "put", "post", "delete", "patch"]
        .into_iter()
        .find_map(|verb| text(verb).map(|path| (verb, path)));
    if let Some((verb, path)) = verb {
        let template = Template::parse(&path)
            .map_err(|error| format!("{}: google.api.http {verb} '{path}': {error}", method.full_name()))?;
        for field in template.variables() {
            field_at(&method.input(), field)
                .map_err(|error| format!("{}: google.api.http {verb} '{path}': {error}", method.full_name()))?;
        }
        bindings.push(Binding {
            verb: Method::from_bytes(verb.to_uppercase().as_bytes()).unwrap_or(Method::GET),
            template,
            body: text("body"),
            response_body: text("response_body"),
            method: method.clone(),
        });
    }
    if depth == 0 {
        if let Some(ProtoValue::List(more)) = rule.get_field_by_name("additional_bindings").as_deref() {
            for extra in more {
                if let ProtoValue::Message(extra) = extra {
                    add_bindings(extra, method, bindings, 1)?;
                }
            }
        }
    }
    Ok(())
}

/// The field a dotted path names, through message fields.
fn field_at(message: &MessageDescriptor, path: &[String]) -> Result<FieldDescriptor, String> {
    let mut message = message.clone();
    let mut found = None;
    for (at, name) in path.iter().enumerate() {
        let field = message
            .get_field_by_name(name)
            .or_else(|| message.get_field_by_json_name(name))
            .ok_or_else(|| format!("{} has no field '{name}'", message.full_name()))?;
        if at + 1 < path.len() {
            message = match field.kind() {
                Kind::Message(inner) if !field.is_list() && !field.is_map() => inner,
                _ => return Err(format!("'{name}' of {} is not a message field", message.full_name())),
            };
        }
        found = Some(field);
    }
    found.ok_or_else(|| "an empty field path".to_string())
}

/// A `google.api.http` path template: `/v1/{name=messages/*}/items/**:verb`.
#[derive(Debug, Clone, PartialEq)]
pub struct Template {
    segments: Vec<Segment>,
    verb: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    Literal(String),
    /// `*`: one segment.
    One,
    /// `**`: the rest (zero or more segments).
    Rest,
    Variable {
        field: Vec<String>,
        pattern: Vec<Segment>,
    },
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        let body = text.strip_prefix('/').ok_or("a template starts with '/'")?;
        // The verb follows the last ':' outside braces.
        let mut depth = 0i32;
        let mut verb_at = None;
        for (at, c) in body.char_indices() {
            match c {
                '{' => depth += 1,
                '}' => depth -= 1,
                ':' if depth == 0 => verb_at = Some(at),
                _ => {}
            }
        }
        if depth != 0 {
            return Err("unbalanced braces".into());
        }
        let (body, verb) = match verb_at {
            Some(at) => (&body[..at], Some(body[at + 1..].to_string())),
            None => (body, None),
        };
        let mut segments = Vec::new();
        for piece in split_outside_braces(body) {
            if let Some(inner) = piece.strip_prefix('{') {
                let inner = inner
                    .strip_suffix('}')
                    .ok_or_else(|| format!("bad variable '{piece}'"))?;
                let (field, pattern) = match inner.split_once('=') {
                    Some((field, pattern)) => (field, pattern.split('/').map(simple).collect::<Result<Vec<_>, _>>()?),
                    None => (inner, vec![Segment::One]),
                };
                if field.is_empty() || !field.split('.').all(is_ident) {
                    return Err(format!("bad field path '{field}'"));
                }
                segments.push(Segment::Variable {
                    field: field.split('.').map(str::to_string).collect(),
                    pattern,
                });
            } else {
                segments.push(simple(piece)?);
            }
        }
        let flat = flatten(&segments);
        if flat.iter().filter(|s| matches!(s, Segment::Rest)).count() > 1
            || flat
                .iter()
                .position(|s| matches!(s, Segment::Rest))
                .is_some_and(|at| at + 1 != flat.len())
        {
            return Err("'**' may only be the last segment".into());
        }
        Ok(Template { segments, verb })
    }

    /// Field paths of the template's variables.
    pub fn variables(&self) -> impl Iterator<Item = &[String]> {
        self.segments.iter().filter_map(|segment| match segment {
            Segment::Variable { field, .. } => Some(field.as_slice()),
            _ => None,
        })
    }

    /// The variables (dotted field path, percent-decoded value) when `path` matches.
    pub fn matches(&self, path: &str) -> Option<Vec<(String, String)>> {
        let path = path.strip_prefix('/')?;
        let path = match &self.verb {
            Some(verb) => path.strip_suffix(verb.as_str())?.strip_suffix(':')?,
            None => path,
        };
        let parts: Vec<&str> = if path.is_empty() {
            Vec::new()
        } else {
            path.split('/').collect()
        };
        let mut at = 0;
        let mut vars = Vec::new();
        for segment in &self.segments {
            match segment {
                Segment::Variable { field, pattern } => {
                    let start = at;
                    at = match_simple(pattern, &parts, at)?;
                    let value = parts[start..at].join("/");
                    vars.push((
                        field.join("."),
                        crate::form::decode(&value.replace('+', "%2B")).into_owned(),
                    ));
                }
                other => at = match_simple(std::slice::from_ref(other), &parts, at)?,
            }
        }
        (at == parts.len()).then_some(vars)
    }
}

fn is_ident(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn simple(piece: &str) -> Result<Segment, String> {
    Ok(match piece {
        "*" => Segment::One,
        "**" => Segment::Rest,
        "" => return Err("an empty segment".into()),
        literal if literal.contains(['{', '}', '*']) => return Err(format!("bad segment '{literal}'")),
        literal => Segment::Literal(literal.to_string()),
    })
}

fn split_outside_braces(text: &str) -> Vec<&str> {
    let mut pieces = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (at, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            '/' if depth == 0 => {
                pieces.push(&text[start..at]);
                start = at + 1;
            }
            _ => {}
        }
    }
    pieces.push(&text[start..]);
    pieces
}

fn flatten(segments: &[Segment]) -> Vec<Segment> {
    segments
        .iter()
        .flat_map(|segment| match segment {
            Segment::Variable { pattern, .. } => pattern.clone(),
            other => vec![other.clone()],
        })
        .collect()
}

/// Matches plain segments from `at`; where they end.
fn match_simple(pattern: &[Segment], parts: &[&str], mut at: usize) -> Option<usize> {
    for segment in pattern {
        match segment {
            Segment::Literal(literal) => {
                (parts.get(at)? == literal).then_some(())?;
                at += 1;
            }
            Segment::One => {
                parts.get(at).filter(|p| !p.is_empty())?;
                at += 1;
            }
            Segment::Rest => at = parts.len(),
            Segment::Variable { .. } => return None,
        }
    }
    Some(at)
}

/// Sets the field at dotted `path` of a JSON payload for `message` from
/// text (a path variable or query argument), typed by the field: numbers
/// parsed, booleans as Kong reads them (`0` and `false` are false).
/// `Ok(false)` when the message has no such field.
pub fn set_text_field(
    payload: &mut Map<String, Value>,
    message: &MessageDescriptor,
    path: &str,
    values: &[String],
) -> Result<bool, String> {
    let names: Vec<String> = path.split('.').map(str::to_string).collect();
    let Ok(field) = field_at(message, &names) else {
        return Ok(false);
    };
    let typed = |text: &String| -> Value {
        match field.kind() {
            Kind::Bool => Value::Bool(text != "0" && text != "false"),
            Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 | Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => text
                .parse::<i64>()
                .map_or_else(|_| Value::String(text.clone()), Value::from),
            Kind::Uint32 | Kind::Fixed32 | Kind::Uint64 | Kind::Fixed64 => text
                .parse::<u64>()
                .map_or_else(|_| Value::String(text.clone()), Value::from),
            Kind::Float | Kind::Double => text
                .parse::<f64>()
                .ok()
                .and_then(serde_json::Number::from_f64)
                .map_or_else(|| Value::String(text.clone()), Value::Number),
            _ => Value::String(text.clone()),
        }
    };
    let value = if field.is_list() {
        Value::Array(values.iter().map(typed).collect())
    } else {
        match values.last() {
            Some(text) => typed(text),
            None => return Ok(true),
        }
    };
    let mut at = payload;
    for name in &names[..names.len() - 1] {
        let entry = at.entry(name.clone()).or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            return Err(format!("'{name}' is set and is not a message"));
        }
        at = entry.as_object_mut().expect("checked");
    }
    at.insert(names[names.len() - 1].clone(), value);
    Ok(true)
}

/// A JSON value as `message`, in protobuf's wire format. Unknown fields and
/// wrong types are refused with the field's name.
pub fn encode_json(message: &MessageDescriptor, json: Value) -> Result<Bytes, String> {
    let decoded = DynamicMessage::deserialize_with_options(message.clone(), json, &DeserializeOptions::new())
        .map_err(|error| format!("not a valid {}: {error}", message.full_name()))?;
    Ok(Bytes::from(decoded.encode_to_vec()))
}

/// A protobuf message as JSON (proto field names, default values written).
pub fn decode_to_json(message: &MessageDescriptor, wire: &[u8]) -> Result<Value, String> {
    let decoded = DynamicMessage::decode(message.clone(), wire)
        .map_err(|error| format!("not a valid {}: {error}", message.full_name()))?;
    let options = SerializeOptions::new()
        .use_proto_field_name(true)
        .skip_default_fields(false)
        .stringify_64_bit_integers(false);
    decoded
        .serialize_with_options(serde_json::value::Serializer, &options)
        .map_err(|error| format!("{}: {error}", message.full_name()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(template: &str, path: &str) -> Option<Vec<(String, String)>> {
        Template::parse(template).expect("template").matches(path)
    }

    #[test]
    fn templates_match_literals_wildcards_variables_and_verbs() {
        assert_eq!(
            vars("/v1/messages/{name}", "/v1/messages/john"),
            Some(vec![("name".into(), "john".into())])
        );
        assert_eq!(vars("/v1/messages/{name}", "/v1/messages/john/x"), None);
        assert_eq!(vars("/v1/messages/{name}", "/v1/messages/"), None);
        assert_eq!(
            vars("/v1/{name=shelves/*/books/*}", "/v1/shelves/1/books/2"),
            Some(vec![("name".into(), "shelves/1/books/2".into())])
        );
        assert_eq!(
            vars("/v1/{book.name=**}", "/v1/a/b/c"),
            Some(vec![("book.name".into(), "a/b/c".into())])
        );
        assert_eq!(vars("/v1/*/x", "/v1/anything/x"), Some(vec![]));
        assert_eq!(
            vars("/v1/{id}:cancel", "/v1/42:cancel"),
            Some(vec![("id".into(), "42".into())])
        );
        assert_eq!(vars("/v1/{id}:cancel", "/v1/42"), None);
        assert_eq!(
            vars("/v1/{name}", "/v1/j%20d"),
            Some(vec![("name".into(), "j d".into())])
        );
    }

    #[test]
    fn bad_templates_are_refused_with_the_reason() {
        assert!(Template::parse("v1/x").unwrap_err().contains("starts with '/'"));
        assert!(Template::parse("/v1/{x").unwrap_err().contains("unbalanced"));
        assert!(Template::parse("/v1/**/x").unwrap_err().contains("last segment"));
        assert!(Template::parse("/v1/{a-b}").unwrap_err().contains("bad field path"));
    }
}
