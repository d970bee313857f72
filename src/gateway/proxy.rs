//! The MCP server the agent talks to. Everything but `tools/call` goes to
//! the upstream as it came; a call to a tool the policy maps goes through
//! the ledger's three calls, so that the model's retries — fresh request
//! ids, eight clients at once, a lost reply — make one provider call.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, CompleteRequestParams, CompleteResult,
    ContentBlock, GetPromptRequestParams, GetPromptResponse, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ReadResourceRequestParams, ReadResourceResponse, ResultType, ServerConfig,
};
use rmcp::service::{RequestContext, RoleServer, ServiceError};
use rmcp::{ErrorData as McpError, ServerHandler};
use serde_json::{Value, json};

use super::policy::{MappedCall, Policy, Replays, Route, ToolRule};
use super::told::{self, Told};
use super::upstream::Upstream;
use crate::ledger::writer::{self, Completion, ErrorClass, Outcome, RequesterAnswer};
use crate::ledger::{Decision, LedgerError, LedgerPool, State};

/// The `_meta` field of a forwarded call that carries its operation key.
pub const OP_KEY_META: &str = "io.effectwatch/op_key";

/// How much of a summarised result is kept for a replay to show.
const SUMMARY_CHARS: usize = 1024;

#[derive(Clone)]
pub struct Gateway {
    shared: Arc<Shared>,
}

struct Shared {
    upstream: Upstream,
    policy: Policy,
    pool: LedgerPool,
    info: ServerConfig,
    allow_unmapped: bool,
    /// How long a repeat waits for the same call in progress to answer.
    in_flight_wait: std::time::Duration,
    /// Who its effects are requested by (default: the policy's `gateway:<alias>`).
    requested_by: String,
    in_flight: InFlightCalls,
    /// Successes being recorded after their reply went.
    recording: tokio_util::task::TaskTracker,
}

impl Gateway {
    pub fn new(
        upstream: Upstream,
        policy: Policy,
        pool: LedgerPool,
        info: ServerConfig,
        allow_unmapped: bool,
    ) -> Gateway {
        Gateway {
            shared: Arc::new(Shared {
                upstream,
                pool,
                in_flight_wait: policy.upstream_timeout(),
                requested_by: policy.requested_by(),
                in_flight: InFlightCalls::default(),
                recording: tokio_util::task::TaskTracker::new(),
                info,
                allow_unmapped,
                policy,
            }),
        }
    }

    /// Waits for the successes still being recorded, then lets the
    /// upstream go.
    pub async fn close(&self) {
        self.shared.recording.close();
        self.shared.recording.wait().await;
        self.shared.upstream.close().await;
    }

    /// A repeat of a call in progress waits this long for its answer
    /// (default: the upstream's timeout). Set it before the gateway is
    /// shared: a clone keeps the wait it was made with.
    pub fn with_in_flight_wait(mut self, wait: std::time::Duration) -> Gateway {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.in_flight_wait = wait;
        }
        self
    }

    /// Records its effects as requested by `requested_by` instead of the
    /// policy's `gateway:<alias>` (certification's own name). Set it before
    /// the gateway is shared: a clone keeps the name it was made with, and
    /// [`Gateway::requested_by`] says which one holds.
    pub fn with_requested_by(mut self, requested_by: &str) -> Gateway {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.requested_by = requested_by.to_string();
        }
        self
    }

    /// Whether a call routed so could succeed: refused tools are not offered.
    fn offers(&self, route: &Route) -> bool {
        match route {
            Route::Recorded | Route::PassThrough => true,
            Route::Unmapped => self.shared.allow_unmapped,
            Route::Lookalike { .. } => false,
        }
    }

    pub fn requested_by(&self) -> &str {
        &self.shared.requested_by
    }

    pub fn policy(&self) -> &Policy {
        &self.shared.policy
    }

    pub fn pool(&self) -> &LedgerPool {
        &self.shared.pool
    }

    /// The upstream, for a caller (certification) that must reach it
    /// around the ledger.
    pub async fn upstream_peer(
        &self,
    ) -> Result<rmcp::service::Peer<rmcp::service::RoleClient>, McpError> {
        self.shared
            .upstream
            .peer(None)
            .await
            .map_err(unreachable_upstream)
    }

    /// A call to a mapped tool, through the ledger, as the gateway makes it
    /// for the MCP client named `client`. The record is finished even when
    /// the caller goes away: the provider call may already have been made.
    pub async fn record(
        &self,
        request: CallToolRequestParams,
        client: &str,
        request_id: String,
        peer: Result<rmcp::service::Peer<rmcp::service::RoleClient>, McpError>,
    ) -> Result<CallToolResult, McpError> {
        self.record_for_caller(request, client, None, request_id, peer)
            .await
    }

    /// [`Gateway::record`] for the caller `caller` names (over HTTP, the
    /// hash of its Authorization header; `None`: the anonymous caller). A
    /// repeat is answered only to the caller that made the effect, unless
    /// the policy says `replays = "tenant"`.
    pub async fn record_for_caller(
        &self,
        request: CallToolRequestParams,
        client: &str,
        caller: Option<String>,
        request_id: String,
        peer: Result<rmcp::service::Peer<rmcp::service::RoleClient>, McpError>,
    ) -> Result<CallToolResult, McpError> {
        let name = request.name.to_string();
        let Some(rule) = self.shared.policy.tools.get(&name).cloned() else {
            return Err(McpError::invalid_params(
                format!("the gateway's policy has no rule for {name:?}"),
                None,
            ));
        };
        let call = RecordedCall {
            tool: name,
            request_id,
            client: client.to_string(),
            caller: caller.filter(|_| self.shared.policy.replays == Replays::Caller),
            request,
            rule,
        };
        let shared = self.shared.clone();
        match tokio::spawn(async move { call.run(&shared, peer).await }).await {
            Ok(result) => result,
            Err(error) => Err(McpError::internal_error(
                format!("the gateway's recording task failed: {error}"),
                None,
            )),
        }
    }
}

