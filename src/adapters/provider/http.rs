//! A provider reached over HTTP. Requests are built from templates; the
//! answer is mapped to effects by JSON pointers.
//!
//! ```toml
//! [providers.payments]
//! kind = "http"
//! base_url = "https://api.example.com"
//! timeout_ms = 5000
//! headers.Authorization = { env = "PAYMENTS_TOKEN", prefix = "Bearer " }
//! [[providers.payments.lookup]]            # tried in order: the first whose
//! path = "/v1/effects/{external_ref}"      # placeholders the effect has
//! [[providers.payments.lookup]]
//! path = "/v1/effects"
//! query = { idempotency_key = "{key}", api_key = { env = "PAYMENTS_KEY" } }
//! effects = "/data"                        # where the effect(s) are in the answer
//! [providers.payments.compensate]
//! path = "/v1/effects"
//! body = { kind = "reversal", reverses = "{external_ref}", amount_minor = "{amount_minor}" }
//! ```

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::{Client, Method, Url};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    CompensationAnswer, CompensationOutcome, EVIDENCE_CAP, EffectQuery, Lookup, ProviderEffect,
    ProviderError, ProviderStatus, bounded, compensation_outcome,
};
use crate::adapters::http_call::{self, Answer};
use crate::adapters::secrets::{
    Credential, looks_secret, redact_url, redact_url_also, url_credentials,
};
use crate::adapters::template::{self, TemplateError, Vars};
use crate::adapters::{
    ValueConfig, all_clear, default_timeout_ms, header_problems, percent, resolve_headers,
};

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpProviderConfig {
    pub base_url: String,
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub headers: BTreeMap<String, ValueConfig>,
    /// Lookup strategies, tried in order; the first one whose placeholders
    /// all have a value for the effect is used (by reference, by key, by
    /// business key…).
    #[serde(default)]
    pub lookup: Vec<RequestTemplate>,
    pub compensate: Option<RequestTemplate>,
    #[serde(default)]
    pub fields: FieldPointers,
    #[serde(default)]
    pub statuses: StatusNames,
}

#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestTemplate {
    /// GET for lookups, POST for compensations unless set.
    pub method: Option<String>,
    /// Appended to base_url; values are percent-encoded.
    pub path: String,
    /// Templates, or values taken from the environment (credentials).
    #[serde(default)]
    pub query: BTreeMap<String, ValueConfig>,
    /// A JSON body; a string that is exactly one placeholder takes the
    /// value with its type.
    pub body: Option<Value>,
    /// JSON pointer to the effect (an object) or effects (an array) in the
    /// answer; empty for the whole answer.
    #[serde(default)]
    pub effects: String,
    /// Statuses meaning "no such effect" for a lookup.
    #[serde(default = "default_absent_statuses")]
    pub absent_statuses: Vec<u16>,
}

/// JSON pointers, relative to one effect in the answer.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FieldPointers {
    pub id: String,
    pub status: String,
    pub amount_minor: String,
    pub currency: String,
    pub idempotency_key: String,
    pub metadata: String,
}

impl Default for FieldPointers {
    fn default() -> Self {
        FieldPointers {
            id: "/id".into(),
            status: "/status".into(),
            amount_minor: "/amount_minor".into(),
            currency: "/currency".into(),
            idempotency_key: "/idempotency_key".into(),
            metadata: "/metadata".into(),
        }
    }
}

/// The provider's words for final statuses (compared case-insensitively);
/// any other status is pending.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StatusNames {
    pub succeeded: Vec<String>,
    pub failed: Vec<String>,
}

impl Default for StatusNames {
    fn default() -> Self {
        StatusNames {
            succeeded: vec!["succeeded".into()],
            failed: vec!["failed".into(), "canceled".into(), "cancelled".into()],
        }
    }
}

fn default_absent_statuses() -> Vec<u16> {
    vec![404]
}

#[derive(Debug, Clone)]
pub struct HttpProvider {
    name: String,
    config: HttpProviderConfig,
    client: Client,
    timeout: Duration,
}

/// A rendered request. Holds resolved secrets: deliberately not Debug.
pub struct PreparedRequest {
    method: Method,
    url: Url,
    headers: Vec<(String, String)>,
    /// Query parameters whose values came from the environment.
    secret_params: Vec<String>,
    body: Option<Value>,
    effects_pointer: String,
}

