//! One business action, one key: how a call's arguments become the key,
//! the target and the params of its effect, by what each value *is* rather
//! than how it was written (docs/contract.md, "One business action, one
//! key"). The ledger says the same in SQL (`ledger.key_from_template`), and
//! the clients pass the same cases (`clients/scenarios.json`, `keys`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::{Map, Number, Value};
use unicode_normalization::UnicodeNormalization;

/// What a tool may ask for, per argument, to make two spellings of one
/// identifier one: applied in order, to strings only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Normaliser {
    /// The Unicode White_Space characters at either end, gone.
    Trim,
    Lower,
    Upper,
    /// Unicode normalisation form C.
    Nfc,
}

impl Normaliser {
    fn apply(self, text: &str) -> String {
        match self {
            Normaliser::Trim => text.trim_matches(char::is_whitespace).to_string(),
            Normaliser::Lower => text.to_lowercase(),
            Normaliser::Upper => text.to_uppercase(),
            Normaliser::Nfc => text.nfc().collect(),
        }
    }
}

/// A number by its value, in plain decimal: `1500.0` is `1500`, `-0.0` is
/// `0`, `1e20` is `100000000000000000000`, `1e-7` is `0.0000001`.
pub fn number_form(number: &Number) -> String {
    if let Some(integer) = number.as_i64() {
        return integer.to_string();
    }
    if let Some(integer) = number.as_u64() {
        return integer.to_string();
    }
    let float = number.as_f64().unwrap_or_default();
    if float == 0.0 {
        return "0".into();
    }
    // Rust writes a float's shortest round-trip digits without an
    // exponent and an integral one without a point: the key form already.
    float.to_string()
}