/// The caller's authorization, over HTTP: passed to the upstream, never
/// logged or stored.
fn authorization(context: &RequestContext<RoleServer>) -> Option<String> {
    context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.headers.get(axum::http::header::AUTHORIZATION))
        .and_then(|value| value.to_str().ok())
        .map(str::to_string)
}

/// Who the caller is, over HTTP: a hash of its Authorization header
/// (SHA-256, under the gateway's own label, 128 bits of it in hex), which
/// is recorded with its effects; the header never is. `None`: no header
/// (stdio, or an HTTP caller without one) — the anonymous caller.
fn caller_of(context: &RequestContext<RoleServer>) -> Option<String> {
    let header = authorization(context)?;
    let mut labelled = b"effectwatch gateway caller\0".to_vec();
    labelled.extend_from_slice(header.as_bytes());
    let digest = aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, &labelled);
    Some(
        digest.as_ref()[..16]
            .iter()
            .map(|byte| format!("{byte:02x}"))
            .collect(),
    )
}

fn client_name(context: &RequestContext<RoleServer>) -> String {
    context
        .peer
        .peer_info()
        .map(|info| info.client_info.name.clone())
        .filter(|name| !name.trim().is_empty())
        .unwrap_or_else(|| "an MCP client".to_string())
}

fn upstream_error(error: ServiceError) -> McpError {
    match error {
        ServiceError::McpError(error) => error,
        other => McpError::internal_error(format!("the upstream tool server: {other}"), None),
    }
}

fn unreachable_upstream(message: String) -> McpError {
    McpError::internal_error(message, None)
}

impl Gateway {
    async fn peer(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> Result<rmcp::service::Peer<rmcp::service::RoleClient>, McpError> {
        self.shared
            .upstream
            .peer(authorization(context).as_deref())
            .await
            .map_err(unreachable_upstream)
    }
}

/// A request the gateway passes to the upstream as it came, on the
/// caller's connection, with the upstream's answer or error as it came.
macro_rules! relay {
    ($method:ident($params:ty) -> $answer:ty) => {
        relay!($method($params) -> $answer, via $method);
    };
    ($method:ident($params:ty) -> $answer:ty, via $peer_method:ident) => {
        async fn $method(
            &self,
            request: $params,
            context: RequestContext<RoleServer>,
        ) -> Result<$answer, McpError> {
            let peer = self.peer(&context).await?;
            peer.$peer_method(request).await.map_err(upstream_error)
        }
    };
}

impl ServerHandler for Gateway {
    fn get_info(&self) -> ServerConfig {
        self.shared.info.clone()
    }

    /// The upstream's tools less those the gateway would refuse: a model
    /// shown a tool tries it, and a refusal costs it a turn and the user a
    /// wrong plan. Start-up names each one hidden.
    async fn list_tools(
        &self,
        request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let peer = self.peer(&context).await?;
        let mut listed = peer.list_tools(request).await.map_err(upstream_error)?;
        listed
            .tools
            .retain(|tool| self.offers(&self.shared.policy.route(&tool.name)));
        // An upstream on an older protocol answers without a result type,
        // which the gateway's own client may have agreed a version that
        // requires; the SDK drops it again for a client on an older one.
        listed.result_type.get_or_insert(ResultType::COMPLETE);
        Ok(listed)
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let name = request.name.to_string();
        let request = with_client_meta(request, &context);
        match self.shared.policy.route(&name) {
            Route::PassThrough => {
                let peer = self.peer(&context).await?;
                peer.call_tool_once(request)
                    .await
                    .map(typed_response)
                    .map_err(upstream_error)
            }
            Route::Unmapped if self.shared.allow_unmapped => {
                tracing::warn!(tool = %name, "an unmapped tool that may change the world, relayed unrecorded (--allow-unmapped)");
                let peer = self.peer(&context).await?;
                peer.call_tool_once(request)
                    .await
                    .map(typed_response)
                    .map_err(upstream_error)
            }
            Route::Lookalike { of } => Ok(CallToolResponse::Complete(tool_error(format!(
                "The gateway refused \"{}\": its name looks like {of}, which the gateway records, but it is \
                 another tool. Nothing was sent. Do not retry it; call {of} if that is what you meant.",
                name.escape_default()
            )))),
            Route::Unmapped => Ok(CallToolResponse::Complete(tool_error(format!(
                "The gateway refused {name}: it may change the world and the gateway's policy gives it no operation key, \
                 so a retry could do it twice. Nothing was sent. Do not retry it; ask an operator to map it."
            )))),
            Route::Recorded => {
                let peer = self.peer(&context).await;
                let request_id = format!("mcp:{}:{}", client_name(&context), context.id);
                self.record_for_caller(
                    request,
                    &client_name(&context),
                    caller_of(&context),
                    request_id,
                    peer,
                )
                .await
                .map(|mut result| {
                    result.result_type.get_or_insert(ResultType::COMPLETE);
                    CallToolResponse::Complete(result)
                })
            }
        }
    }

