//! What looks like a credential, and how one is kept out of the config
//! file, the ledger's evidence, error messages and logs: a URL is only
//! ever shown with its user information and the values of its
//! credential-looking parameters replaced by `****`.

use super::percent;

/// What a redacted value is shown as.
pub const MASK: &str = "****";

/// Words of a header or query parameter name that make its value a
/// credential (`api_key`, `X-Auth-Token`, `sig`, `client_secret`…).
const SECRET_WORDS: [&str; 14] = [
    "key",
    "apikey",
    "token",
    "secret",
    "password",
    "passwd",
    "pwd",
    "signature",
    "sig",
    "auth",
    "authorization",
    "cookie",
    "credential",
    "credentials",
];

/// Parts of a name that make it a credential wherever they appear
/// (`accesstoken`, `x-goog-signature`, `clientsecret`).
const SECRET_PARTS: [&str; 7] = [
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "signature",
    "credential",
];

/// Known secret values (what the configured providers and sinks take from
/// the environment) masked wherever they appear in text a provider or sink
/// sent back: an error page that echoes the request carries them, and what
/// it said is stored as evidence. Each value is also looked for as it
/// appears percent-encoded and inside a JSON string, and as the start of a
/// value cut short by an excerpt (`tok_live_4…`).
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Longest first, so a secret that contains another is masked whole.
    forms: Vec<String>,
}

impl Redactor {
    /// Shorter values are left alone: masking every `1` or `ab` in a body
    /// would garble it and hide nothing.
    pub const SHORTEST: usize = 4;

    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        let mut forms = Vec::new();
        for secret in secrets {
            if secret.chars().count() < Self::SHORTEST {
                continue;
            }
            let json = serde_json::to_string(&secret).unwrap_or_default();
            forms.push(percent::encode(&secret));
            if let Some(inner) = json.strip_prefix('"').and_then(|j| j.strip_suffix('"')) {
                forms.push(inner.to_string());
            }
            forms.push(secret);
        }
        forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        forms.dedup();
        Redactor { forms }
    }

    pub fn is_empty(&self) -> bool {
        self.forms.is_empty()
    }

    pub fn text(&self, text: &str) -> String {
        let mut text = text.to_string();
        for form in &self.forms {
            if text.contains(form.as_str()) {
                text = text.replace(form.as_str(), MASK);
            }
        }
        self.mask_cut_prefixes(text)
    }

    /// Every string in the value (object keys included), masked.
    pub fn value(&self, value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        if self.is_empty() {
            return value.clone();
        }
        match value {
            Value::String(text) => Value::String(self.text(text)),
            Value::Array(items) => {
                Value::Array(items.iter().map(|item| self.value(item)).collect())
            }
            Value::Object(map) => Value::Object(
                map.iter()
                    .map(|(key, item)| (self.text(key), self.value(item)))
                    .collect(),
            ),
            other => other.clone(),
        }
    }

    /// An excerpt ends with `…`: what precedes it may be the start of a
    /// secret the cut left half shown.
    fn mask_cut_prefixes(&self, text: String) -> String {
        const CUT: &str = "…";
        if !text.contains(CUT) {
            return text;
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find(CUT) {
            let before = &rest[..at];
            let half_shown = self
                .forms
                .iter()
                .flat_map(|form| {
                    form.char_indices()
                        .map(|(index, _)| &form[..index])
                        .filter(|prefix| prefix.chars().count() >= Self::SHORTEST)
                })
                .filter(|prefix| before.ends_with(prefix))
                .map(str::len)
                .max();
            match half_shown {
                Some(length) => {
                    out.push_str(&before[..before.len() - length]);
                    out.push_str(MASK);
                }
                None => out.push_str(before),
            }
            out.push_str(CUT);
            rest = &rest[at + CUT.len()..];
        }
        out.push_str(rest);
        out
    }
}

/// Whether a header or query parameter named `name` carries a credential.
/// `Idempotency-Key` (or `idempotency_key`) does not: it names the effect.
pub fn looks_secret(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    let words: Vec<&str> = name
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|word| !word.is_empty())
        .collect();
    if words == ["idempotency", "key"] {
        return false;
    }
    let joined = words.concat();
    words.iter().any(|word| SECRET_WORDS.contains(word))
        || SECRET_PARTS.iter().any(|part| joined.contains(part))
}

