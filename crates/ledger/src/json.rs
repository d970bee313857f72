//! JSON read back from the ledger, bounded in depth. A jsonb value nests as
//! deep as an agent sent it, but a JSON reader recurses once per level and
//! serde_json refuses past 128: one effect with absurd params would then be
//! impossible to show or settle. What lies deeper than `MAX_DEPTH` is read
//! as a note instead; the row itself, its hash included, is untouched.

use serde_json::Value;
use sqlx::error::BoxDynError;
use sqlx::postgres::{PgTypeInfo, PgValueFormat, PgValueRef};
use sqlx::{Decode, Postgres, Type, ValueRef};

/// Levels of arrays and objects read as they are; well under serde_json's 128.
pub const MAX_DEPTH: usize = 64;

/// What a value nested deeper than `MAX_DEPTH` is read as.
pub const CUT_NOTE: &str = "(nested deeper than 64 levels: cut here)";

/// Parses JSON text, each array or object that opens deeper than
/// `MAX_DEPTH` levels replaced by `CUT_NOTE`.
pub fn parse_bounded(text: &[u8]) -> Result<Value, serde_json::Error> {
    match cut_deep(text) {
        Some(cut) => serde_json::from_slice(&cut),
        None => serde_json::from_slice(text),
    }
}

/// The text with every container below `MAX_DEPTH` replaced by the note;
/// None when nothing nests that deep (nearly always: no copy then).
fn cut_deep(text: &[u8]) -> Option<Vec<u8>> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    let mut cut: Option<Vec<u8>> = None;
    let mut skipping = false;
    let mut copied_to = 0;
    for (at, &byte) in text.iter().enumerate() {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match byte {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                if depth == MAX_DEPTH + 1 && !skipping {
                    let cut = cut.get_or_insert_with(|| Vec::with_capacity(text.len()));
                    cut.extend_from_slice(&text[copied_to..at]);
                    cut.push(b'"');
                    cut.extend_from_slice(CUT_NOTE.as_bytes());
                    cut.push(b'"');
                    skipping = true;
                }
            }
            b']' | b'}' => {
                if depth == MAX_DEPTH + 1 && skipping {
                    skipping = false;
                    copied_to = at + 1;
                }
                depth = depth.saturating_sub(1);
            }
            _ => {}
        }
    }
    cut.map(|mut cut| {
        cut.extend_from_slice(&text[copied_to.min(text.len())..]);
        cut
    })
}

/// A json or jsonb column read through `parse_bounded`: for a `Value` or
/// `Option<Value>` field, `#[sqlx(try_from = "BoundedJson")]`.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundedJson(pub Option<Value>);

impl Type<Postgres> for BoundedJson {
    fn type_info() -> PgTypeInfo {
        <sqlx::types::Json<Value> as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <sqlx::types::Json<Value> as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for BoundedJson {
    fn decode(value: PgValueRef<'r>) -> Result<Self, BoxDynError> {
        if value.is_null() {
            return Ok(BoundedJson(None));
        }
        let binary_jsonb = value.format() == PgValueFormat::Binary
            && *value.type_info() == <BoundedJson as Type<Postgres>>::type_info();
        let mut text = value.as_bytes()?;
        if binary_jsonb {
            match text.split_first() {
                Some((1, rest)) => text = rest,
                _ => return Err("unsupported jsonb format version (expected 1)".into()),
            }
        }
        Ok(BoundedJson(Some(parse_bounded(text)?)))
    }
}

impl From<BoundedJson> for Value {
    fn from(json: BoundedJson) -> Value {
        json.0.unwrap_or(Value::Null)
    }
}

impl From<BoundedJson> for Option<Value> {
    fn from(json: BoundedJson) -> Option<Value> {
        json.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> String {
        format!(
            r#"{{"a":1,"deep":{}{}}}"#,
            "[".repeat(levels),
            "]".repeat(levels)
        )
    }

    #[test]
    fn shallow_json_is_read_as_it_is() {
        let text = r#"{"a":"[{\"]","b":[1,{"c":null}]}"#;
        assert_eq!(cut_deep(text.as_bytes()), None);
        assert_eq!(
            parse_bounded(text.as_bytes()).unwrap(),
            json!({"a": "[{\"]", "b": [1, {"c": null}]})
        );
    }

    #[test]
    fn deep_json_is_cut_below_the_limit_and_keeps_what_follows() {
        let text = format!(r#"[{},"after"]"#, nested(500));
        let value = parse_bounded(text.as_bytes()).unwrap();
        assert_eq!(value[1], "after");
        assert_eq!(value[0]["a"], 1);
        let mut inner = &value[0]["deep"];
        // The outer array is level 1, the object 2, then 62 more arrays.
        for _ in 0..(MAX_DEPTH - 2) {
            inner = &inner[0];
        }
        assert_eq!(*inner, Value::String(CUT_NOTE.to_string()));
    }

    #[test]
    fn brackets_inside_strings_do_not_count() {
        let text = format!(r#"{{"s":"{}"}}"#, "[".repeat(300));
        assert_eq!(cut_deep(text.as_bytes()), None);
    }
}