    relay!(list_resources(Option<PaginatedRequestParams>) -> ListResourcesResult);
    relay!(list_resource_templates(Option<PaginatedRequestParams>) -> ListResourceTemplatesResult);
    relay!(read_resource(ReadResourceRequestParams) -> ReadResourceResponse, via read_resource_once);
    relay!(list_prompts(Option<PaginatedRequestParams>) -> ListPromptsResult);
    relay!(get_prompt(GetPromptRequestParams) -> GetPromptResponse, via get_prompt_once);
    relay!(complete(CompleteRequestParams) -> CompleteResult);
}

/// A relayed answer with the result type an older upstream leaves out.
fn typed_response(response: CallToolResponse) -> CallToolResponse {
    match response {
        CallToolResponse::Complete(mut result) => {
            result.result_type.get_or_insert(ResultType::COMPLETE);
            CallToolResponse::Complete(result)
        }
        other => other,
    }
}

/// The call with the client's own `_meta` (which the SDK hands over in the
/// context), less what belongs to this hop's session — the protocol's
/// lifecycle fields and a progress token the gateway would not relay — and
/// less any operation key of the client's: only the gateway names the key
/// a tool server is given, so a client cannot make a pass-through call
/// look recorded or lend a recorded call another key.
fn with_client_meta(
    mut request: CallToolRequestParams,
    context: &RequestContext<RoleServer>,
) -> CallToolRequestParams {
    let relayed: Vec<(String, Value)> = context
        .meta
        .0
        .0
        .iter()
        .filter(|(name, _)| is_relayed_meta(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let meta = request.meta.get_or_insert_with(Default::default);
    meta.0.0.retain(|name, _| is_relayed_meta(name));
    for (name, value) in relayed {
        meta.0.0.entry(name).or_insert(value);
    }
    if meta.0.0.is_empty() {
        request.meta = None;
    }
    request
}

fn is_relayed_meta(name: &str) -> bool {
    !name.starts_with("io.modelcontextprotocol/") && name != "progressToken" && name != OP_KEY_META
}

fn tool_error(text: String) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(text)])
}