impl PreparedRequest {
    /// Method and URL, for evidence: never the headers, the URL's user
    /// information, or a credential in its query.
    fn describe(&self) -> String {
        let url = redact_url_also(self.url.as_str(), &|name| {
            self.secret_params.iter().any(|secret| secret == name)
        });
        format!("{} {url}", self.method)
    }
}

/// A credential written in the file, and where it belongs instead.
fn credential_problem(credential: &Credential) -> String {
    let advice = match credential {
        Credential::UserInfo => {
            "send it in a header from the environment, headers.Authorization = { env = \"VARIABLE\" }"
                .to_string()
        }
        Credential::Parameter(name) => {
            format!("take it from the environment, query = {{ {name} = {{ env = \"VARIABLE\" }} }}")
        }
    };
    format!("{credential}: {advice}, never from the file")
}

fn pointer_problem(what: &str, pointer: &str) -> Option<String> {
    (!pointer.is_empty() && !pointer.starts_with('/'))
        .then(|| format!("{what} = {pointer:?} is not a JSON pointer (it starts with /)"))
}

fn template_problems(what: &str, request: &RequestTemplate, problems: &mut Vec<String>) {
    let mut problem = |message: String| problems.push(format!("{what}: {message}"));
    if !request.path.is_empty() && !request.path.starts_with('/') {
        problem(format!(
            "path {:?} must start with /",
            redact_url(&request.path)
        ));
    }
    if let Err(error) = template::check(&request.path) {
        problem(error.to_string());
    }
    for credential in url_credentials(&request.path, &template::is_only_placeholders) {
        problem(format!("path: {}", credential_problem(&credential)));
    }
    for (name, value) in &request.query {
        let ValueConfig::Literal(text) = value else {
            continue;
        };
        if let Err(error) = template::check(text) {
            problem(error.to_string());
        } else if looks_secret(name) && !text.is_empty() && !template::is_only_placeholders(text) {
            problem(credential_problem(&Credential::Parameter(name.clone())));
        }
    }
    if let Some(Err(error)) = request.body.as_ref().map(template::check_json) {
        problem(error.to_string());
    }
    if let Some(method) = &request.method
        && Method::from_bytes(method.to_ascii_uppercase().as_bytes()).is_err()
    {
        problem(format!("{method:?} is not an HTTP method"));
    }
    if let Some(message) = pointer_problem("effects", &request.effects) {
        problem(message);
    }
}

/// Everything wrong with a provider's configuration, one line each.
pub fn problems(config: &HttpProviderConfig) -> Vec<String> {
    let mut problems = Vec::new();
    let shown = redact_url(&config.base_url);
    match Url::parse(&config.base_url) {
        Err(error) => problems.push(format!("base_url {shown:?}: {error}")),
        Ok(base) if !matches!(base.scheme(), "http" | "https") => {
            problems.push(format!("base_url {shown:?} is not http(s)"));
        }
        Ok(_) => {}
    }
    for credential in url_credentials(&config.base_url, &|_| false) {
        problems.push(format!("base_url: {}", credential_problem(&credential)));
    }
    problems.extend(header_problems(&config.headers));
    for (index, request) in config.lookup.iter().enumerate() {
        template_problems(&format!("lookup[{index}]"), request, &mut problems);
    }
    if let Some(request) = &config.compensate {
        template_problems("compensate", request, &mut problems);
    }
    let fields = &config.fields;
    for (what, pointer) in [
        ("fields.id", &fields.id),
        ("fields.status", &fields.status),
        ("fields.amount_minor", &fields.amount_minor),
        ("fields.currency", &fields.currency),
        ("fields.idempotency_key", &fields.idempotency_key),
        ("fields.metadata", &fields.metadata),
    ] {
        problems.extend(pointer_problem(what, pointer));
    }
    if config.timeout_ms == 0 {
        problems.push("timeout_ms must be above 0".into());
    }
    problems
}

