//! `diskformer serve`: the OpenAI-compatible HTTP API over the one engine (axum on tokio): chat and text
//! completions, streamed as server-sent events or whole, the model list and a health check.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use diskformer::runtime::generate::prompt_ids;
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

use crate::reasoning::ReasoningSplitter;
use crate::worker::{EngineInfo, Job, Queue, Update};
use diskformer::api::{self, ApiError, ChatRequest, CompletionRequest};

/// What every handler shares.
#[derive(Clone)]
pub struct Served {
    pub queue: Queue,
    pub info: Arc<EngineInfo>,
    /// The name `/v1/models` lists and responses carry.
    pub model: String,
    /// Most tokens a reply gets when the request names no limit (less where the context ends first).
    pub max_tokens: usize,
    pub next_id: Arc<AtomicU64>,
    /// Largest request body, in bytes.
    pub body_limit: usize,
    /// How long a request's body may take to arrive.
    pub body_timeout: Duration,
}

/// The routes.
pub fn router(served: Served) -> Router {
    Router::new()
        .route("/health", get(|| async { axum::Json(json!({ "status": "ok" })) }))
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .fallback(|| async {
            refuse(&ApiError { status: 404, message: "no such route".into(), kind: "not_found" })
        })
        .with_state(served)
}

fn refuse(e: &ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST);
    let mut response = (status, axum::Json(e.body())).into_response();
    if e.status == 503 {
        response.headers_mut().insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

/// A request's body, refused (as a JSON error) when it is over the limit or does not arrive in time: a
/// client that stalls holds its connection, never the engine.
async fn body(s: &Served, body: Body) -> Result<Bytes, ApiError> {
    let error = |status, message| ApiError { status, message, kind: "invalid_request_error" };
    match tokio::time::timeout(s.body_timeout, axum::body::to_bytes(body, s.body_limit)).await {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if is_over_limit(&e) => {
            Err(error(413, format!("the body is over the limit of {} bytes (--body-limit)", s.body_limit)))
        }
        Ok(Err(e)) => Err(error(400, format!("the body could not be read: {e}"))),
        Err(_) => {
            let secs = s.body_timeout.as_secs_f64();
            Err(error(408, format!("the body did not arrive within {secs} s (--body-timeout)")))
        }
    }
}

/// Whether reading a body failed on its length limit.
fn is_over_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = source {
        if err.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = err.source();
    }
    false
}

async fn models(State(s): State<Served>) -> Response {
    let model = json!({ "id": s.model, "object": "model", "created": 0, "owned_by": "diskformer" });
    axum::Json(json!({ "object": "list", "data": [model] })).into_response()
}

/// What kind of reply a request wants.
#[derive(Clone, Copy)]
enum Kind {
    /// A chat message (reasoning apart when `thinking`; `in_reasoning`: the prompt opened it).
    Chat { thinking: bool, in_reasoning: bool },
    /// Text continuing the prompt.
    Text,
}

async fn chat(State(s): State<Served>, got: Body) -> Response {
    let asked = body(&s, got).await.and_then(|b| ChatRequest::parse(&b)).and_then(|r| {
        let (messages, thinking) = r.conversation()?;
        let ids = prompt_ids(&s.info.tokenizer, &messages, thinking);
        // A template that opens the reasoning itself (Qwen3.5's) ends the prompt with `<think>`.
        let tail = s.info.tokenizer.decode_lossy(&ids[ids.len().saturating_sub(4)..]);
        let in_reasoning = thinking && tail.trim_end().ends_with("<think>");
        Ok((ids, r.common, Kind::Chat { thinking, in_reasoning }))
    });
    match asked {
        Ok((ids, common, kind)) => reply(s, ids, &common, kind).await,
        Err(e) => refuse(&e),
    }
}

async fn completions(State(s): State<Served>, got: Body) -> Response {
    match body(&s, got).await.and_then(|b| CompletionRequest::parse(&b)) {
        Ok(r) => {
            let ids = s.info.tokenizer.encode(&r.prompt, true);
            reply(s, ids, &r.common, Kind::Text).await
        }
        Err(e) => refuse(&e),
    }
}

/// Checks the prompt and the options against the context, queues the request and answers it, streamed or
/// whole.
async fn reply(s: Served, ids: Vec<u32>, common: &api::Common, kind: Kind) -> Response {
    let context = s.info.context;
    if ids.is_empty() || ids.len() >= context {
        let what = format!(
            "the prompt is {} tokens; the context holds {context} (a reply needs one more)",
            ids.len()
        );
        return refuse(&ApiError::bad_request(what));
    }
    let room = context - ids.len();
    let asked = match common.asked(s.max_tokens.min(room) as u32) {
        Ok(a) => a,
        Err(e) => return refuse(&e),
    };
    if asked.opts.max_tokens > room {
        let what = format!(
            "max_tokens {} is past the context: the prompt is {} tokens of {context}, {room} are left",
            asked.opts.max_tokens,
            ids.len()
        );
        return refuse(&ApiError::bad_request(what));
    }
    let (updates, rx) = mpsc::channel(64);
    // The prompt is rendered (thinking on or off) already: the options only say how to reply.
    let job = Job { prompt: ids, opts: asked.opts, updates, queued_at: std::time::Instant::now() };
    if let Err(why) = s.queue.submit(job) {
        return refuse(&ApiError { status: 503, message: why.into(), kind: "server_busy" });
    }
    let n = s.next_id.fetch_add(1, Ordering::Relaxed);
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let head = Head { n, created, model: s.model.clone(), kind };
    if asked.stream { stream(head, rx, asked.include_usage) } else { whole(head, rx).await }
}

