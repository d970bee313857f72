//! A fake provider for the tests and the demo: payments-like effects over
//! HTTP on 127.0.0.1, with faults switchable per request or globally, and
//! counters so a test can assert "exactly one compensation request".
//!
//! Routes:
//! - `POST /v1/effects` (JSON `{kind, amount_minor, currency, target,
//!   metadata, reverses}`, header `Idempotency-Key`): creates an effect, or
//!   returns the one created under that key before.
//! - `GET /v1/effects/{id}`: one effect, or 404.
//! - `GET /v1/effects?idempotency_key=…&target=…&kind=…&metadata.NAME=…`:
//!   `{"data": [...]}`.
//! - `POST /hooks/{name}`, `POST /v2/enqueue`: an escalation sink.
//!
//! Faults: [`FakeProvider::fail_next`] (once), [`FakeProvider::set_fault`]
//! (until cleared), or an `X-Fake-Fault` request header (`hang`,
//! `apply-then-hang`, `reset`, `apply-then-reset`, `503`, `apply-then-503`,
//! `slow=200`, `late=500`, `duplicate`, `malformed`).

mod server;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// Which requests a fault applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Route {
    /// `POST /v1/effects`: charges, refunds, reversals (compensations).
    Create,
    /// `GET /v1/effects…`: what reconciliation asks.
    Lookup,
    /// `POST /hooks/…` and `POST /v2/enqueue`: escalation deliveries.
    Hook,
    Any,
}

/// What goes wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Never answers (until the hang limit), applies nothing.
    Hang,
    /// Applies the effect, then never answers: the client times out on a
    /// request that succeeded.
    ApplyThenHang,
    /// Resets the connection before applying anything.
    Reset,
    /// Applies the effect, then resets the connection.
    ApplyThenReset,
    /// Answers with this status, applies nothing.
    Status(u16),
    /// Applies the effect, then answers with this status.
    ApplyThenStatus(u16),
    /// Applies and answers after this delay.
    Slow(Duration),
    /// Accepts the effect as pending; it succeeds this long after.
    LateSuccess(Duration),
    /// Applies the effect twice on the provider's side.
    Duplicate,
    /// Answers 200 with a body that is not JSON.
    Malformed,
    /// Answers with this status and a body that echoes the request's
    /// headers, query and body, credentials included, as a careless
    /// provider's error page does; applies nothing.
    Echo(u16),
}

impl Fault {
    /// Parses the `X-Fake-Fault` header.
    pub fn parse(text: &str) -> Option<Fault> {
        let text = text.trim();
        let millis = |value: &str| value.parse::<u64>().ok().map(Duration::from_millis);
        Some(match text {
            "hang" => Fault::Hang,
            "apply-then-hang" => Fault::ApplyThenHang,
            "reset" => Fault::Reset,
            "apply-then-reset" => Fault::ApplyThenReset,
            "duplicate" => Fault::Duplicate,
            "malformed" => Fault::Malformed,
            _ => {
                if let Some(value) = text.strip_prefix("slow=") {
                    Fault::Slow(millis(value)?)
                } else if let Some(value) = text.strip_prefix("echo=") {
                    Fault::Echo(value.parse().ok()?)
                } else if let Some(value) = text.strip_prefix("late=") {
                    Fault::LateSuccess(millis(value)?)
                } else if let Some(value) = text.strip_prefix("apply-then-") {
                    Fault::ApplyThenStatus(value.parse().ok()?)
                } else {
                    Fault::Status(text.parse().ok()?)
                }
            }
        })
    }
}

/// An effect as the fake provider holds it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct FakeEffect {
    pub id: String,
    pub kind: String,
    pub status: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub target: Option<String>,
    pub idempotency_key: Option<String>,
    pub metadata: Value,
    pub reverses: Option<String>,
    #[serde(skip)]
    ready_at: Option<Instant>,
}

impl FakeEffect {
    /// The status as a client sees it now (a late success turns over).
    fn seen(&self) -> FakeEffect {
        let mut effect = self.clone();
        if let Some(ready_at) = self.ready_at
            && Instant::now() < ready_at
        {
            effect.status = "pending".into();
        }
        effect
    }