fn text_of(result: &CallToolResult) -> String {
    result
        .content
        .iter()
        .filter_map(|block| block.as_text().map(|text| text.text.as_str()))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A mapped call, from its ledger record to the upstream and back.
struct RecordedCall {
    tool: String,
    /// The MCP client's own name for itself, shown beside the gateway's.
    client: String,
    /// The caller the gateway tells apart (see [`caller_of`]), under
    /// `replays = "caller"`; `None`: the anonymous caller, or every caller
    /// under `replays = "tenant"`.
    caller: Option<String>,
    request_id: String,
    request: CallToolRequestParams,
    rule: ToolRule,
}

impl RecordedCall {
    /// `begin_effect` for this call's caller; `None`: the key is another
    /// caller's (of this gateway, or of another login) and nothing of it
    /// may be told. Under `replays = "caller"` the ledger is asked first
    /// whether the key is the gateway's under another caller's name.
    async fn begin(
        &self,
        shared: &Shared,
        intent: &writer::Intent,
        worker: &str,
    ) -> Result<Option<writer::Begun>, LedgerError> {
        if shared.policy.replays == Replays::Tenant {
            return match writer::begin_effect(&shared.pool, intent).await {
                Ok(begun) => Ok(Some(begun)),
                Err(LedgerError::Refused(why)) if why == writer::NOT_YOURS => Ok(None),
                Err(error) => Err(error),
            };
        }
        match writer::begin_effect_as_requester(&shared.pool, intent).await? {
            RequesterAnswer::Begun(begun) => Ok(Some(begun)),
            RequesterAnswer::Refused => Ok(None),
            RequesterAnswer::RefusedReopened => {
                // Another caller's failed effect, reopened by this call
                // as it raced that caller's own: back as it was, unsent.
                let completion = Completion {
                    reason: Some(
                        "not sent: reopened by another caller's call, which was refused".into(),
                    ),
                    request_id: intent.request_id.clone(),
                    worker: Some(worker.to_string()),
                    target: Some(intent.target.clone()),
                    ..Completion::default()
                };
                writer::complete_effect(
                    &shared.pool,
                    &intent.op_key,
                    Outcome::Failed { retryable: true },
                    &completion,
                )
                .await?;
                Ok(None)
            }
        }
    }

    /// The call begun and, when the ledger lets it run, claimed, in one
    /// round trip. A repeat of a call in progress (the model asked twice,
    /// eight agents at once) waits for that call's answer and is answered
    /// as the ledger answers then, rather than with an error the model may
    /// work around.
    async fn start(
        &self,
        shared: &Shared,
        intent: &writer::Intent,
        worker: &str,
    ) -> Result<Option<writer::Started>, LedgerError> {
        let as_requester = shared.policy.replays != Replays::Tenant;
        // A repeat of a call this gateway has out (its success being
        // recorded beside the reply) waits for it first: asked meanwhile,
        // the ledger would keep the repeat as an attempt in flight, a
        // duplicate for an operator to look at.
        own_call_settled(shared, &intent.op_key).await;
        let started = writer::begin_and_dispatch(
            &shared.pool,
            intent,
            worker,
            as_requester,
            shared.policy.heartbeat_lease(),
        )
        .await?;
        match started {
            Some(started)
                if started.begun.decision == Decision::InFlight
                    && started.begun.state == State::Pending =>
            {
                settle_wait(shared, &intent.op_key).await;
                writer::begin_and_dispatch(
                    &shared.pool,
                    intent,
                    worker,
                    as_requester,
                    shared.policy.heartbeat_lease(),
                )
                .await
            }
            other => Ok(other),
        }
    }

    /// The tool server cannot be reached: the ledger still answers what it
    /// knows (a replay, a refusal), and a call it would have let run is
    /// recorded failed, retryable — nothing was sent.
    async fn unsent(
        &self,
        shared: &Shared,
        call: &MappedCall,
        intent: &writer::Intent,
        worker: &str,
        error: McpError,
    ) -> Result<CallToolResult, McpError> {
        let begun = match self.begin(shared, intent, worker).await {
            Ok(Some(begun)) => begun,
            Ok(None) => return Ok(tool_error(not_yours_text(call))),
            Err(LedgerError::Invalid(why)) => {
                return Ok(tool_error(refused_terms_text(&self.tool, &self.rule, &why)));
            }
            Err(ledger_error) => return Err(ledger_trouble(ledger_error)),
        };
        if !matches!(begun.decision, Decision::Proceed | Decision::Retry) {
            let started = writer::Started {
                begun,
                dispatched: false,
                differences: Vec::new(),
                heartbeat_lease: None,
            };
            return Ok(answer_unsent(call, started));
        }
        let completion = Completion {
            reason: Some(format!(
                "the upstream tool server could not be reached: {}",
                error.message
            )),
            request_id: Some(self.request_id.clone()),
            worker: Some(worker.to_string()),
            target: Some(call.target.clone()),
            ..Completion::default()
        };
        writer::complete_effect(
            &shared.pool,
            &call.op_key,
            Outcome::Failed { retryable: true },
            &completion,
        )
        .await
        .map_err(ledger_trouble)?;
        Err(error)
    }

    async fn run(
        self,
        shared: &Arc<Shared>,
        peer: Result<rmcp::service::Peer<rmcp::service::RoleClient>, McpError>,
    ) -> Result<CallToolResult, McpError> {
        let arguments = self.request.arguments.clone().unwrap_or_default();
        let call = match self.rule.map(&arguments) {
            Ok(call) => call,
            Err(problem) => {
                return Ok(tool_error(format!(
                    "The gateway cannot record this {} call ({problem}). Nothing was sent; call it with the missing argument.",
                    self.tool
                )));
            }
        };
        let (requested_by, worker) = self.requester_and_worker(shared);
        let intent = call.intent(&requested_by, self.request_id.clone());
        let peer = match peer {
            Ok(peer) => peer,
            Err(error) => return self.unsent(shared, &call, &intent, &worker, error).await,
        };
        let started = match self.start(shared, &intent, &worker).await {
            Ok(Some(started)) => started,
            Ok(None) => return Ok(tool_error(not_yours_text(&call))),
            // The ledger was reached and refused the call's own terms: no
            // later try of the same arguments can succeed.
            Err(LedgerError::Invalid(why)) => {
                return Ok(tool_error(refused_terms_text(&self.tool, &self.rule, &why)));
            }
            Err(error) => return Err(ledger_trouble(error)),
        };
        if !started.dispatched {
            return Ok(answer_unsent(&call, started));
        }
        // Until its outcome is recorded, a repeat of this call made through
        // this gateway waits for it here rather than asking the ledger.
        let in_flight = InFlight::register(shared, &call.op_key);
        let request = self.keyed_request(&call);
        // The lease in force may be the action's policy's, not this gateway's.
        let beating = started
            .heartbeat_lease
            .map(|lease| Heartbeat::start(&shared.pool, &call.op_key, lease, &worker));
        let answer =
            tokio::time::timeout(shared.policy.upstream_timeout(), peer.call_tool(request)).await;
        drop(beating);
        let mut completion = Completion {
            request_id: Some(self.request_id.clone()),
            worker: Some(worker),
            target: Some(call.target.clone()),
            ..Completion::default()
        };
        let (outcome, reply) = self.outcome_of(answer, &call, &mut completion, shared);
        completion.result = completion.result.map(storable);
        completion.reason = completion.reason.map(|reason| storable_text(&reason));
        completion.external_ref = completion.external_ref.map(|text| storable_text(&text));
        let recorded = Recorded {
            outcome,
            completion,
            reply,
        };
        record_outcome(shared, &call, recorded, in_flight).await
    }

    /// The gateway, and the caller it tells apart: the ledger records the
    /// effect as requested by that caller, and answers a repeat only to it.
    /// The worker is who made the call, as the console shows the dispatch:
    /// the gateway, for which client, through which tool.
    fn requester_and_worker(&self, shared: &Shared) -> (String, String) {
        let requested_by = match &self.caller {
            Some(caller) => format!("{}/caller:{caller}", shared.requested_by),
            None => shared.requested_by.clone(),
        };
        let worker = format!("{requested_by} ({}, tool {})", self.client, self.tool);
        (requested_by, worker)
    }

    /// The call as forwarded. The tool server gets the key too: one that
    /// passes it to its provider as an idempotency key makes even a retry
    /// from outside the ledger (a reconciler's safe retry) one effect.
    fn keyed_request(&self, call: &MappedCall) -> CallToolRequestParams {
        let mut request = self.request.clone();
        request.arguments = Some(call.arguments.clone());
        request
            .meta
            .get_or_insert_with(Default::default)
            .0
            .0
            .insert(OP_KEY_META.to_string(), Value::String(call.op_key.clone()));
        request
    }

    /// The outcome to record of the tool server's answer, or of its
    /// failing to give one in time, and the reply for the model.
    fn outcome_of(
        &self,
        answer: Result<Result<CallToolResult, ServiceError>, tokio::time::error::Elapsed>,
        call: &MappedCall,
        completion: &mut Completion,
        shared: &Shared,
    ) -> (Outcome, CallToolResult) {
        match answer {
            Ok(Ok(result)) => self.judge(result, call, completion, shared),
            Ok(Err(error)) => {
                completion.error_class = Some(match error {
                    ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                        ErrorClass::ConnectionReset
                    }
                    ServiceError::Timeout { .. } => ErrorClass::Timeout,
                    ServiceError::McpError(_) => ErrorClass::ServerError,
                    _ => ErrorClass::InvalidResponse,
                });
                completion.reason = Some(format!("the upstream tool server: {error}"));
                (Outcome::Unknown, tool_error(lost_answer_text(call)))
            }
            Err(_elapsed) => {
                completion.error_class = Some(ErrorClass::Timeout);
                completion.reason = Some(format!(
                    "the upstream tool server did not answer within {} s",
                    shared.policy.upstream_timeout().as_secs()
                ));
                (Outcome::Unknown, tool_error(lost_answer_text(call)))
            }
        }
    }

    /// The outcome of an answer the tool server gave: what it stated by
    /// structure first, then a success, then an error whose wording says
    /// nothing was done; any other error leaves the outcome in doubt, and
    /// the model is told what the server said and why it is in doubt.
    fn judge(
        &self,
        result: CallToolResult,
        call: &MappedCall,
        completion: &mut Completion,
        shared: &Shared,
    ) -> (Outcome, CallToolResult) {
        let said = crate::text::message_line(&text_of(&result));
        let structured_ref = || {
            let field = self.rule.external_ref.as_deref()?;
            told::reference(result.structured_content.as_ref()?.get(field)?)
        };
        match told::told_outcome(&result) {
            Some(Told::Performed { provider_ref }) => {
                completion.external_ref = provider_ref.or_else(structured_ref);
                completion.result = Some(stored_result(&result, shared.policy.result_limit()));
                (Outcome::Succeeded, result)
            }
            Some(Told::NotPerformed { retryable }) => {
                completion.error_class = (!retryable).then_some(ErrorClass::BusinessRejection);
                completion.reason = Some(format!("the tool server said nothing was done: {said}"));
                (Outcome::Failed { retryable }, result)
            }
            Some(Told::Unknown) => {
                completion.error_class = Some(ErrorClass::ServerError);
                completion.reason = Some(format!(
                    "the tool server said it does not know whether it was done: {said}"
                ));
                (Outcome::Unknown, tool_error(told_unknown_text(call, &said)))
            }
            None if result.is_error != Some(true) => {
                completion.external_ref = structured_ref();
                completion.result = Some(stored_result(&result, shared.policy.result_limit()));
                (Outcome::Succeeded, result)
            }
            None if self.rule.says_refused(&said) => {
                completion.error_class = Some(ErrorClass::BusinessRejection);
                completion.reason = Some(said);
                (Outcome::Failed { retryable: false }, result)
            }
            None => {
                completion.error_class = Some(ErrorClass::InvalidResponse);
                completion.reason = Some(format!(
                    "the tool answered an error that does not say nothing was done: {said}"
                ));
                (Outcome::Unknown, tool_error(in_doubt_text(call, &said)))
            }
        }
    }
}