/// The pieces of a URL, split without parsing so that anything (a
/// template, half a URL in an error) can be redacted.
struct Pieces<'a> {
    /// `scheme://`, or nothing.
    scheme: &'a str,
    userinfo: Option<&'a str>,
    host_and_path: &'a str,
    query: Option<&'a str>,
    fragment: Option<&'a str>,
}

fn pieces(url: &str) -> Pieces<'_> {
    let (before_fragment, fragment) = match url.split_once('#') {
        Some((before, fragment)) => (before, Some(fragment)),
        None => (url, None),
    };
    let (before_query, query) = match before_fragment.split_once('?') {
        Some((before, query)) => (before, Some(query)),
        None => (before_fragment, None),
    };
    let (scheme, rest) = match before_query.find("://") {
        Some(index) => before_query.split_at(index + 3),
        None => ("", before_query),
    };
    let authority_end = if scheme.is_empty() {
        0
    } else {
        rest.find('/').unwrap_or(rest.len())
    };
    let (userinfo, host_and_path) = match rest[..authority_end].rfind('@') {
        Some(at) => (Some(&rest[..at]), &rest[at + 1..]),
        None => (None, rest),
    };
    Pieces {
        scheme,
        userinfo,
        host_and_path,
        query,
        fragment,
    }
}

/// `name=value` pairs of a query, each with its decoded name.
fn pairs(query: &str) -> impl Iterator<Item = (String, &str, Option<&str>)> {
    query.split('&').map(|pair| match pair.split_once('=') {
        Some((name, value)) => (percent::decode(name, true), name, Some(value)),
        None => (percent::decode(pair, true), pair, None),
    })
}

fn redact_pairs(query: &str, secret: &dyn Fn(&str) -> bool) -> String {
    pairs(query)
        .map(|(decoded, name, value)| match value {
            Some(value) if !value.is_empty() && secret(&decoded) => format!("{name}={MASK}"),
            Some(value) => format!("{name}={value}"),
            None => name.to_string(),
        })
        .collect::<Vec<_>>()
        .join("&")
}

/// A URL safe to show, store as evidence or log: its user information
/// (`user:password@`) and the values of its credential-looking query
/// parameters (`token=…`) are replaced by `****`. Anything else, even an
/// unparseable URL, is kept as it is.
pub fn redact_url(url: &str) -> String {
    redact_url_also(url, &|_| false)
}

/// Like [`redact_url`], also masking the parameters `also` names (values
/// taken from the environment, whatever their name).
pub fn redact_url_also(url: &str, also: &dyn Fn(&str) -> bool) -> String {
    let parts = pieces(url);
    let secret = |name: &str| looks_secret(name) || also(name);
    let mut out = String::with_capacity(url.len());
    out.push_str(parts.scheme);
    if parts.userinfo.is_some() {
        out.push_str(MASK);
        out.push('@');
    }
    out.push_str(parts.host_and_path);
    if let Some(query) = parts.query {
        out.push('?');
        out.push_str(&redact_pairs(query, &secret));
    }
    if let Some(fragment) = parts.fragment {
        out.push('#');
        out.push_str(&redact_pairs(fragment, &secret));
    }
    out
}

/// Free text (an error message, a line of a log) with every URL in it
/// redacted as by [`redact_url`].
pub fn redact_urls(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(index) = rest.find("://") {
        let start = rest[..index]
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.')))
            .map_or(0, |i| i + 1);
        let end = rest[index..]
            .find(|c: char| c.is_whitespace() || matches!(c, '"' | '\'' | '<' | '>' | '`'))
            .map_or(rest.len(), |i| index + i);
        out.push_str(&rest[..start]);
        out.push_str(&redact_url(&rest[start..end]));
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

/// A credential written out in a URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Credential {
    /// `user:password@`, or a token as the user name.
    UserInfo,
    /// A credential-looking query parameter, by name.
    Parameter(String),
}

/// The credentials a URL written in the config file holds: user
/// information, and credential-looking query parameters whose value is
/// written out (`allowed` tells values that are not, such as a template
/// placeholder). Names only, never a value.
pub fn url_credentials(url: &str, allowed: &dyn Fn(&str) -> bool) -> Vec<Credential> {
    let parts = pieces(url);
    let mut found = Vec::new();
    if parts.userinfo.is_some() {
        found.push(Credential::UserInfo);
    }
    for query in [parts.query, parts.fragment].into_iter().flatten() {
        for (decoded, _, value) in pairs(query) {
            if let Some(value) = value
                && !value.is_empty()
                && looks_secret(&decoded)
                && !allowed(&percent::decode(value, true))
            {
                found.push(Credential::Parameter(decoded));
            }
        }
    }
    found
}

impl std::fmt::Display for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::UserInfo => write!(f, "user information (user:password@) is a credential"),
            Credential::Parameter(name) => {
                write!(f, "query parameter {name} looks like a credential")
            }
        }
    }
}