    fn to_json(&self) -> Value {
        serde_json::to_value(self.seen()).unwrap_or(Value::Null)
    }
}

/// What a test seeds: an effect the provider performed.
#[derive(Debug, Clone, Default)]
pub struct NewEffect {
    pub kind: String,
    pub amount_minor: Option<i64>,
    pub currency: Option<String>,
    pub target: Option<String>,
    pub idempotency_key: Option<String>,
    pub metadata: Value,
    pub reverses: Option<String>,
}

/// One escalation the sink routes accepted.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HookDelivery {
    pub path: String,
    pub idempotency_key: Option<String>,
    pub body: Value,
}

#[derive(Debug, Default)]
struct State {
    effects: Vec<FakeEffect>,
    next_id: u64,
    once: VecDeque<(Route, Fault)>,
    always: HashMap<Route, Fault>,
    requests: HashMap<Route, u64>,
    by_key: HashMap<String, u64>,
    hooks: Vec<HookDelivery>,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    hang_limit: Mutex<Duration>,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        // A panicking test thread must not take the fake down with it.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A running fake provider; stops when dropped.
pub struct FakeProvider {
    shared: Arc<Shared>,
    address: SocketAddr,
    shutdown: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl FakeProvider {
    /// Starts on 127.0.0.1 and a free port; returns the handle and its base URL.
    pub async fn start() -> std::io::Result<(FakeProvider, String)> {
        Self::start_on(SocketAddr::from(([127, 0, 0, 1], 0))).await
    }

    pub async fn start_on(address: SocketAddr) -> std::io::Result<(FakeProvider, String)> {
        let listener = TcpListener::bind(address).await?;
        let address = listener.local_addr()?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            hang_limit: Mutex::new(Duration::from_secs(30)),
        });
        let (shutdown, watcher) = watch::channel(false);
        let task = tokio::spawn(server::serve(listener, shared.clone(), watcher));
        let fake = FakeProvider {
            shared,
            address,
            shutdown,
            task,
        };
        let url = fake.base_url();
        Ok((fake, url))
    }

    pub fn base_url(&self) -> String {
        format!("http://{}", self.address)
    }

    /// The next request on `route` suffers `fault`; queued faults apply in order.
    pub fn fail_next(&self, route: Route, fault: Fault) {
        self.shared.state().once.push_back((route, fault));
    }

    /// Every request on `route` suffers `fault` until cleared with `None`.
    pub fn set_fault(&self, route: Route, fault: Option<Fault>) {
        let mut state = self.shared.state();
        match fault {
            Some(fault) => state.always.insert(route, fault),
            None => state.always.remove(&route),
        };
    }

    /// How long a hanging request is held before the connection is closed.
    pub fn set_hang_limit(&self, limit: Duration) {
        *self
            .shared
            .hang_limit
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner()) = limit;
    }

    /// Requests received on a route (faulted ones included).
    pub fn requests(&self, route: Route) -> u64 {
        let state = self.shared.state();
        match route {
            Route::Any => state.requests.values().sum(),
            route => state.requests.get(&route).copied().unwrap_or(0),
        }
    }

    /// Create requests received with this Idempotency-Key.
    pub fn requests_with_key(&self, key: &str) -> u64 {
        self.shared.state().by_key.get(key).copied().unwrap_or(0)
    }

    pub fn effects(&self) -> Vec<FakeEffect> {
        self.shared
            .state()
            .effects
            .iter()
            .map(FakeEffect::seen)
            .collect()
    }

    /// Puts back effects saved from an earlier run (the demo resumes its
    /// ledger, so its provider must remember what it did); new ids continue
    /// after the highest restored one.
    pub fn restore(&self, effects: Vec<FakeEffect>) {
        let mut state = self.shared.state();
        let highest = effects
            .iter()
            .filter_map(|effect| effect.id.strip_prefix("fx_")?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        state.next_id = state.next_id.max(highest);
        state.effects = effects;
    }

    /// Effects reversing the one with this id.
    pub fn reversals_of(&self, id: &str) -> Vec<FakeEffect> {
        self.effects()
            .into_iter()
            .filter(|e| e.reverses.as_deref() == Some(id))
            .collect()
    }

    /// Records an effect as if a client had created it (the agent's call).
    pub fn insert_effect(&self, new: NewEffect) -> FakeEffect {
        self.shared.state().apply(new, None)
    }

    pub fn hooks(&self) -> Vec<HookDelivery> {
        self.shared.state().hooks.clone()
    }

    /// The `[providers.NAME]` section that talks to this fake: lookup by
    /// reference, else by key, else by target; compensation by reversal.
    pub fn provider_toml(&self, name: &str, timeout_ms: u64) -> String {
        provider_toml(name, &self.base_url(), timeout_ms)
    }
}