/// A dispatched call's outcome, what the ledger is told of it, and the
/// reply the model gets.
struct Recorded {
    outcome: Outcome,
    completion: Completion,
    reply: CallToolResult,
}

/// Records a dispatched call's outcome and gives the model its reply.
async fn record_outcome(
    shared: &Arc<Shared>,
    call: &MappedCall,
    recorded: Recorded,
    in_flight: InFlight,
) -> Result<CallToolResult, McpError> {
    let Recorded {
        outcome,
        completion,
        reply,
    } = recorded;
    if outcome == Outcome::Succeeded {
        // The tool's own answer is the truth of what it did, whatever
        // the ledger says to its recording: the model has it now, and
        // the success is recorded beside the reply. A repeat through
        // this gateway waits for the recording (its InFlight lives as
        // long); close() waits for every one; and if this process
        // ends first, the effect stays dispatched, which the overdue
        // pane and the reconciler take up.
        let pool = shared.pool.clone();
        let op_key = call.op_key.clone();
        shared.recording.spawn(async move {
            let _ = complete_after_dispatch(&pool, &op_key, outcome, &completion).await;
            drop(in_flight);
        });
        return Ok(reply);
    }
    match complete_after_dispatch(&shared.pool, &call.op_key, outcome, &completion).await {
        Ok(()) => Ok(reply),
        Err(error) => Ok(tool_error(format!(
            "The {action} was sent to the tool server (key {key}) and may have happened, but the gateway \
             could not record its outcome in the effect ledger ({error}). Do not call it again: \
             an operator will reconcile it with the provider.",
            action = call.action,
            key = call.op_key,
            error = crate::text::message_line(&error.to_string()),
        ))),
    }
}

/// Beats for a dispatched effect while its call is out to the tool server,
/// from a task of its own, every third of the lease (begin_and_dispatch
/// started the lease: a call answered sooner never beats). Dropped when the
/// answer comes; a beat then in flight finishes.
struct Heartbeat {
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Heartbeat {
    fn start(pool: &LedgerPool, op_key: &str, lease: Duration, worker: &str) -> Heartbeat {
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let (pool, op_key, worker) = (pool.clone(), op_key.to_string(), worker.to_string());
        tokio::spawn(async move {
            let every = lease / 3;
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tokio::select! {
                    _ = &mut stopped => return,
                    _ = ticks.tick() => {}
                }
                match writer::heartbeat(&pool, &op_key, lease, &worker).await {
                    Ok(beat) if beat.alive => {}
                    Ok(beat) => {
                        if beat.state == crate::ledger::State::Unknown {
                            tracing::warn!(%op_key, "the ledger declared this call lost (its lease ran out); its answer will still be recorded");
                        }
                        return;
                    }
                    Err(error) => {
                        tracing::warn!(%op_key, %error, "a heartbeat failed: trying again at the next beat");
                    }
                }
            }
        });
        Heartbeat { _stop: stop }
    }
}

