//! The LLM proxy: `POST /internal/llm-proxy/*` on the HTTP transport.
//!
//! An AX agent in Kubernetes holds no provider key: it points its SDK at
//! `<host>/internal/llm-proxy` with its per-turn token as the API key, and
//! the host forwards each request to the provider with the real credential.
//! Followed from AX's `src/host/server.ts` (the route, the token in
//! `x-api-key`, the 10 MiB body, 401 `{"error":"invalid token"}`, 502 when
//! forwarding fails) and `src/host/llm-proxy-core.ts` (which headers pass,
//! the credential put in `x-api-key` for an API key or `Authorization:
//! Bearer` for a token, the upstream's status, headers and body streamed
//! back). AX's OAuth mode also rewrites the request to pass as Claude Code;
//! this proxy forwards the agent's request as it is.
//!
//! The path after `/internal/llm-proxy`, query included, is appended to the
//! upstream (`https://api.anthropic.com` unless configured). The agent's
//! `x-api-key` and `Authorization` (the turn token, or anything else it
//! put there) never reach the upstream, and the credential goes nowhere
//! else: redirects are handed back to the agent, not followed, so it
//! cannot be carried to another origin.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use reqwest::Url;
use serde_json::json;

/// The prefix of the proxied paths.
pub const LLM_PROXY_PATH: &str = "/internal/llm-proxy";

/// The largest request body the proxy forwards: 10 MiB, as the AX host takes.
pub const LLM_BODY_LIMIT: usize = 10_485_760;

/// The upstream unless configured: AX's default target.
pub const DEFAULT_LLM_UPSTREAM: &str = "https://api.anthropic.com";

/// How long reaching the upstream may take; the answer itself may stream
/// for as long as the model writes.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Request headers that are not passed on: the credentials the agent
/// holds (the proxy puts in its own), and those that describe this hop
/// rather than the request.
const DROPPED_REQUEST: &[&str] = &[
    "host",
    "connection",
    "content-length",
    "authorization",
    "x-api-key",
    "proxy-authorization",
    "proxy-connection",
    "keep-alive",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// Response headers of the upstream's hop, not the answer's.
const DROPPED_RESPONSE: &[&str] = &[
    "connection",
    "content-length",
    "keep-alive",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The header the provider takes its credential in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CredentialHeader {
    /// `x-api-key: KEY`: an Anthropic API key.
    ApiKey,
    /// `Authorization: Bearer TOKEN`: an OAuth token, or an OpenAI-style key.
    Bearer,
}

impl FromStr for CredentialHeader {
    type Err = LlmProxyError;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "x-api-key" => Ok(CredentialHeader::ApiKey),
            "bearer" => Ok(CredentialHeader::Bearer),
            other => Err(LlmProxyError::UnknownHeader(other.to_owned())),
        }
    }
}

impl fmt::Display for CredentialHeader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CredentialHeader::ApiKey => "x-api-key",
            CredentialHeader::Bearer => "bearer",
        })
    }
}

/// Why the proxy could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum LlmProxyError {
    /// The upstream is not an absolute http(s) URL.
    #[error("LLM upstream {url:?} is not an http(s) URL ({why}); give e.g. {DEFAULT_LLM_UPSTREAM}")]
    BadUpstream {
        /// What was given.
        url: String,
        /// What is wrong with it.
        why: String,
    },
    /// The credential cannot be sent in a header.
    #[error(
        "the LLM credential is empty or holds a character an HTTP header cannot carry; check the variable it is read from"
    )]
    BadCredential,
    /// Not a known credential header.
    #[error(
        "unknown credential header {0:?}; use x-api-key (Anthropic API keys) or bearer (Authorization: Bearer)"
    )]
    UnknownHeader(String),
    /// The HTTP client could not be built.
    #[error("cannot set up the HTTP client for the LLM upstream: {0}")]
    Client(#[source] reqwest::Error),
}

impl LlmProxyError {
    /// Whether trying again may succeed without a change of configuration.
    pub fn is_retryable(&self) -> bool {
        match self {
            LlmProxyError::BadUpstream { .. } => false,
            LlmProxyError::BadCredential => false,
            LlmProxyError::UnknownHeader(_) => false,
            LlmProxyError::Client(_) => true,
        }
    }
}

/// Forwards agents' LLM requests to one upstream with one credential.
#[derive(Clone)]
pub struct LlmProxy {
    upstream: Url,
    header: CredentialHeader,
    /// The whole header value (`KEY` or `Bearer TOKEN`), marked sensitive
    /// so it is not printed.
    credential: HeaderValue,
    client: reqwest::Client,
}

impl fmt::Debug for LlmProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LlmProxy")
            .field("upstream", &self.upstream.as_str())
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

