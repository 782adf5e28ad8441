//! A deterministic JSON value valid for a JSON schema: what the built-in
//! test models answer for structured outputs and put in tool call
//! arguments. Covers what OpenAI's structured outputs and Pydantic, Zod and
//! LangChain emit: `type` (or a list of types), `properties`, `items`,
//! `enum`, `const`, `anyOf`/`oneOf`/`allOf`, `$ref` into `$defs` or
//! `definitions`, string `format`s and length bounds, number bounds.

use serde_json::{Map, Value, json};

/// Deeper than this, objects come out empty and arrays without items (a
/// recursive schema must end somewhere).
const MAX_DEPTH: usize = 12;

/// A value valid for `schema`; strings are `text` (cut to fit).
pub fn instance(schema: &Value, text: &str) -> Value {
    Instance { root: schema, text }.of(schema, 0)
}

struct Instance<'a> {
    root: &'a Value,
    text: &'a str,
}

impl Instance<'_> {
    fn of(&self, schema: &Value, depth: usize) -> Value {
        let Some(schema) = schema.as_object() else {
            // `true` or `{}`-like: anything goes.
            return json!(self.text);
        };
        if let Some(reference) = schema.get("$ref").and_then(Value::as_str) {
            let target = reference
                .strip_prefix('#')
                .and_then(|pointer| self.root.pointer(pointer));
            return match target {
                Some(target) if depth < MAX_DEPTH => self.of(target, depth + 1),
                _ => Value::Null,
            };
        }
        if let Some(value) = schema.get("const") {
            return value.clone();
        }
        if let Some(first) = schema
            .get("enum")
            .and_then(Value::as_array)
            .and_then(|e| e.first())
        {
            return first.clone();
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(branches) = schema.get(key).and_then(Value::as_array) {
                // A branch that is not just `null`, when there is one.
                let branch = branches
                    .iter()
                    .find(|b| b.get("type").and_then(Value::as_str) != Some("null"))
                    .or(branches.first());
                if let Some(branch) = branch {
                    return self.of(branch, depth + 1);
                }
            }
        }
        if let Some(parts) = schema.get("allOf").and_then(Value::as_array) {
            return self.all_of(parts, depth);
        }
        match type_of(schema) {
            Some("object") => self.object(schema, depth),
            Some("array") => self.array(schema, depth),
            Some("string") => self.string(schema),
            Some("integer") => json!(number_in(schema).round() as i64),
            Some("number") => json!(number_in(schema)),
            Some("boolean") => json!(true),
            Some("null") => Value::Null,
            _ if schema.contains_key("properties") => self.object(schema, depth),
            _ => json!(self.text),
        }
    }

    fn object(&self, schema: &Map<String, Value>, depth: usize) -> Value {
        let mut object = Map::new();
        if depth < MAX_DEPTH
            && let Some(properties) = schema.get("properties").and_then(Value::as_object)
        {
            // Every property: strict schemas require them all.
            for (name, property) in properties {
                object.insert(name.clone(), self.of(property, depth + 1));
            }
        }
        Value::Object(object)
    }

    fn array(&self, schema: &Map<String, Value>, depth: usize) -> Value {
        let min = schema.get("minItems").and_then(Value::as_u64).unwrap_or(0);
        let max = schema
            .get("maxItems")
            .and_then(Value::as_u64)
            .unwrap_or(u64::MAX);
        let count = if depth < MAX_DEPTH {
            min.max(1).min(max)
        } else {
            0
        };
        let item = schema.get("items").cloned().unwrap_or(json!({}));
        Value::Array(
            (0..count.min(8))
                .map(|_| self.of(&item, depth + 1))
                .collect(),
        )
    }

    fn string(&self, schema: &Map<String, Value>) -> Value {
        let formatted = match schema.get("format").and_then(Value::as_str) {
            Some("date-time") => Some("2026-01-01T00:00:00Z"),
            Some("date") => Some("2026-01-01"),
            Some("time") => Some("00:00:00"),
            Some("email") => Some("user@example.com"),
            Some("uri" | "url") => Some("https://example.com/"),
            Some("uuid") => Some("00000000-0000-4000-8000-000000000000"),
            _ => None,
        };
        if let Some(value) = formatted {
            return json!(value);
        }
        let min = schema.get("minLength").and_then(Value::as_u64).unwrap_or(0) as usize;
        let max = schema
            .get("maxLength")
            .and_then(Value::as_u64)
            .map_or(usize::MAX, |m| m as usize);
        let mut text: String = self.text.chars().take(max).collect();
        while text.chars().count() < min {
            text.push('x');
        }
        json!(text)
    }

    /// The parts' objects merged (Pydantic wraps a `$ref` in `allOf`).
    fn all_of(&self, parts: &[Value], depth: usize) -> Value {
        let mut merged = Map::new();
        for part in parts {
            match self.of(part, depth + 1) {
                Value::Object(fields) => merged.extend(fields),
                other if parts.len() == 1 => return other,
                _ => {}
            }
        }
        Value::Object(merged)
    }
}