/// Canonical JSON (RFC 8785 as the model): members sorted by code point,
/// numbers by value in plain decimal, no whitespace.
pub fn canonical_json(value: &Value) -> String {
    match value {
        Value::Number(number) => number_form(number),
        Value::Object(members) => {
            let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
            sorted.sort_by_key(|(name, _)| *name);
            let inner: Vec<String> = sorted
                .into_iter()
                .map(|(name, value)| format!("{}:{}", json_string(name), canonical_json(value)))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(elements) => {
            let inner: Vec<String> = elements.iter().map(canonical_json).collect();
            format!("[{}]", inner.join(","))
        }
        other => other.to_string(),
    }
}

fn json_string(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// What a placeholder becomes: a string as it is, a number by value, a
/// structure as canonical JSON. None for no value: a null, or a string of
/// nothing but white space.
pub fn key_form(value: &Value) -> Option<String> {
    match value {
        Value::String(text) if text.trim_matches(char::is_whitespace).is_empty() => None,
        Value::String(text) => Some(text.clone()),
        Value::Null => None,
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Number(number) => Some(number_form(number)),
        structure => Some(canonical_json(structure)),
    }
}

/// Money is a whole number of minor units: a number of integral value or a
/// string of one in decimal. Anything else is refused, never rounded.
pub fn money_value(value: &Value, argument: &str) -> Result<i64, String> {
    let refused = || {
        format!(
            "argument {argument:?} must be a whole number of minor units (1500 for 15.00), not {value}: an amount is never rounded"
        )
    };
    match value {
        Value::Number(number) => match (number.as_i64(), number.as_f64()) {
            (Some(integer), _) => Ok(integer),
            (None, Some(float))
                if float.fract() == 0.0 && float.abs() < 9_007_199_254_740_992.0 =>
            {
                Ok(float as i64)
            }
            _ => Err(refused()),
        },
        Value::String(text) => {
            let written = text.trim_matches(char::is_whitespace);
            let (negative, unsigned) = match written.as_bytes().first() {
                Some(b'-') => (true, &written[1..]),
                Some(b'+') => (false, &written[1..]),
                _ => (false, written),
            };
            if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
                return Err(refused());
            }
            // Leading zeros are a spelling: "0001500" is 1500.
            let digits = unsigned.trim_start_matches('0');
            let magnitude: i128 = if digits.is_empty() {
                0
            } else if digits.len() > 19 {
                return Err(refused());
            } else {
                digits.parse().map_err(|_| refused())?
            };
            i64::try_from(if negative { -magnitude } else { magnitude }).map_err(|_| refused())
        }
        _ => Err(refused()),
    }
}

/// The arguments as the key is made from them and the params are stored:
/// the money argument as its integer, normalised arguments normalised,
/// every number by value.
pub fn canonical_arguments(
    arguments: &Map<String, Value>,
    normalise: &BTreeMap<String, Vec<Normaliser>>,
    money: Option<&str>,
) -> Result<Map<String, Value>, String> {
    arguments
        .iter()
        .map(|(name, value)| {
            let value = match value {
                Value::Null => Value::Null,
                _ if Some(name.as_str()) == money => Value::from(money_value(value, name)?),
                Value::String(text) => Value::String(
                    normalise
                        .get(name)
                        .into_iter()
                        .flatten()
                        .fold(text.clone(), |text, normaliser| normaliser.apply(&text)),
                ),
                other => by_value(other),
            };
            Ok((name.clone(), value))
        })
        .collect()
}

/// Every number by its value (an integral float is the integer), nested
/// values included.
pub fn by_value(value: &Value) -> Value {
    match value {
        Value::Number(number) => match number.as_f64() {
            Some(float)
                if number.as_i64().is_none()
                    && number.as_u64().is_none()
                    && float.fract() == 0.0
                    && float.abs() < 9_007_199_254_740_992.0 =>
            {
                Value::from(float as i64)
            }
            _ => value.clone(),
        },
        Value::Object(members) => Value::Object(
            members
                .iter()
                .map(|(name, value)| (name.clone(), by_value(value)))
                .collect(),
        ),
        Value::Array(elements) => Value::Array(elements.iter().map(by_value).collect()),
        other => other.clone(),
    }
}

/// The placeholders of a template: `{name}` or `{name.field}`; `{{` and
/// `}}` are literal braces.
pub fn placeholders(template: &str) -> Result<Vec<String>, String> {
    let mut found = Vec::new();
    fill_with(template, |name| {
        found.push(name.to_string());
        Ok(String::new())
    })?;
    Ok(found)
}

/// Fills a template from canonical arguments. A placeholder with no value
/// is an error, never an empty string: two different calls must not share
/// a key because both lacked a field.
pub fn fill(template: &str, arguments: &Map<String, Value>) -> Result<String, String> {
    fill_with(template, |name| {
        let mut path = name.split('.');
        let mut value = path.next().and_then(|root| arguments.get(root));
        for field in path {
            value = value.and_then(|value| value.get(field));
        }
        value
            .and_then(key_form)
            .ok_or_else(|| format!("the call has no value for {{{name}}}: its key cannot be made"))
    })
}

fn fill_with(
    template: &str,
    mut placeholder: impl FnMut(&str) -> Result<String, String>,
) -> Result<String, String> {
    const UNMATCHED: &str = "an unmatched brace (write {{ or }} for a literal one)";
    let mut out = String::new();
    let mut chars = template.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '{' if chars.peek() == Some(&'{') => {
                chars.next();
                out.push('{');
            }
            '}' if chars.peek() == Some(&'}') => {
                chars.next();
                out.push('}');
            }
            '{' => {
                let mut name = String::new();
                loop {
                    match chars.next() {
                        Some('}') => break,
                        Some('{') | None => return Err(UNMATCHED.into()),
                        Some(c) => name.push(c),
                    }
                }
                let name = name.trim();
                if name.is_empty() {
                    return Err("an empty placeholder {}".into());
                }
                out.push_str(&placeholder(name)?);
            }
            '}' => return Err(UNMATCHED.into()),
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_are_written_by_value() {
        let forms: Vec<String> = serde_json::from_str::<Vec<Value>>(
            "[1500, 1500.0, 1.5e3, -0.0, 0.10, 1e20, 100000000000000000000, 1e-7, -12.50]",
        )
        .unwrap()
        .iter()
        .map(|value| key_form(value).unwrap())
        .collect();
        assert_eq!(
            forms,
            [
                "1500",
                "1500",
                "1500",
                "0",
                "0.1",
                "100000000000000000000",
                "100000000000000000000",
                "0.0000001",
                "-12.5"
            ]
        );
    }

    #[test]
    fn a_structure_is_one_text_in_any_member_order() {
        let a = json!({"zip": "75001", "city": "Paris", "é": [2.0, "a\"b\n"]});
        assert_eq!(
            canonical_json(&a),
            r#"{"city":"Paris","zip":"75001","é":[2,"a\"b\n"]}"#
        );
    }
}