impl HttpProvider {
    pub fn build(name: &str, config: &HttpProviderConfig) -> Result<HttpProvider, ProviderError> {
        let problem =
            |message: String| ProviderError::Config(format!("provider {name}: {message}"));
        all_clear(problems(config)).map_err(problem)?;
        let timeout = Duration::from_millis(config.timeout_ms);
        let client = http_call::client(timeout).map_err(problem)?;
        Ok(HttpProvider {
            name: name.to_string(),
            config: config.clone(),
            client,
            timeout,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    fn render(
        &self,
        request: &RequestTemplate,
        vars: &Vars,
        default_method: Method,
    ) -> Result<PreparedRequest, TemplateError> {
        let path = template::render_text(&request.path, vars, percent::encode)?;
        // Values from the environment are added with the headers, just before sending.
        let mut query = Vec::new();
        for (name, value) in &request.query {
            if let ValueConfig::Literal(text) = value {
                query.push((
                    name.clone(),
                    template::render_text(text, vars, |s| s.to_string())?,
                ));
            }
        }
        let body = request
            .body
            .as_ref()
            .map(|body| template::render_json(body, vars))
            .transpose()?;
        let joined = format!("{}{}", self.config.base_url.trim_end_matches('/'), path);
        let mut url =
            Url::parse(&joined).map_err(|_| TemplateError::Syntax(redact_url(&joined)))?;
        if !query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (name, value) in &query {
                pairs.append_pair(name, value);
            }
        }
        let method = match &request.method {
            Some(method) => {
                Method::from_bytes(method.to_ascii_uppercase().as_bytes()).unwrap_or(default_method)
            }
            None => default_method,
        };
        Ok(PreparedRequest {
            method,
            url,
            headers: Vec::new(),
            secret_params: Vec::new(),
            body,
            effects_pointer: request.effects.clone(),
        })
    }

    /// Adds what comes from the environment: the headers, and the query
    /// values of `request`.
    fn with_secrets(
        &self,
        request: &RequestTemplate,
        mut prepared: PreparedRequest,
    ) -> Result<PreparedRequest, ProviderError> {
        let problem =
            |message: String| ProviderError::Config(format!("provider {}: {message}", self.name));
        prepared.headers = resolve_headers(&self.config.headers).map_err(problem)?;
        for (name, value) in &request.query {
            if let ValueConfig::Env { .. } = value {
                let text = value
                    .resolve(&format!("query parameter {name}"))
                    .map_err(problem)?;
                prepared.url.query_pairs_mut().append_pair(name, &text);
                prepared.secret_params.push(name.clone());
            }
        }
        Ok(prepared)
    }

    pub async fn lookup(&self, query: &EffectQuery) -> Result<Lookup, ProviderError> {
        let vars = query.vars(None);
        let mut lacking = Vec::new();
        for (index, request) in self.config.lookup.iter().enumerate() {
            let prepared = match self.render(request, &vars, Method::GET) {
                Ok(prepared) => prepared,
                Err(TemplateError::Missing(name)) => {
                    lacking.push(name);
                    continue;
                }
                Err(error) => {
                    return Err(ProviderError::Config(format!(
                        "provider {} lookup[{index}]: {error}",
                        self.name
                    )));
                }
            };
            let prepared = self.with_secrets(request, prepared)?;
            return self.run_lookup(index, request, prepared).await;
        }
        Err(ProviderError::Config(if self.config.lookup.is_empty() {
            format!(
                "provider {} has no lookup configured ([[providers.{}.lookup]])",
                self.name, self.name
            )
        } else {
            format!(
                "no lookup of provider {} applies: the effect has no value for {}",
                self.name,
                lacking
                    .iter()
                    .map(|name| format!("{{{name}}}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }))
    }

    async fn run_lookup(
        &self,
        index: usize,
        request: &RequestTemplate,
        prepared: PreparedRequest,
    ) -> Result<Lookup, ProviderError> {
        let described = prepared.describe();
        let answer = http_call::send(
            &self.client,
            prepared.method.clone(),
            prepared.url.clone(),
            &prepared.headers,
            prepared.body.as_ref(),
            self.timeout,
        )
        .await
        .map_err(ProviderError::Call)?;
        let evidence = |answer_value: Value| {
            json!({
                "provider": self.name,
                "strategy": index,
                "request": described,
                "status": answer.status,
                "answer": bounded(answer_value, EVIDENCE_CAP),
            })
        };
        if request.absent_statuses.contains(&answer.status) {
            return Ok(Lookup {
                effects: Vec::new(),
                evidence: evidence(json!(answer.excerpt())),
            });
        }
        check_status(&answer)?;
        let body = parse_json(&answer)?;
        let found = body.pointer(&prepared.effects_pointer).ok_or_else(|| {
            ProviderError::Unparseable(format!(
                "nothing at {:?} in the answer",
                prepared.effects_pointer
            ))
        })?;
        let effects = self.map_effects(found)?;
        Ok(Lookup {
            effects,
            evidence: evidence(found.clone()),
        })
    }

    fn map_effects(&self, found: &Value) -> Result<Vec<ProviderEffect>, ProviderError> {
        match found {
            Value::Array(items) => items.iter().map(|item| self.map_effect(item)).collect(),
            Value::Object(_) => Ok(vec![self.map_effect(found)?]),
            Value::Null => Ok(Vec::new()),
            other => Err(ProviderError::Unparseable(format!(
                "expected an effect or a list of effects, got {}",
                kind_of(other)
            ))),
        }
    }

    fn map_effect(&self, item: &Value) -> Result<ProviderEffect, ProviderError> {
        let fields = &self.config.fields;
        let text_at = |pointer: &str| -> Option<String> {
            match item.pointer(pointer)? {
                Value::String(text) => Some(text.clone()),
                Value::Number(number) => Some(number.to_string()),
                _ => None,
            }
        };
        let id = text_at(&fields.id).ok_or_else(|| {
            ProviderError::Unparseable(format!("an effect without an id at {:?}", fields.id))
        })?;
        let raw_status = text_at(&fields.status).ok_or_else(|| {
            ProviderError::Unparseable(format!("effect {id} has no status at {:?}", fields.status))
        })?;
        let said = raw_status.to_lowercase();
        let status = if self
            .config
            .statuses
            .succeeded
            .iter()
            .any(|s| s.to_lowercase() == said)
        {
            ProviderStatus::Succeeded
        } else if self
            .config
            .statuses
            .failed
            .iter()
            .any(|s| s.to_lowercase() == said)
        {
            ProviderStatus::Failed
        } else {
            ProviderStatus::Pending
        };
        let amount_minor = match item.pointer(&fields.amount_minor) {
            Some(Value::Number(number)) => number.as_i64(),
            Some(Value::String(text)) => text.trim().parse().ok(),
            _ => None,
        };
        Ok(ProviderEffect {
            id,
            status,
            raw_status: Some(raw_status),
            amount_minor,
            currency: text_at(&fields.currency).map(|c| c.to_uppercase()),
            idempotency_key: text_at(&fields.idempotency_key),
            metadata: item
                .pointer(&fields.metadata)
                .filter(|m| !m.is_null())
                .cloned(),
        })
    }

    pub fn prepare_compensation(
        &self,
        original: &EffectQuery,
        compensation_key: &str,
    ) -> Result<PreparedRequest, ProviderError> {
        let request = self.config.compensate.as_ref().ok_or_else(|| {
            ProviderError::Config(format!(
                "provider {} has no compensation request configured ([providers.{}.compensate])",
                self.name, self.name
            ))
        })?;
        let vars = original.vars(Some(compensation_key));
        let prepared = self.render(request, &vars, Method::POST).map_err(|error| {
            ProviderError::Config(format!("provider {} compensate: {error}", self.name))
        })?;
        let mut prepared = self.with_secrets(request, prepared)?;
        // The provider deduplicates on it: a retried compensation is the same one.
        prepared
            .headers
            .retain(|(name, _)| !name.eq_ignore_ascii_case("idempotency-key"));
        prepared
            .headers
            .push(("Idempotency-Key".to_string(), compensation_key.to_string()));
        Ok(prepared)
    }

    pub async fn compensate(&self, prepared: PreparedRequest) -> CompensationAnswer {
        let described = prepared.describe();
        let sent = http_call::send(
            &self.client,
            prepared.method.clone(),
            prepared.url.clone(),
            &prepared.headers,
            prepared.body.as_ref(),
            self.timeout,
        )
        .await;
        let answer = match sent {
            Ok(answer) => answer,
            Err(error) => {
                return CompensationAnswer {
                    outcome: CompensationOutcome::Unknown {
                        reason: error.to_string(),
                    },
                    evidence: json!({ "provider": self.name, "request": described,
                                      "error": error.kind(), "message": error.to_string() }),
                };
            }
        };
        let evidence = |answer_value: Value| {
            json!({ "provider": self.name, "request": described, "status": answer.status,
                    "answer": bounded(answer_value, EVIDENCE_CAP) })
        };
        if let Err(error) = check_status(&answer) {
            let outcome = match error {
                ProviderError::Refused { .. } => CompensationOutcome::Failed {
                    reason: format!("the provider {error}"),
                    retryable: false,
                },
                other => CompensationOutcome::Unknown {
                    reason: other.to_string(),
                },
            };
            return CompensationAnswer {
                outcome,
                evidence: evidence(json!(answer.excerpt())),
            };
        }
        let mapped = parse_json(&answer).and_then(|body| {
            let found = body
                .pointer(&prepared.effects_pointer)
                .cloned()
                .unwrap_or(Value::Null);
            let effects = self.map_effects(&found)?;
            Ok((found, effects))
        });
        match mapped {
            Ok((found, effects)) => match effects.first() {
                Some(effect) => CompensationAnswer {
                    outcome: compensation_outcome(effect),
                    evidence: evidence(found),
                },
                None => CompensationAnswer {
                    outcome: CompensationOutcome::Unknown {
                        reason: "the provider answered without an effect".into(),
                    },
                    evidence: evidence(found),
                },
            },
            Err(error) => CompensationAnswer {
                outcome: CompensationOutcome::Unknown {
                    reason: error.to_string(),
                },
                evidence: evidence(json!(answer.excerpt())),
            },
        }
    }
}

/// 5xx and the "try later" statuses leave the outcome open; other 4xx are
/// a refusal.
fn check_status(answer: &Answer) -> Result<(), ProviderError> {
    match answer.status {
        200..=299 => Ok(()),
        408 | 409 | 425 | 429 | 500..=599 => Err(ProviderError::Server {
            status: answer.status,
            excerpt: answer.excerpt(),
        }),
        status => Err(ProviderError::Refused {
            status,
            excerpt: answer.excerpt(),
        }),
    }
}

fn parse_json(answer: &Answer) -> Result<Value, ProviderError> {
    if answer.truncated {
        return Err(ProviderError::Unparseable(
            "the answer is larger than 1 MiB".into(),
        ));
    }
    serde_json::from_slice(&answer.body).map_err(|error| {
        ProviderError::Unparseable(format!("not JSON ({error}): {}", answer.excerpt()))
    })
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(extra: &str) -> HttpProvider {
        let text = format!(
            "base_url = \"http://127.0.0.1:9/api/\"\n\
             [[lookup]]\npath = \"/v1/effects/{{external_ref}}\"\n\
             [[lookup]]\npath = \"/v1/effects\"\nquery = {{ idempotency_key = \"{{key}}\" }}\neffects = \"/data\"\n\
             [compensate]\npath = \"/v1/effects\"\nbody = {{ amount = \"{{amount_minor}}\", note = \"{{key}}\" }}\n{extra}"
        );
        let config: HttpProviderConfig = toml::from_str(&text).unwrap();
        HttpProvider::build("pay", &config).unwrap()
    }

    fn query() -> EffectQuery {
        EffectQuery {
            op_key: "refund:a b".into(),
            action: "refund".into(),
            target: "invoice:1".into(),
            params: json!({}),
            amount_minor: Some(1500),
            currency: Some("EUR".into()),
            external_ref: None,
            provider: Some("pay".into()),
        }
    }

    #[test]
    fn the_first_applicable_strategy_is_rendered() {
        let provider = provider("");
        let vars = query().vars(None);
        let first = provider.render(&provider.config.lookup[0], &vars, Method::GET);
        assert!(matches!(first, Err(TemplateError::Missing(_))));
        let second = provider
            .render(&provider.config.lookup[1], &vars, Method::GET)
            .unwrap();
        assert_eq!(
            second.url.as_str(),
            "http://127.0.0.1:9/api/v1/effects?idempotency_key=refund%3Aa+b"
        );
    }

    #[test]
    fn compensation_carries_its_key_and_typed_body() {
        let prepared = provider("")
            .prepare_compensation(&query(), "compensate:refund:a b:1")
            .unwrap();
        assert_eq!(prepared.method, Method::POST);
        assert_eq!(
            prepared.body,
            Some(json!({"amount": 1500, "note": "refund:a b"}))
        );
        assert!(prepared.headers.contains(&(
            "Idempotency-Key".to_string(),
            "compensate:refund:a b:1".to_string()
        )));
    }

    #[test]
    fn statuses_and_fields_map_by_pointer() {
        let provider = provider("[statuses]\nsucceeded = [\"PAID\"]\n");
        let effects = provider
            .map_effects(&json!([
                {"id": 7, "status": "paid", "amount_minor": "1500", "currency": "eur"},
                {"id": "x", "status": "processing"}
            ]))
            .unwrap();
        assert_eq!(effects[0].id, "7");
        assert_eq!(effects[0].status, ProviderStatus::Succeeded);
        assert_eq!(effects[0].amount_minor, Some(1500));
        assert_eq!(effects[0].currency.as_deref(), Some("EUR"));
        assert_eq!(effects[1].status, ProviderStatus::Pending);
        assert!(provider.map_effects(&json!([{"status": "paid"}])).is_err());
        assert!(provider.map_effects(&json!("text")).is_err());
    }

    #[test]
    fn described_requests_never_carry_credentials() {
        let prepared = PreparedRequest {
            method: Method::GET,
            url: Url::parse(
                "http://user:SUPERSECRET6@127.0.0.1:18080/v1/effects?idempotency_key=k&token=t0k&q=from-env",
            )
            .unwrap(),
            headers: vec![("Authorization".into(), "Bearer b".into())],
            secret_params: vec!["q".into()],
            body: None,
            effects_pointer: String::new(),
        };
        assert_eq!(
            prepared.describe(),
            "GET http://****@127.0.0.1:18080/v1/effects?idempotency_key=k&token=****&q=****"
        );
    }

    #[test]
    fn query_values_from_the_environment_are_added_and_masked() {
        let provider = provider(
            "[[lookup]]\npath = \"/v1/search\"\nquery = { k = \"{key}\", q = { env = \"PATH\" } }\n",
        );
        let request = &provider.config.lookup[2];
        let vars = query().vars(None);
        let rendered = provider.render(request, &vars, Method::GET).unwrap();
        let prepared = provider.with_secrets(request, rendered).unwrap();
        let path = std::env::var("PATH").unwrap();
        assert!(
            prepared
                .url
                .query_pairs()
                .any(|(name, value)| name == "q" && value == path),
            "{}",
            prepared.url
        );
        assert!(
            prepared.describe().ends_with("?k=refund%3Aa+b&q=****"),
            "{}",
            prepared.describe()
        );

        let unset = provider_with_query("{ q = { env = \"EFFECTWATCH_TEST_SURELY_UNSET\" } }");
        let rendered = unset
            .render(&unset.config.lookup[0], &vars, Method::GET)
            .unwrap();
        let error = unset
            .with_secrets(&unset.config.lookup[0], rendered)
            .err()
            .unwrap()
            .to_string();
        assert!(
            error.contains("EFFECTWATCH_TEST_SURELY_UNSET") && error.contains("query parameter q"),
            "{error}"
        );
    }

    fn provider_with_query(query: &str) -> HttpProvider {
        let text = format!(
            "base_url = \"http://127.0.0.1:9\"\n[[lookup]]\npath = \"/x\"\nquery = {query}\n"
        );
        HttpProvider::build("pay", &toml::from_str(&text).unwrap()).unwrap()
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let config: HttpProviderConfig = toml::from_str(
            "base_url = \"http://u:SUPERSECRET6@x\"\nheaders.Cookie = \"c=1\"\n\
             [[lookup]]\npath = \"/{nosuch}\"\nquery = { token = \"abc\" }\n",
        )
        .unwrap();
        let problems = problems(&config);
        assert_eq!(problems.len(), 4, "{problems:?}");
        let error = HttpProvider::build("pay", &config).unwrap_err().to_string();
        assert!(
            error.starts_with("provider pay: base_url: user information (user:password@)"),
            "{error}"
        );
        assert!(
            !error.contains("SUPERSECRET6") && !error.contains("abc"),
            "{error}"
        );
    }

    #[test]
    fn bad_configs_are_refused_with_the_field() {
        let config: HttpProviderConfig = toml::from_str("base_url = \"ftp://x\"\n").unwrap();
        let error = HttpProvider::build("pay", &config).unwrap_err().to_string();
        assert!(error.contains("base_url"), "{error}");
        let config: HttpProviderConfig =
            toml::from_str("base_url = \"http://x\"\n[[lookup]]\npath = \"/{secret}\"\n").unwrap();
        let error = HttpProvider::build("pay", &config).unwrap_err().to_string();
        assert!(
            error.contains("lookup[0]") && error.contains("secret"),
            "{error}"
        );
    }
}