/// How long the gateway keeps trying to record an outcome the tool server
/// has already produced while the ledger is out of reach (a Patroni
/// failover of a dead leader takes about 20 s), from the first send, and
/// its pauses between tries: from the first, doubling, up to the last.
const COMPLETION_RETRY_FOR: Duration = Duration::from_secs(30);
const COMPLETION_FIRST_PAUSE: Duration = Duration::from_millis(200);
const COMPLETION_LONGEST_PAUSE: Duration = Duration::from_secs(2);

/// Records the outcome of a call the tool server has had: once dispatched,
/// the effect may have happened, so a ledger out of reach (a pooler
/// restarting, a failover) is tried again, the answer kept, for up to
/// `COMPLETION_RETRY_FOR` from its first send, each try said on stderr
/// (the gateway's log); only then is the effect left
/// dispatched for the reconciler. A repeat is safe: the ledger answers a
/// completion it already has, under this attempt's request id, as a repeat.
async fn complete_after_dispatch(
    pool: &LedgerPool,
    op_key: &str,
    outcome: Outcome,
    completion: &Completion,
) -> Result<(), crate::ledger::LedgerError> {
    let mut pause = COMPLETION_FIRST_PAUSE;
    // From the first send: a try may itself take seconds to fail (the
    // pool looking for a primary).
    let started = std::time::Instant::now();
    let mut tries = 1;
    loop {
        let error = match writer::complete_effect(pool, op_key, outcome, completion).await {
            Ok(_) => {
                if tries > 1 {
                    let out = started.elapsed().as_secs_f64();
                    eprintln!(
                        "effectwatch gateway: recorded the tool's answer for {op_key} on try {tries}, the ledger out of reach for {out:.1} s"
                    );
                }
                return Ok(());
            }
            Err(error) => error,
        };
        let said = crate::text::message_line(&error.to_string());
        // What the ledger refused (a check, a state) is refused again.
        if !(error.is_connection() || matches!(error, crate::ledger::LedgerError::Database(_))) {
            eprintln!(
                "effectwatch gateway: the outcome for {op_key} could not be recorded: {said}"
            );
            return Err(error);
        }
        let out = started.elapsed();
        let left = COMPLETION_RETRY_FOR.saturating_sub(out);
        if left.is_zero() {
            eprintln!(
                "effectwatch gateway: the ledger stayed out of reach for {:.1} s (the bound, {} s): the tool's answer for {op_key} is not recorded, and the effect stays dispatched for the reconciler ({said})",
                out.as_secs_f64(),
                COMPLETION_RETRY_FOR.as_secs(),
            );
            return Err(error);
        }
        let wait = pause.min(left);
        eprintln!(
            "effectwatch gateway: the ledger is out of reach; keeping the tool's answer for {op_key} and trying again in {:.1} s (out of reach for {:.1} s, of at most {} s: {said})",
            wait.as_secs_f64(),
            out.as_secs_f64(),
            COMPLETION_RETRY_FOR.as_secs(),
        );
        tokio::time::sleep(wait).await;
        pause = (pause * 2).min(COMPLETION_LONGEST_PAUSE);
        tries += 1;
    }
}

/// A tool's answer as PostgreSQL can store it: text holds no NUL, so one
/// in a string is kept written out (`\u0000`) rather than losing the answer.
fn storable(value: Value) -> Value {
    match value {
        Value::String(text) => Value::String(storable_text(&text)),
        Value::Array(elements) => Value::Array(elements.into_iter().map(storable).collect()),
        Value::Object(members) => Value::Object(
            members
                .into_iter()
                .map(|(name, value)| (storable_text(&name), storable(value)))
                .collect(),
        ),
        other => other,
    }
}

fn storable_text(text: &str) -> String {
    text.replace('\0', "\\u0000")
}

/// The calls this gateway has sent and not yet recorded the outcome of,
/// by key: a repeat waits on its call's channel, which closes when the
/// call's [`InFlight`] is dropped.
type InFlightCalls = std::sync::Mutex<HashMap<String, tokio::sync::watch::Receiver<()>>>;

/// A call sent and not yet recorded, for as long as it lives.
struct InFlight {
    shared: Arc<Shared>,
    op_key: String,
    // Dropped with the call: its repeats' waits end.
    _sender: tokio::sync::watch::Sender<()>,
    receiver: tokio::sync::watch::Receiver<()>,
}

impl InFlight {
    fn register(shared: &Arc<Shared>, op_key: &str) -> InFlight {
        let (sender, receiver) = tokio::sync::watch::channel(());
        if let Ok(mut calls) = shared.in_flight.lock() {
            calls.insert(op_key.to_string(), receiver.clone());
        }
        InFlight {
            shared: shared.clone(),
            op_key: op_key.to_string(),
            _sender: sender,
            receiver,
        }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut calls) = self.shared.in_flight.lock() {
            // Only this call's own entry: a later call of the key has its own.
            if calls
                .get(&self.op_key)
                .is_some_and(|receiver| self.receiver.same_channel(receiver))
            {
                calls.remove(&self.op_key);
            }
        }
    }
}

