//! Field specifications: what a Kong schema table says about one field
//! (type, required, default, constraints), as plain Rust data that both the
//! validator and the `/schemas` renderer read.

use serde_json::{json, Map, Value};

/// A custom check on a string value: `Err(message)` when it is invalid.
pub type StringCheck = fn(&str) -> Result<(), String>;

#[derive(Clone)]
pub enum FieldType {
    String,
    Integer,
    Number,
    Boolean,
    Array(Box<Field>),
    Set(Box<Field>),
    Map(Box<Field>, Box<Field>),
    Record(Vec<(&'static str, Field)>),
    /// A reference to another entity by primary key: `{"id": "<uuid>"}`.
    Foreign(&'static str),
    /// Any JSON object, kept as given (plugin `config`).
    Object,
    /// Kong's `json` type: any JSON value, kept as given (a filter's
    /// `config`); what it must look like is checked by the entity.
    Json,
}

#[derive(Clone)]
pub struct Field {
    pub ty: FieldType,
    pub required: bool,
    pub default: Option<Value>,
    pub one_of: Vec<Value>,
    pub between: Option<(i64, i64)>,
    /// Kong's `gt`: the number must be greater than this.
    pub gt: Option<i64>,
    pub len_min: Option<usize>,
    pub len_max: Option<usize>,
    pub uuid: bool,
    pub auto: bool,
    pub unique: bool,
    pub check: Option<StringCheck>,
    /// Kong's `eq = null`: the field must be absent or null.
    pub must_be_null: bool,
    /// Kong's `referenceable`: a `{vault://...}` reference may stand for the
    /// value; it is stored as written and resolved when a snapshot compiles.
    pub referenceable: bool,
}

impl Field {
    fn of(ty: FieldType) -> Field {
        Field {
            ty,
            required: false,
            default: None,
            one_of: Vec::new(),
            between: None,
            gt: None,
            len_min: None,
            len_max: None,
            uuid: false,
            auto: false,
            unique: false,
            check: None,
            must_be_null: false,
            referenceable: false,
        }
    }

    pub fn string() -> Field {
        Field::of(FieldType::String)
    }
    pub fn integer() -> Field {
        Field::of(FieldType::Integer)
    }
    pub fn number() -> Field {
        Field::of(FieldType::Number)
    }
    pub fn boolean() -> Field {
        Field::of(FieldType::Boolean)
    }
    pub fn array(elements: Field) -> Field {
        Field::of(FieldType::Array(Box::new(elements)))
    }
    pub fn set(elements: Field) -> Field {
        Field::of(FieldType::Set(Box::new(elements)))
    }
    pub fn map(keys: Field, values: Field) -> Field {
        Field::of(FieldType::Map(Box::new(keys), Box::new(values)))
    }
    pub fn record(fields: Vec<(&'static str, Field)>) -> Field {
        Field::of(FieldType::Record(fields))
    }
    pub fn foreign(table: &'static str) -> Field {
        Field::of(FieldType::Foreign(table))
    }
    pub fn object() -> Field {
        Field::of(FieldType::Object)
    }
    pub fn json() -> Field {
        Field::of(FieldType::Json)
    }

    pub fn required(mut self) -> Field {
        self.required = true;
        self
    }
    pub fn default(mut self, value: Value) -> Field {
        self.default = Some(value);
        self
    }
    /// A record whose absent value is filled from its fields' defaults.
    pub fn default_record(self) -> Field {
        self.default(json!({}))
    }
    pub fn one_of(mut self, options: &[&str]) -> Field {
        self.one_of = options.iter().map(|o| json!(o)).collect();
        self
    }
    pub fn one_of_integers(mut self, options: &[i64]) -> Field {
        self.one_of = options.iter().map(|o| json!(o)).collect();
        self
    }
    pub fn between(mut self, low: i64, high: i64) -> Field {
        self.between = Some((low, high));
        self
    }
    pub fn gt(mut self, bound: i64) -> Field {
        self.gt = Some(bound);
        self
    }
    pub fn len_min(mut self, min: usize) -> Field {
        self.len_min = Some(min);
        self
    }
    /// Kong's `len_max`: the most characters of a string, or elements of
    /// an array.
    pub fn len_max(mut self, max: usize) -> Field {
        self.len_max = Some(max);
        self
    }
    pub fn uuid(mut self) -> Field {
        self.uuid = true;
        self
    }
    pub fn auto(mut self) -> Field {
        self.auto = true;
        self
    }
    pub fn unique(mut self) -> Field {
        self.unique = true;
        self
    }
    pub fn must_be_null(mut self) -> Field {
        self.must_be_null = true;
        self
    }
    pub fn referenceable(mut self) -> Field {
        self.referenceable = true;
        self
    }
    pub fn check(mut self, check: StringCheck) -> Field {
        self.check = Some(check);
        self
    }

    /// Kong's `/schemas` description of this field.
    pub fn to_json(&self) -> Value {
        let mut out = Map::new();
        self.describe_type(&mut out);
        if self.required {
            out.insert("required".into(), json!(true));
        }
        if let Some(default) = self.expanded_default() {
            out.insert("default".into(), default);
        }
        if !self.one_of.is_empty() {
            out.insert("one_of".into(), Value::Array(self.one_of.clone()));
        }
        if let Some((low, high)) = self.between {
            out.insert("between".into(), json!([low, high]));
        }
        if let Some(bound) = self.gt {
            out.insert("gt".into(), json!(bound));
        }
        if let Some(min) = self.len_min {
            out.insert("len_min".into(), json!(min));
        }
        if let Some(max) = self.len_max {
            out.insert("len_max".into(), json!(max));
        }
        if self.must_be_null {
            out.insert("eq".into(), Value::Null);
        }
        let flags = [
            (self.uuid, "uuid"),
            (self.auto, "auto"),
            (self.unique, "unique"),
            (self.referenceable, "referenceable"),
        ];
        for (flag, name) in flags {
            if flag {
                out.insert(name.into(), json!(true));
            }
        }
        Value::Object(out)
    }

    fn describe_type(&self, out: &mut Map<String, Value>) {
        let name = match &self.ty {
            FieldType::String => "string",
            FieldType::Integer => "integer",
            FieldType::Number => "number",
            FieldType::Boolean => "boolean",
            FieldType::Array(elements) | FieldType::Set(elements) => {
                out.insert("elements".into(), elements.to_json());
                if matches!(self.ty, FieldType::Set(_)) {
                    "set"
                } else {
                    "array"
                }
            }
            FieldType::Map(keys, values) => {
                out.insert("keys".into(), keys.to_json());
                out.insert("values".into(), values.to_json());
                "map"
            }
            FieldType::Record(fields) => {
                out.insert("fields".into(), fields_to_json(fields));
                "record"
            }
            FieldType::Foreign(table) => {
                out.insert("reference".into(), json!(table));
                "foreign"
            }
            FieldType::Object => "record",
            FieldType::Json => "json",
        };
        out.insert("type".into(), json!(name));
    }

    /// The default as the validator fills it (records expanded with their
    /// fields' defaults).
    pub fn expanded_default(&self) -> Option<Value> {
        let default = self.default.as_ref()?;
        let mut errors = Vec::new();
        Some(super::engine::validate_value(
            self,
            Some(default),
            &super::engine::At::Text(""),
            &mut errors,
        ))
    }
}

/// `[{"name": {...}}, ...]`, Kong's ordered field list.
pub(crate) fn fields_to_json(fields: &[(&'static str, Field)]) -> Value {
    Value::Array(
        fields
            .iter()
            .map(|(name, field)| json!({ *name: field.to_json() }))
            .collect(),
    )
}