impl Drop for FakeProvider {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
        self.task.abort();
    }
}

/// See [`FakeProvider::provider_toml`]; usable with any base URL.
pub fn provider_toml(name: &str, base_url: &str, timeout_ms: u64) -> String {
    format!(
        r#"[providers.{name}]
kind = "http"
base_url = "{base_url}"
timeout_ms = {timeout_ms}

[[providers.{name}.lookup]]
path = "/v1/effects/{{external_ref}}"

[[providers.{name}.lookup]]
path = "/v1/effects"
query = {{ idempotency_key = "{{key}}" }}
effects = "/data"

[providers.{name}.compensate]
path = "/v1/effects"
body = {{ kind = "reversal", reverses = "{{external_ref}}", amount_minor = "{{amount_minor}}", currency = "{{currency}}", target = "{{target}}", metadata = {{ op_key = "{{compensation_key}}", compensates = "{{key}}" }} }}
"#
    )
}

impl State {
    fn count(&mut self, route: Route) {
        *self.requests.entry(route).or_default() += 1;
    }

    /// The fault for this request: its header, else a queued one, else a standing one.
    fn fault_for(&mut self, route: Route, header: Option<&str>) -> Option<Fault> {
        if let Some(fault) = header.and_then(Fault::parse) {
            return Some(fault);
        }
        if let Some(index) = self
            .once
            .iter()
            .position(|(r, _)| *r == route || *r == Route::Any)
        {
            return self.once.remove(index).map(|(_, fault)| fault);
        }
        self.always
            .get(&route)
            .or_else(|| self.always.get(&Route::Any))
            .copied()
    }

    fn apply(&mut self, new: NewEffect, late: Option<Duration>) -> FakeEffect {
        self.next_id += 1;
        let effect = FakeEffect {
            id: format!("fx_{}", self.next_id),
            kind: if new.kind.is_empty() {
                "charge".into()
            } else {
                new.kind
            },
            status: "succeeded".into(),
            amount_minor: new.amount_minor,
            currency: new.currency.map(|c| c.to_uppercase()),
            target: new.target,
            idempotency_key: new.idempotency_key,
            metadata: if new.metadata.is_null() {
                json!({})
            } else {
                new.metadata
            },
            reverses: new.reverses,
            ready_at: late.map(|delay| Instant::now() + delay),
        };
        self.effects.push(effect.clone());
        effect
    }
}

/// What the server does with a request.
pub(crate) enum Reply {
    Respond {
        status: u16,
        body: String,
        delay: Duration,
    },
    Hang,
    Reset,
}

impl Reply {
    fn json(status: u16, body: Value) -> Reply {
        Reply::Respond {
            status,
            body: body.to_string(),
            delay: Duration::ZERO,
        }
    }
}

pub(crate) struct Request {
    pub method: String,
    pub path: String,
    pub query: Vec<(String, String)>,
    pub headers: BTreeMap<String, String>,
    pub body: Vec<u8>,
}