/// Waits until the effect under `op_key` is no longer pending, or the
/// gateway's in-flight wait. A call this gateway sent is waited for
/// directly; one another process sent is asked about, less and less often
/// (the ledger announces only changes that move a pane, and a call's own
/// success moves none).
async fn settle_wait(shared: &Shared, op_key: &str) {
    if own_call_settled(shared, op_key).await {
        return;
    }
    let limit = shared.in_flight_wait;
    let deadline = tokio::time::Instant::now() + limit;
    let mut pause = std::time::Duration::from_millis(20);
    while tokio::time::Instant::now() < deadline {
        match writer::state_of(&shared.pool, op_key).await {
            Ok(Some(State::Pending)) => {}
            _ => return,
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(std::time::Duration::from_millis(250));
    }
}

/// Waits for this gateway's own call of `op_key`, if one is out (up to the
/// in-flight wait): true when there was one.
async fn own_call_settled(shared: &Shared, op_key: &str) -> bool {
    let here = shared
        .in_flight
        .lock()
        .ok()
        .and_then(|calls| calls.get(op_key).cloned());
    match here {
        Some(mut receiver) => {
            let _ = tokio::time::timeout(shared.in_flight_wait, receiver.changed()).await;
            true
        }
        None => false,
    }
}

fn ledger_trouble(error: LedgerError) -> McpError {
    let message = if error.is_connection() {
        format!(
            "The gateway could not reach its effect ledger ({error}); nothing was sent. Try again later."
        )
    } else {
        format!("The effect ledger could not record this call ({error}); nothing was sent.")
    };
    McpError::internal_error(message, None)
}

/// A call whose terms the ledger refuses (a currency that is not three
/// capital letters, a key too long): a tool error naming the arguments the
/// refused field is made of and the rule, never an outage to retry.
fn refused_terms_text(tool: &str, rule: &ToolRule, why: &str) -> String {
    let arguments = arguments_behind(rule, why);
    let named = if arguments.is_empty() {
        "its arguments".to_string()
    } else {
        format!(
            "the argument{} {}",
            if arguments.len() == 1 { "" } else { "s" },
            arguments.join(", ")
        )
    };
    format!(
        "The effect ledger refuses this {tool} call: {why}. Nothing was sent and nothing was recorded. \
         It cannot succeed as it is: do not retry it unchanged; correct {named}, or tell the user what is wrong."
    )
}

/// The tool's arguments a ledger refusal is about, read from the rule that
/// makes each field of the effect from them.
fn arguments_behind(rule: &ToolRule, why: &str) -> Vec<String> {
    let field = ["currency", "amount", "op_key", "target", "params"]
        .into_iter()
        .find(|field| {
            why.contains(&format!("effects_{field}_")) || why.starts_with(&format!("{field} "))
        });
    let field = field.or_else(|| why.starts_with("params are nested").then_some("params"));
    let mut named: Vec<String> = match field {
        Some("currency") => rule.currency.iter().cloned().collect(),
        Some("amount") => rule.amount_minor.iter().cloned().collect(),
        Some("op_key") => placeholders(rule.op_key.as_deref()),
        Some("target") => placeholders(rule.target.as_deref()),
        Some("params") => rule.params.clone(),
        _ => Vec::new(),
    };
    named.dedup();
    named
}

/// The arguments a template reads: `{order_id}` and `{customer.id}` name
/// `order_id` and `customer`.
fn placeholders(template: Option<&str>) -> Vec<String> {
    let Some(template) = template else {
        return Vec::new();
    };
    let mut names = Vec::new();
    for piece in template.split('{').skip(1) {
        if let Some((inside, _)) = piece.split_once('}') {
            let root = inside.split('.').next().unwrap_or(inside);
            if !root.is_empty() && !names.iter().any(|name| name == root) {
                names.push(root.to_string());
            }
        }
    }
    names
}

/// A tool result as the ledger keeps it: whole up to the limit, beyond it
/// the start of its text and its size.
fn stored_result(result: &CallToolResult, limit: usize) -> Value {
    let whole = serde_json::to_value(result).unwrap_or(Value::Null);
    let size = whole.to_string().len();
    if size <= limit {
        return whole;
    }
    let summary: String = text_of(result).chars().take(SUMMARY_CHARS).collect();
    let mut kept = json!({ "summarised": true, "bytes": size, "summary": summary });
    // A tool with an output schema promises its client structured content:
    // that part is kept whole, or its replay would break the client.
    if let Some(structured) = &result.structured_content {
        kept["structuredContent"] = structured.clone();
    }
    kept
}

fn replayed(call: &MappedCall, stored: Option<Value>) -> CallToolResult {
    match stored {
        Some(stored) if stored.get("summarised") == Some(&Value::Bool(true)) => {
            let mut result = CallToolResult::success(vec![ContentBlock::text(format!(
                "This {} was already done (key {}); its result was {} bytes, kept summarised: {}",
                call.action,
                call.op_key,
                stored.get("bytes").cloned().unwrap_or(Value::Null),
                stored.get("summary").and_then(Value::as_str).unwrap_or("")
            ))]);
            result.structured_content = stored.get("structuredContent").cloned();
            result
        }
        Some(stored) => match serde_json::from_value::<CallToolResult>(stored.clone()) {
            Ok(result) => result,
            Err(_) => CallToolResult::success(vec![ContentBlock::text(format!(
                "This {} was already done (key {}); its recorded result: {stored}",
                call.action, call.op_key
            ))]),
        },
        None => CallToolResult::success(vec![ContentBlock::text(format!(
            "This {} was already done (key {}); it was settled without a stored result. Do not call it again.",
            call.action, call.op_key
        ))]),
    }
}

/// A call whose outcome is unknown, for a repeat of its key: the first
/// answer told why.
fn unknown_text(call: &MappedCall) -> String {
    format!(
        "This {action} on {target} may already have happened: its outcome is unknown (key {key}). {settling}",
        action = call.action,
        target = call.target,
        key = call.op_key,
        settling = SETTLING,
    )
}

/// No answer came back (a timeout, a closed connection).
fn lost_answer_text(call: &MappedCall) -> String {
    format!(
        "This {action} on {target} may already have happened: it was sent, and the tool server's answer was lost, \
         so its outcome is unknown (key {key}). {settling}",
        action = call.action,
        target = call.target,
        key = call.op_key,
        settling = SETTLING,
    )
}

/// The server answered an error that does not say whether it acted.
fn in_doubt_text(call: &MappedCall, said: &str) -> String {
    format!(
        "The tool server answered this {action} on {target} with an error: \"{said}\". It did not say whether \
         the {action} was done, so it may already have happened (key {key}). {settling}",
        action = call.action,
        target = call.target,
        key = call.op_key,
        settling = SETTLING,
    )
}

/// The tool server said, by structure, that it does not know.
fn told_unknown_text(call: &MappedCall, said: &str) -> String {
    format!(
        "The tool server answered this {action} on {target}: \"{said}\", and said it does not know whether \
         the {action} was done, so it may already have happened (key {key}). {settling}",
        action = call.action,
        target = call.target,
        key = call.op_key,
        settling = SETTLING,
    )
}

const SETTLING: &str = "Do not retry it and do not try another way to do it; an operator has been shown it \
     and it will be checked with the provider. Tell the user it is being checked.";

/// The answer to a call the ledger did not let this caller send.
fn answer_unsent(call: &MappedCall, started: writer::Started) -> CallToolResult {
    let begun = started.begun;
    match begun.decision {
        Decision::Replay => replayed(call, begun.result),
        Decision::Rejected => tool_error(rejected_text(call, &started.differences)),
        // Let run, but another caller claimed it first.
        Decision::Proceed | Decision::Retry => {
            tool_error(refusal_text(Decision::InFlight, begun.state, call, None))
        }
        decision => tool_error(refusal_text(
            decision,
            begun.state,
            call,
            begun.result.as_ref(),
        )),
    }
}

/// The answer to a caller whose key is another's: nothing of the effect.
fn not_yours_text(call: &MappedCall) -> String {
    format!(
        "This {action} was not done: its key ({key}) belongs to another caller, and nothing of that caller's \
         call can be told. Nothing was sent. Do not retry it; if it is an action of your own, its business \
         arguments make its own key — or ask an operator.",
        action = call.action,
        key = call.op_key,
    )
}

fn refusal_text(
    decision: Decision,
    state: State,
    call: &MappedCall,
    result: Option<&Value>,
) -> String {
    let (action, target, key) = (&call.action, &call.target, &call.op_key);
    match decision {
        Decision::InFlight if state == State::Unknown => unknown_text(call),
        Decision::InFlight => format!(
            "This {action} on {target} is already in progress (key {key}): the tool server may be doing it now. \
             Do not call it again and do not try another way to do it; it will be settled by the reconciler or an operator."
        ),
        Decision::Held => format!(
            "This {action} on {target} is held (key {key}): another {action} on the same target is still open. \
             Nothing was sent. Do not retry it under other arguments; an operator releases or cancels it."
        ),
        Decision::Stop => format!(
            "This {action} on {target} is closed (key {key}, state {state}): it failed for good, was cancelled or was reversed. \
             Nothing was sent. Do not retry it; report the outcome.",
            state = state.as_str()
        ),
        Decision::Overlap => format!(
            "This {action} on {target} overlaps one already made ({overlaps}): it would be a second one, not a retry. Nothing was sent.",
            overlaps = result
                .and_then(|result| result.get("overlaps"))
                .map(Value::to_string)
                .unwrap_or_default()
        ),
        Decision::Wait => format!(
            "This {action} was rate limited by the provider (key {key}): call it again with the same arguments after {seconds} seconds. Nothing was sent.",
            seconds = result
                .and_then(|result| result.get("retry_after_seconds"))
                .map(Value::to_string)
                .unwrap_or_else(|| "a few".into())
        ),
        other => format!(
            "The ledger answered {other:?} for this {action} (key {key}); nothing was sent. Do not retry it."
        ),
    }
}

/// What a rejected call changed, field by field, as the ledger says: the
/// model reads it.
fn rejected_text(call: &MappedCall, differences: &[writer::Difference]) -> String {
    let differences: Vec<String> = differences
        .iter()
        .map(|difference| {
            format!(
                "{}: recorded {}, now {}",
                difference.field, difference.recorded, difference.now
            )
        })
        .collect();
    format!(
        "The key {key} was already used for another {action} ({shown}). Nothing was sent. \
         If this is the same {action}, use the recorded terms; if it is a new one, it needs its own business arguments (and so its own key).",
        key = call.op_key,
        action = call.action,
        shown = if differences.is_empty() {
            "the terms differ".to_string()
        } else {
            differences.join("; ")
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clients_own_operation_key_is_never_relayed() {
        assert!(!is_relayed_meta(OP_KEY_META));
        assert!(!is_relayed_meta("progressToken"));
        assert!(!is_relayed_meta("io.modelcontextprotocol/related-task"));
        assert!(is_relayed_meta("traceparent"));
    }

    #[test]
    fn a_summarised_replay_keeps_its_structured_content() {
        let mut result = CallToolResult::structured(json!({"id": "re_1", "amount_minor": 1500}));
        result.content.push(ContentBlock::text("x".repeat(4096)));
        let stored = stored_result(&result, 1024);
        assert_eq!(stored["summarised"], true);
        let call = MappedCall {
            action: "refund".into(),
            op_key: "refund:INV-1:1500".into(),
            ..MappedCall::default()
        };
        let replay = replayed(&call, Some(stored));
        assert_eq!(
            replay.structured_content,
            Some(json!({"id": "re_1", "amount_minor": 1500})),
            "a client holding the tool's output schema gets its structured content"
        );
    }
}