/// The schema's type; of a list of types, the first that is not `null`.
fn type_of(schema: &Map<String, Value>) -> Option<&str> {
    match schema.get("type")? {
        Value::String(kind) => Some(kind),
        Value::Array(kinds) => kinds
            .iter()
            .filter_map(Value::as_str)
            .find(|k| *k != "null")
            .or(Some("null")),
        _ => None,
    }
}

/// 1 when the bounds allow it, else the nearest bound.
fn number_in(schema: &Map<String, Value>) -> f64 {
    let bound = |key: &str| schema.get(key).and_then(Value::as_f64);
    let low = bound("minimum").or_else(|| bound("exclusiveMinimum").map(|m| m + 1.0));
    let high = bound("maximum").or_else(|| bound("exclusiveMaximum").map(|m| m - 1.0));
    let mut value = 1.0_f64;
    if let Some(low) = low {
        value = value.max(low);
    }
    if let Some(high) = high {
        value = value.min(high);
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pydantic_style_schemas_get_a_value_of_every_required_shape() {
        // As Pydantic emits a model with a nested model, an enum, an
        // optional field and a list.
        let schema = json!({
            "$defs": {
                "Colour": {"enum": ["red", "green"], "type": "string"},
                "Address": {"properties": {"city": {"type": "string", "maxLength": 5}}, "required": ["city"], "type": "object"}
            },
            "properties": {
                "name": {"type": "string"},
                "age": {"type": "integer", "minimum": 18},
                "score": {"type": "number", "exclusiveMaximum": 0.5},
                "colour": {"$ref": "#/$defs/Colour"},
                "home": {"allOf": [{"$ref": "#/$defs/Address"}]},
                "nickname": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                "tags": {"type": "array", "items": {"type": "string"}, "minItems": 2},
                "born": {"type": "string", "format": "date"},
                "active": {"type": ["boolean", "null"]},
                "kind": {"const": "person"}
            },
            "required": ["name", "age"],
            "type": "object"
        });
        assert_eq!(
            instance(&schema, "Ada Lovelace"),
            json!({
                "name": "Ada Lovelace", "age": 18, "score": -0.5, "colour": "red",
                "home": {"city": "Ada L"}, "nickname": "Ada Lovelace",
                "tags": ["Ada Lovelace", "Ada Lovelace"], "born": "2026-01-01",
                "active": true, "kind": "person"
            })
        );
    }

    #[test]
    fn recursive_schemas_end() {
        let schema = json!({
            "$defs": {"Node": {"type": "object", "properties": {"children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}}}},
            "$ref": "#/$defs/Node"
        });
        let value = instance(&schema, "x");
        assert!(value.is_object());
        assert!(value.to_string().len() < 10_000);
    }
}