impl Shared {
    fn hang_limit(&self) -> Duration {
        *self
            .hang_limit
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub(crate) fn handle(&self, request: &Request) -> Reply {
        let fault_header = request.headers.get("x-fake-fault").map(String::as_str);
        let path = request.path.trim_end_matches('/');
        match (request.method.as_str(), path) {
            ("POST", "/v1/effects") => self.create(request, fault_header),
            ("GET", "/v1/effects") => self.lookup(request, fault_header, |state| {
                let found: Vec<Value> = state
                    .effects
                    .iter()
                    .filter(|effect| matches_query(effect, &request.query))
                    .map(FakeEffect::to_json)
                    .collect();
                Reply::json(200, json!({ "data": found }))
            }),
            ("GET", path) if path.starts_with("/v1/effects/") => {
                let id = crate::adapters::percent::decode(&path["/v1/effects/".len()..], false);
                self.lookup(request, fault_header, |state| {
                    match state.effects.iter().find(|effect| effect.id == id) {
                        Some(effect) => Reply::json(200, effect.to_json()),
                        None => Reply::json(404, json!({ "error": "no such effect" })),
                    }
                })
            }
            ("POST", path) if path.starts_with("/hooks/") || path == "/v2/enqueue" => {
                self.hook(request, fault_header)
            }
            _ => Reply::json(404, json!({ "error": "no such route" })),
        }
    }

    fn create(&self, request: &Request, fault_header: Option<&str>) -> Reply {
        let mut state = self.state();
        state.count(Route::Create);
        let key = request.headers.get("idempotency-key").cloned();
        if let Some(key) = &key {
            *state.by_key.entry(key.clone()).or_default() += 1;
        }
        let fault = state.fault_for(Route::Create, fault_header);
        match fault {
            Some(Fault::Hang) => return Reply::Hang,
            Some(Fault::Reset) => return Reply::Reset,
            Some(Fault::Status(status)) => {
                return Reply::json(status, json!({ "error": "injected failure" }));
            }
            Some(Fault::Echo(status)) => return echo(status, request),
            _ => {}
        }
        let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
            return Reply::json(400, json!({ "error": "the body is not JSON" }));
        };
        let text = |name: &str| body.get(name).and_then(Value::as_str).map(str::to_string);
        let reverses = text("reverses");
        if let Some(id) = &reverses
            && !state.effects.iter().any(|effect| &effect.id == id)
        {
            return Reply::json(
                422,
                json!({ "error": format!("no effect {id} to reverse") }),
            );
        }
        let existing = key.as_ref().and_then(|key| {
            state
                .effects
                .iter()
                .find(|effect| effect.idempotency_key.as_ref() == Some(key))
                .cloned()
        });
        let (effect, created) = match existing {
            Some(effect) => (effect, false),
            None => {
                let new = NewEffect {
                    kind: text("kind").unwrap_or_default(),
                    amount_minor: body.get("amount_minor").and_then(Value::as_i64),
                    currency: text("currency"),
                    target: text("target"),
                    idempotency_key: key.clone(),
                    metadata: body.get("metadata").cloned().unwrap_or(Value::Null),
                    reverses,
                };
                let late = match fault {
                    Some(Fault::LateSuccess(delay)) => Some(delay),
                    _ => None,
                };
                let effect = state.apply(new.clone(), late);
                if fault == Some(Fault::Duplicate) {
                    state.apply(new, None);
                }
                (effect, true)
            }
        };
        let status = if created { 201 } else { 200 };
        match fault {
            Some(Fault::ApplyThenHang) => Reply::Hang,
            Some(Fault::ApplyThenReset) => Reply::Reset,
            Some(Fault::ApplyThenStatus(code)) => {
                Reply::json(code, json!({ "error": "injected failure" }))
            }
            Some(Fault::Malformed) => malformed(),
            Some(Fault::Slow(delay)) => Reply::Respond {
                status,
                body: effect.to_json().to_string(),
                delay,
            },
            Some(Fault::LateSuccess(_)) => Reply::json(202, effect.to_json()),
            _ => Reply::json(status, effect.to_json()),
        }
    }