#[cfg(test)]
mod redactor_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_secrets_are_masked_in_every_form_and_when_cut() {
        let secret = r#"tok_live_42/x""#;
        let redactor = Redactor::new([secret.to_string(), "ab".to_string()]);
        assert_eq!(redactor.text(&format!("Bearer {secret}!")), "Bearer ****!");
        assert_eq!(redactor.text("q=tok_live_42%2Fx%22"), "q=****");
        let echoed = json!({ "h": secret }).to_string();
        assert_eq!(redactor.text(&echoed), r#"{"h":"****"}"#);
        assert_eq!(redactor.text("auth: tok_live…"), "auth: ****…");
        assert_eq!(
            redactor.text("ab tok… cd"),
            "ab tok… cd",
            "short values are kept"
        );
        assert_eq!(
            redactor.value(&json!({ secret: [format!("a {secret}"), 1] })),
            json!({"****": ["a ****", 1]})
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_names_are_recognised() {
        for name in [
            "token",
            "access_token",
            "api_key",
            "apikey",
            "key",
            "secret",
            "password",
            "passwd",
            "signature",
            "sig",
            "auth",
            "client_secret",
            "X-Api-Key",
            "X-Auth-Token",
            "Authorization",
            "Proxy-Authorization",
            "Cookie",
            "X-Goog-Signature",
            "refreshToken",
        ] {
            assert!(looks_secret(name), "{name}");
        }
        for name in [
            "idempotency_key",
            "Idempotency-Key",
            "metadata[invoice]",
            "author",
            "keyword",
            "Accept",
            "limit",
        ] {
            assert!(!looks_secret(name), "{name}");
        }
    }

    #[test]
    fn urls_lose_user_information_and_credential_values() {
        assert_eq!(
            redact_url("http://user:SUPERSECRET6@127.0.0.1:18080/v1/x?idempotency_key=k"),
            "http://****@127.0.0.1:18080/v1/x?idempotency_key=k"
        );
        assert_eq!(
            redact_url("https://TOKEN@example.com"),
            "https://****@example.com"
        );
        assert_eq!(
            redact_url("https://h/p?a=1&api_key=abc&access%5Ftoken=x&token=&b#sig=s"),
            "https://h/p?a=1&api_key=****&access%5Ftoken=****&token=&b#sig=****"
        );
        // An @ in the path is not user information.
        assert_eq!(redact_url("http://h/a@b"), "http://h/a@b");
        assert_eq!(redact_url("/v1/x?secret=s"), "/v1/x?secret=****");
        assert_eq!(redact_url("not a url"), "not a url");
        assert_eq!(
            redact_url_also("http://h/?q=v&w=1", &|name| name == "q"),
            "http://h/?q=****&w=1"
        );
    }

    #[test]
    fn urls_inside_text_are_redacted() {
        assert_eq!(
            redact_urls("cannot reach \"http://u:p@h/x?token=t\" (http://h/ok): refused"),
            "cannot reach \"http://****@h/x?token=****\" (http://h/ok): refused"
        );
        assert_eq!(redact_urls("no url here"), "no url here");
    }

    #[test]
    fn credentials_written_in_a_url_are_named_never_quoted() {
        let literal = |_: &str| false;
        assert_eq!(
            url_credentials("http://user:SUPERSECRET6@127.0.0.1:18080", &literal),
            [Credential::UserInfo]
        );
        assert_eq!(
            url_credentials("https://h/hook?token=abc&team=x#sig=s", &literal),
            [
                Credential::Parameter("token".into()),
                Credential::Parameter("sig".into())
            ]
        );
        let placeholder = |value: &str| value == "{key}";
        assert!(url_credentials("/v1/x?api_key={key}", &placeholder).is_empty());
        assert!(url_credentials("https://h/x?idempotency_key=abc", &literal).is_empty());
    }
}