impl LlmProxy {
    /// A proxy to `upstream` (e.g. `https://api.anthropic.com`) sending
    /// `credential` in `header`.
    pub fn new(
        upstream: &str,
        credential: &str,
        header: CredentialHeader,
    ) -> Result<Self, LlmProxyError> {
        let bad = |why: String| LlmProxyError::BadUpstream {
            url: upstream.to_owned(),
            why,
        };
        let parsed = Url::parse(upstream).map_err(|e| bad(e.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host().is_none() {
            return Err(bad("the scheme must be http or https, with a host".into()));
        }
        if parsed.query().is_some() || parsed.fragment().is_some() {
            return Err(bad("it may have a path but no query or fragment".into()));
        }
        let text = match header {
            CredentialHeader::ApiKey => credential.to_owned(),
            CredentialHeader::Bearer => format!("Bearer {credential}"),
        };
        if credential.trim().is_empty() {
            return Err(LlmProxyError::BadCredential);
        }
        let mut credential =
            HeaderValue::from_str(&text).map_err(|_| LlmProxyError::BadCredential)?;
        credential.set_sensitive(true);
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(LlmProxyError::Client)?;
        Ok(Self {
            upstream: parsed,
            header,
            credential,
            client,
        })
    }

    /// The upstream requests go to.
    pub fn upstream(&self) -> &Url {
        &self.upstream
    }

    /// The header the credential goes in.
    pub fn credential_header(&self) -> CredentialHeader {
        self.header
    }

    /// Forwards one request: `tail` is the path and query after
    /// [`LLM_PROXY_PATH`], `headers` and `body` the agent's. Answers the
    /// upstream's status, headers and body (streamed), or 400/502 JSON.
    pub async fn forward(&self, tail: &str, headers: &HeaderMap, body: Bytes) -> Response {
        let Some(target) = self.target(tail) else {
            return error(
                StatusCode::BAD_REQUEST,
                format!("{LLM_PROXY_PATH}{tail} does not name a path on the LLM upstream"),
            );
        };
        let mut outgoing = HeaderMap::new();
        for (name, value) in headers {
            if !DROPPED_REQUEST.contains(&name.as_str()) {
                outgoing.append(name, value.clone());
            }
        }
        outgoing.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        let name = match self.header {
            CredentialHeader::ApiKey => HeaderName::from_static("x-api-key"),
            CredentialHeader::Bearer => header::AUTHORIZATION,
        };
        outgoing.insert(name, self.credential.clone());

        let answer = match self
            .client
            .post(target)
            .headers(outgoing)
            .body(body)
            .send()
            .await
        {
            Ok(answer) => answer,
            Err(failure) => {
                tracing::warn!(error = %failure, "ax-ipc LLM proxy: the upstream could not be reached");
                return error(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "LLM proxy request failed: {} did not answer: {}",
                        self.upstream,
                        failure.without_url()
                    ),
                );
            }
        };
        let status = answer.status();
        if status.is_client_error() || status.is_server_error() {
            tracing::debug!(%status, "ax-ipc LLM proxy: the upstream answered an error");
        }
        let mut response = Response::builder().status(status);
        for (name, value) in answer.headers() {
            if !DROPPED_RESPONSE.contains(&name.as_str()) {
                response = response.header(name, value);
            }
        }
        response
            .body(Body::from_stream(answer.bytes_stream()))
            .unwrap_or_else(|e| {
                error(
                    StatusCode::BAD_GATEWAY,
                    format!(
                        "LLM proxy request failed: the upstream's answer cannot be passed on: {e}"
                    ),
                )
            })
    }

    /// The upstream URL for `tail`, when it stays on the upstream's origin.
    fn target(&self, tail: &str) -> Option<Url> {
        let base = self.upstream.as_str().trim_end_matches('/');
        let target = Url::parse(&format!("{base}{tail}")).ok()?;
        (target.origin() == self.upstream.origin()).then_some(target)
    }
}

/// `{"error": message}` with `status`, the AX host's error shape.
pub(super) fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(json!({ "error": message }))).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_stay_on_the_upstreams_origin() {
        let proxy =
            LlmProxy::new("http://127.0.0.1:9/base/", "k", CredentialHeader::ApiKey).unwrap();
        assert_eq!(
            proxy.target("/v1/messages?beta=true").unwrap().as_str(),
            "http://127.0.0.1:9/base/v1/messages?beta=true"
        );
        assert_eq!(
            proxy.target("//evil.example/x").unwrap().host_str(),
            Some("127.0.0.1")
        );
        let bare = LlmProxy::new("http://127.0.0.1:9", "k", CredentialHeader::ApiKey).unwrap();
        assert!(bare.target("@evil.example/x").is_none(), "another host");
    }

    #[test]
    fn bad_configuration_is_refused_and_the_credential_never_printed() {
        for url in ["api.anthropic.com", "ftp://x", "https://x/?q=1", "nope"] {
            assert!(
                matches!(
                    LlmProxy::new(url, "k", CredentialHeader::ApiKey),
                    Err(LlmProxyError::BadUpstream { .. })
                ),
                "{url}"
            );
        }
        for key in ["", "  ", "a\nb"] {
            assert!(matches!(
                LlmProxy::new(DEFAULT_LLM_UPSTREAM, key, CredentialHeader::Bearer),
                Err(LlmProxyError::BadCredential)
            ));
        }
        let proxy =
            LlmProxy::new(DEFAULT_LLM_UPSTREAM, "sk-secret", CredentialHeader::Bearer).unwrap();
        assert!(!format!("{proxy:?}").contains("sk-secret"));
        assert_eq!(
            "bearer".parse::<CredentialHeader>().unwrap(),
            CredentialHeader::Bearer
        );
        assert!("basic".parse::<CredentialHeader>().is_err());
    }
}