    fn lookup(
        &self,
        request: &Request,
        fault_header: Option<&str>,
        answer: impl FnOnce(&State) -> Reply,
    ) -> Reply {
        let mut state = self.state();
        state.count(Route::Lookup);
        match state.fault_for(Route::Lookup, fault_header) {
            Some(Fault::Echo(code)) => echo(code, request),
            Some(Fault::Hang | Fault::ApplyThenHang) => Reply::Hang,
            Some(Fault::Reset | Fault::ApplyThenReset) => Reply::Reset,
            Some(Fault::Status(code) | Fault::ApplyThenStatus(code)) => {
                Reply::json(code, json!({ "error": "injected failure" }))
            }
            Some(Fault::Malformed) => malformed(),
            Some(Fault::Slow(delay)) => match answer(&state) {
                Reply::Respond { status, body, .. } => Reply::Respond {
                    status,
                    body,
                    delay,
                },
                other => other,
            },
            Some(Fault::Duplicate | Fault::LateSuccess(_)) | None => answer(&state),
        }
    }

    fn hook(&self, request: &Request, fault_header: Option<&str>) -> Reply {
        let mut state = self.state();
        state.count(Route::Hook);
        let fault = state.fault_for(Route::Hook, fault_header);
        match fault {
            Some(Fault::Hang | Fault::ApplyThenHang) => return Reply::Hang,
            Some(Fault::Reset | Fault::ApplyThenReset) => return Reply::Reset,
            Some(Fault::Status(code) | Fault::ApplyThenStatus(code)) => {
                return Reply::json(code, json!({ "error": "injected failure" }));
            }
            Some(Fault::Echo(code)) => return echo(code, request),
            _ => {}
        }
        let Ok(body) = serde_json::from_slice::<Value>(&request.body) else {
            return Reply::json(400, json!({ "error": "the body is not JSON" }));
        };
        state.hooks.push(HookDelivery {
            path: request.path.clone(),
            idempotency_key: request.headers.get("idempotency-key").cloned(),
            body: body.clone(),
        });
        let delay = match fault {
            Some(Fault::Slow(delay)) => delay,
            _ => Duration::ZERO,
        };
        let answer = if request.path == "/v2/enqueue" {
            json!({ "status": "success", "dedup_key": body.get("dedup_key") })
        } else {
            json!({ "ok": true })
        };
        Reply::Respond {
            status: if request.path == "/v2/enqueue" {
                202
            } else {
                200
            },
            body: answer.to_string(),
            delay,
        }
    }
}

fn echo(status: u16, request: &Request) -> Reply {
    Reply::json(
        status,
        json!({
            "error": "request refused",
            "you_sent": {
                "method": request.method,
                "path": request.path,
                "query": request.query,
                "headers": request.headers,
                "body": String::from_utf8_lossy(&request.body),
            }
        }),
    )
}

fn malformed() -> Reply {
    Reply::Respond {
        status: 200,
        body: "{\"data\": [ not json".into(),
        delay: Duration::ZERO,
    }
}

fn matches_query(effect: &FakeEffect, query: &[(String, String)]) -> bool {
    query.iter().all(|(name, value)| match name.as_str() {
        "idempotency_key" => effect.idempotency_key.as_deref() == Some(value.as_str()),
        "target" => effect.target.as_deref() == Some(value.as_str()),
        "kind" => effect.kind == *value,
        "reverses" => effect.reverses.as_deref() == Some(value.as_str()),
        other => match other.strip_prefix("metadata.") {
            Some(field) => {
                effect.metadata.get(field).and_then(Value::as_str) == Some(value.as_str())
            }
            None => true,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fault_headers_parse() {
        assert_eq!(Fault::parse("reset"), Some(Fault::Reset));
        assert_eq!(Fault::parse("503"), Some(Fault::Status(503)));
        assert_eq!(
            Fault::parse("apply-then-502"),
            Some(Fault::ApplyThenStatus(502))
        );
        assert_eq!(
            Fault::parse("slow=250"),
            Some(Fault::Slow(Duration::from_millis(250)))
        );
        assert_eq!(
            Fault::parse("late=10"),
            Some(Fault::LateSuccess(Duration::from_millis(10)))
        );
        assert_eq!(Fault::parse("nonsense"), None);
    }

    #[test]
    fn the_sample_provider_config_parses() {
        let config =
            crate::config::Config::from_toml(&provider_toml("pay", "http://127.0.0.1:1", 500))
                .unwrap();
        let provider = crate::adapters::provider::Provider::build("pay", &config.providers["pay"]);
        assert!(provider.is_ok());
    }
}
