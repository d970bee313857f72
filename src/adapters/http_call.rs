//! The HTTP plumbing providers and sinks share: one client per adapter, a
//! hard deadline on every call, a capped body, errors as one line.

use std::time::Duration;

use reqwest::{Client, Method, Url};
use serde_json::Value;

use super::secrets::redact_urls;

/// Most of a response body kept; the rest is dropped unread.
const BODY_CAP: usize = 1024 * 1024;

#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub body: Vec<u8>,
    pub truncated: bool,
}

impl Answer {
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The start of the body as one safe line, for an error message.
    pub fn excerpt(&self) -> String {
        let text = String::from_utf8_lossy(&self.body[..self.body.len().min(300)]).into_owned();
        let text = redact_urls(&crate::text::sanitize_line(text.trim()));
        crate::text::truncate(&text, 160)
    }
}

/// Why no answer came. All of these leave the outcome unknown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CallError {
    #[error("no answer within {0} ms")]
    Timeout(u128),
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("connection failed: {0}")]
    Transfer(String),
}

impl CallError {
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Timeout(_) => "timeout",
            CallError::Connect(_) => "connect",
            CallError::Transfer(_) => "connection",
        }
    }
}

pub fn client(timeout: Duration) -> Result<Client, String> {
    Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .user_agent(concat!("effectwatch/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|error| format!("cannot set up an HTTP client: {}", chain(&error)))
}

pub async fn send(
    client: &Client,
    method: Method,
    url: Url,
    headers: &[(String, String)],
    body: Option<&Value>,
    timeout: Duration,
) -> Result<Answer, CallError> {
    let mut request = client.request(method, url);
    for (name, value) in headers {
        request = request.header(name.as_str(), value.as_str());
    }
    if let Some(body) = body {
        request = request.json(body);
    }
    let call = async {
        let mut response = request.send().await.map_err(|e| classify(&e, timeout))?;
        let status = response.status().as_u16();
        let mut body = Vec::new();
        let mut truncated = false;
        while let Some(chunk) = response.chunk().await.map_err(|e| classify(&e, timeout))? {
            let room = BODY_CAP - body.len();
            if chunk.len() > room {
                body.extend_from_slice(&chunk[..room]);
                truncated = true;
                break;
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Answer {
            status,
            body,
            truncated,
        })
    };
    // The client's own timeout covers the call; this one is the backstop.
    match tokio::time::timeout(timeout + Duration::from_millis(250), call).await {
        Ok(result) => result,
        Err(_) => Err(CallError::Timeout(timeout.as_millis())),
    }
}

fn classify(error: &reqwest::Error, timeout: Duration) -> CallError {
    if error.is_timeout() {
        CallError::Timeout(timeout.as_millis())
    } else if error.is_connect() {
        CallError::Connect(chain(error))
    } else {
        CallError::Transfer(chain(error))
    }
}

/// An error and its causes on one line, without the URL (it may carry
/// values the operator did not choose to print), and any other URL in it
/// redacted.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut current: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(cause) = current {
        let text = cause.to_string();
        let text = match text.find(" for url (") {
            Some(index) => text[..index].to_string(),
            None => text,
        };
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        current = cause.source();
    }
    redact_urls(&crate::text::sanitize_line(&parts.join(": ")))
}
