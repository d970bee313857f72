//! Request templates: `{key}`, `{external_ref}`, `{target}`, `{action}`,
//! `{amount_minor}`, `{currency}`, `{provider}`, `{compensation_key}` and
//! `{params.a.b}`; `{{` and `}}` are literal braces.
//!
//! Values are never pasted into a format blindly: in URLs they are
//! percent-encoded, and in JSON bodies a string that is exactly one
//! placeholder becomes that value with its type (a number stays a number),
//! while other strings get the value's text, escaped by the JSON encoder.

use std::collections::BTreeMap;

use serde_json::Value;
use thiserror::Error;

/// The simple placeholder names; `params.…` is accepted besides these.
pub const NAMES: [&str; 9] = [
    "key",
    "op_key",
    "external_ref",
    "target",
    "action",
    "amount_minor",
    "currency",
    "provider",
    "compensation_key",
];

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum TemplateError {
    #[error("unknown placeholder {{{0}}} (known: {list}, params.NAME)", list = NAMES.join(", "))]
    Unknown(String),
    /// A known placeholder the effect has no value for: a lookup strategy
    /// that needs it does not apply.
    #[error("the effect has no value for {{{0}}}")]
    Missing(String),
    #[error("template {0:?}: an unmatched brace (write {{{{ or }}}} for a literal one)")]
    Syntax(String),
}

/// The values a template may use, for one effect.
#[derive(Debug, Clone, Default)]
pub struct Vars {
    simple: BTreeMap<&'static str, Value>,
    params: Value,
}

impl Vars {
    pub fn new(params: Value) -> Self {
        Vars {
            simple: BTreeMap::new(),
            params,
        }
    }

    /// Sets a simple value; `None` (or JSON null) leaves it missing.
    pub fn set(&mut self, name: &'static str, value: Option<Value>) -> &mut Self {
        if let Some(value) = value.filter(|v| !v.is_null()) {
            self.simple.insert(name, value);
        }
        self
    }

    pub fn get(&self, name: &str) -> Result<Value, TemplateError> {
        if let Some(path) = name.strip_prefix("params.") {
            let mut current = &self.params;
            for part in path.split('.') {
                current = current
                    .get(part)
                    .ok_or_else(|| TemplateError::Missing(name.to_string()))?;
            }
            return match current {
                Value::Null => Err(TemplateError::Missing(name.to_string())),
                other => Ok(other.clone()),
            };
        }
        if !NAMES.contains(&name) {
            return Err(TemplateError::Unknown(name.to_string()));
        }
        self.simple
            .get(name)
            .cloned()
            .ok_or_else(|| TemplateError::Missing(name.to_string()))
    }
}

enum Piece<'a> {
    Text(String),
    Slot(&'a str),
}

fn parse(template: &str) -> Result<Vec<Piece<'_>>, TemplateError> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(index) = rest.find(['{', '}']) {
        text.push_str(&rest[..index]);
        let tail = &rest[index..];
        if let Some(after) = tail.strip_prefix("{{") {
            text.push('{');
            rest = after;
        } else if let Some(after) = tail.strip_prefix("}}") {
            text.push('}');
            rest = after;
        } else if tail.starts_with('{') {
            let end = tail
                .find('}')
                .ok_or_else(|| TemplateError::Syntax(template.to_string()))?;
            let name = &tail[1..end];
            if name.is_empty() || name.contains('{') {
                return Err(TemplateError::Syntax(template.to_string()));
            }
            if !text.is_empty() {
                pieces.push(Piece::Text(std::mem::take(&mut text)));
            }
            pieces.push(Piece::Slot(name.trim()));
            rest = &tail[end + 1..];
        } else {
            return Err(TemplateError::Syntax(template.to_string()));
        }
    }
    text.push_str(rest);
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    Ok(pieces)
}

/// Checks a template's syntax and names without any effect at hand.
pub fn check(template: &str) -> Result<(), TemplateError> {
    for piece in parse(template)? {
        if let Piece::Slot(name) = piece
            && !name.starts_with("params.")
            && !NAMES.contains(&name)
        {
            return Err(TemplateError::Unknown(name.to_string()));
        }
    }
    Ok(())
}

