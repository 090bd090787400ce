//! Typed reads of a plugin's `config` object. strait-core has validated it
//! and filled defaults before a plugin is built; these reads still refuse a
//! wrong type with the field's name instead of guessing.

use serde_json::{Map, Value};

use crate::PluginError;

pub(crate) struct ConfigReader<'a> {
    map: &'a Map<String, Value>,
    prefix: String,
}

impl<'a> ConfigReader<'a> {
    pub fn new(map: &'a Map<String, Value>) -> ConfigReader<'a> {
        ConfigReader {
            map,
            prefix: String::new(),
        }
    }

    fn path(&self, field: &str) -> String {
        format!("{}{field}", self.prefix)
    }

    fn get(&self, field: &str) -> Option<&'a Value> {
        self.map.get(field).filter(|v| !v.is_null())
    }

    /// The nested record `field` (absent: an empty record).
    pub fn record(&self, field: &str) -> Result<ConfigReader<'a>, PluginError> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let map = match self.get(field) {
            None => EMPTY.get_or_init(Map::new),
            Some(Value::Object(map)) => map,
            Some(_) => return Err(PluginError::invalid(&self.path(field), "expected a record")),
        };
        Ok(ConfigReader {
            map,
            prefix: format!("{}.", self.path(field)),
        })
    }

    pub fn string(&self, field: &str) -> Result<Option<String>, PluginError> {
        match self.get(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(PluginError::invalid(&self.path(field), "expected a string")),
        }
    }

    pub fn bool(&self, field: &str, default: bool) -> Result<bool, PluginError> {
        match self.get(field) {
            None => Ok(default),
            Some(Value::Bool(b)) => Ok(*b),
            Some(_) => Err(PluginError::invalid(&self.path(field), "expected a boolean")),
        }
    }

    pub fn integer(&self, field: &str, default: i64) -> Result<i64, PluginError> {
        match self.get(field) {
            None => Ok(default),
            Some(v) => v
                .as_i64()
                .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
                .ok_or_else(|| PluginError::invalid(&self.path(field), "expected an integer")),
        }
    }

    pub fn number(&self, field: &str, default: f64) -> Result<f64, PluginError> {
        match self.get(field) {
            None => Ok(default),
            Some(v) => v
                .as_f64()
                .ok_or_else(|| PluginError::invalid(&self.path(field), "expected a number")),
        }
    }

    /// `field` when set (not absent nor null).
    pub fn integer_opt(&self, field: &str) -> Result<Option<i64>, PluginError> {
        self.get(field).map(|_| self.integer(field, 0)).transpose()
    }

    /// `field` when set (not absent nor null).
    pub fn bool_opt(&self, field: &str) -> Result<Option<bool>, PluginError> {
        self.get(field).map(|_| self.bool(field, false)).transpose()
    }

    /// `field` when set (not absent nor null).
    pub fn number_opt(&self, field: &str) -> Result<Option<f64>, PluginError> {
        self.get(field).map(|_| self.number(field, 0.0)).transpose()
    }

    /// Each record of the array `field` (absent: none), read with the
    /// element's path (`metrics.2.name`).
    pub fn records(&self, field: &str) -> Result<Vec<ConfigReader<'a>>, PluginError> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(at, item)| match item {
                    Value::Object(map) => Ok(ConfigReader {
                        map,
                        prefix: format!("{}.{}.", self.path(field), at + 1),
                    }),
                    _ => Err(PluginError::invalid(
                        &format!("{}.{}", self.path(field), at + 1),
                        "expected a record",
                    )),
                })
                .collect(),
            Some(_) => Err(PluginError::invalid(&self.path(field), "expected an array")),
        }
    }

    pub fn strings(&self, field: &str) -> Result<Vec<String>, PluginError> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|item| {
                    item.as_str()
                        .map(str::to_string)
                        .ok_or_else(|| PluginError::invalid(&self.path(field), "expected an array of strings"))
                })
                .collect(),
            Some(_) => Err(PluginError::invalid(&self.path(field), "expected an array")),
        }
    }
}