/// A response's id, time, model and kind.
struct Head {
    n: u64,
    created: u64,
    model: String,
    kind: Kind,
}

impl Head {
    fn id(&self) -> String {
        match self.kind {
            Kind::Chat { .. } => format!("chatcmpl-{}", self.n),
            Kind::Text => format!("cmpl-{}", self.n),
        }
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.kind, chunk) {
            (Kind::Chat { .. }, false) => "chat.completion",
            (Kind::Chat { .. }, true) => "chat.completion.chunk",
            (Kind::Text, _) => "text_completion",
        }
    }

    fn splitter(&self) -> Option<ReasoningSplitter> {
        match self.kind {
            Kind::Chat { thinking: true, in_reasoning } => Some(ReasoningSplitter::new(in_reasoning)),
            _ => None,
        }
    }

    /// A response object around `choices`.
    fn wrap(&self, chunk: bool, choices: Value) -> Value {
        json!({ "id": self.id(), "object": self.object(chunk), "created": self.created, "model": self.model,
                "choices": choices })
    }
}

/// The whole reply as one JSON response.
async fn whole(head: Head, mut rx: mpsc::Receiver<Update>) -> Response {
    let mut splitter = head.splitter();
    let (mut reasoning, mut answer) = (String::new(), String::new());
    let mut take = |text: &str, finish: bool| {
        let (r, a) = split(&mut splitter, text, finish);
        reasoning.push_str(&r);
        answer.push_str(&a);
    };
    while let Some(update) = rx.recv().await {
        match update {
            Update::Text(t) => take(&t, false),
            Update::Failed(e) => {
                return refuse(&ApiError { status: 500, message: e, kind: "server_error" });
            }
            Update::End { reason, prompt_tokens, completion_tokens, timings } => {
                take("", true);
                let finish = api::finish_reason(&reason);
                let choice = match head.kind {
                    Kind::Chat { .. } => {
                        let mut message = json!({ "role": "assistant", "content": answer });
                        if !reasoning.is_empty() {
                            message["reasoning_content"] = json!(reasoning);
                        }
                        json!({ "index": 0, "message": message, "finish_reason": finish })
                    }
                    Kind::Text => {
                        json!({ "index": 0, "text": answer, "logprobs": null, "finish_reason": finish })
                    }
                };
                let mut out = head.wrap(false, json!([choice]));
                out["usage"] = api::usage(prompt_tokens, completion_tokens);
                out["timings"] = timings.json(prompt_tokens, completion_tokens);
                return axum::Json(out).into_response();
            }
        }
    }
    refuse(&ApiError { status: 500, message: "the engine stopped".into(), kind: "server_error" })
}

/// The reply as server-sent events: one chunk a piece of text, the finish reason, the usage when asked,
/// then `[DONE]`. A client that goes away closes the stream, which cancels the generation.
fn stream(head: Head, mut rx: mpsc::Receiver<Update>, include_usage: bool) -> Response {
    let (tx, events) = mpsc::channel::<Result<SseEvent, std::convert::Infallible>>(64);
    tokio::spawn(async move {
        let send = |v: Value| tx.send(Ok(SseEvent::default().data(v.to_string())));
        let chat = matches!(head.kind, Kind::Chat { .. });
        let delta = |d: Value, finish: Value| {
            if chat {
                head.wrap(true, json!([{ "index": 0, "delta": d, "finish_reason": finish }]))
            } else {
                let text = d.get("content").cloned().unwrap_or(json!(""));
                head.wrap(
                    true,
                    json!([{ "index": 0, "text": text, "logprobs": null, "finish_reason": finish }]),
                )
            }
        };
        if chat && send(delta(json!({ "role": "assistant", "content": "" }), Value::Null)).await.is_err() {
            return;
        }
        let mut splitter = head.splitter();
        while let Some(update) = rx.recv().await {
            let (part, end) = match update {
                Update::Text(t) => (split(&mut splitter, &t, false), None),
                Update::End { reason, prompt_tokens, completion_tokens, timings } => {
                    let end = (reason, prompt_tokens, completion_tokens, timings);
                    (split(&mut splitter, "", true), Some(end))
                }
                Update::Failed(e) => {
                    let error = ApiError { status: 500, message: e, kind: "server_error" };
                    let _ = send(error.body()).await;
                    return;
                }
            };
            for (field, text) in [("reasoning_content", part.0), ("content", part.1)] {
                if !text.is_empty() && send(delta(json!({ field: text }), Value::Null)).await.is_err() {
                    return; // the client left: dropping `rx` cancels the generation
                }
            }
            if let Some((reason, prompt_tokens, completion_tokens, timings)) = end {
                // The finish chunk carries the engine's timings, as llama-server's last chunk does.
                let mut finish = delta(json!({}), json!(api::finish_reason(&reason)));
                finish["timings"] = timings.json(prompt_tokens, completion_tokens);
                let _ = send(finish).await;
                if include_usage {
                    let mut usage = head.wrap(true, json!([]));
                    usage["usage"] = api::usage(prompt_tokens, completion_tokens);
                    let _ = send(usage).await;
                }
                let _ = tx.send(Ok(SseEvent::default().data("[DONE]"))).await;
                return;
            }
        }
    });
    Sse::new(ReceiverStream::new(events)).into_response()
}

/// `text` split into (reasoning, answer); all answer without a splitter.
fn split(splitter: &mut Option<ReasoningSplitter>, text: &str, finish: bool) -> (String, String) {
    match splitter {
        Some(sp) => {
            let part = if finish { sp.finish() } else { sp.push(text) };
            (part.reasoning, part.answer)
        }
        None => (String::new(), text.to_owned()),
    }
}