/// Whether a template is made of placeholders only (`{key}`): its value
/// comes from the effect, none of it is written in the file.
pub fn is_only_placeholders(template: &str) -> bool {
    parse(template).is_ok_and(|pieces| {
        !pieces.is_empty() && pieces.iter().all(|piece| matches!(piece, Piece::Slot(_)))
    })
}

/// Checks every string inside a JSON body template.
pub fn check_json(value: &Value) -> Result<(), TemplateError> {
    match value {
        Value::String(text) => check(text),
        Value::Array(items) => items.iter().try_for_each(check_json),
        Value::Object(map) => map.values().try_for_each(check_json),
        _ => Ok(()),
    }
}

fn as_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    }
}

/// Renders text, passing each value through `encode` (percent-encoding
/// for URLs, identity elsewhere).
pub fn render_text(
    template: &str,
    vars: &Vars,
    encode: impl Fn(&str) -> String,
) -> Result<String, TemplateError> {
    let mut out = String::new();
    for piece in parse(template)? {
        match piece {
            Piece::Text(text) => out.push_str(&text),
            Piece::Slot(name) => out.push_str(&encode(&as_text(&vars.get(name)?))),
        }
    }
    Ok(out)
}

/// Renders a JSON body template.
pub fn render_json(template: &Value, vars: &Vars) -> Result<Value, TemplateError> {
    Ok(match template {
        Value::String(text) => {
            let pieces = parse(text)?;
            match pieces.as_slice() {
                [Piece::Slot(name)] => vars.get(name)?,
                _ => Value::String(render_text(text, vars, |s| s.to_string())?),
            }
        }
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|item| render_json(item, vars))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, item)| Ok((key.clone(), render_json(item, vars)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
        other => other.clone(),
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::adapters::percent;

    fn vars() -> Vars {
        let mut vars = Vars::new(json!({"invoice": {"id": "INV 1"}, "n": 3}));
        vars.set("key", Some(json!("refund:a/b?c")))
            .set("amount_minor", Some(json!(1500)))
            .set("external_ref", None);
        vars
    }

    #[test]
    fn urls_encode_values() {
        let url = render_text("/v1/x/{key}/{{literal}}", &vars(), percent::encode).unwrap();
        assert_eq!(url, "/v1/x/refund%3Aa%2Fb%3Fc/{literal}");
        assert_eq!(
            render_text("{params.invoice.id}", &vars(), percent::encode).unwrap(),
            "INV%201"
        );
    }

    #[test]
    fn bodies_keep_types_and_escape_text() {
        let body =
            json!({"amount": "{amount_minor}", "note": "key \"{key}\"", "n": ["{params.n}"]});
        let rendered = render_json(&body, &vars()).unwrap();
        assert_eq!(
            rendered,
            json!({"amount": 1500, "note": "key \"refund:a/b?c\"", "n": [3]})
        );
    }

    #[test]
    fn missing_unknown_and_broken_templates_are_told_apart() {
        assert_eq!(
            render_text("/{external_ref}", &vars(), percent::encode),
            Err(TemplateError::Missing("external_ref".into()))
        );
        assert_eq!(
            check("/{secret}"),
            Err(TemplateError::Unknown("secret".into()))
        );
        assert!(matches!(check("/{key"), Err(TemplateError::Syntax(_))));
        assert!(matches!(check("/key}"), Err(TemplateError::Syntax(_))));
        assert!(check("/{params.anything}").is_ok());
    }

    #[test]
    fn placeholders_only_is_told_from_written_text() {
        assert!(is_only_placeholders("{key}"));
        assert!(is_only_placeholders("{params.a}{params.b}"));
        assert!(!is_only_placeholders("abc{key}"));
        assert!(!is_only_placeholders("s3cret"));
        assert!(!is_only_placeholders(""));
        assert!(!is_only_placeholders("{{key}}"));
        assert!(!is_only_placeholders("{key"));
    }
}
