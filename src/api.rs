//! The OpenAI API's requests and responses as the `diskformer serve` server reads and writes them, and the
//! checks that turn a request into a prompt and generation options (each failure a 400 naming the field).
//! Here in the library (feature `cli`) rather than in the binary so that a fuzz target reaches the request
//! parsing (`fuzz/`: any bytes as a body either parse or are refused, never a panic).

use crate::bpe::chat::{Message, Role};
use crate::runtime::{EndReason, GenerateOptions, SamplingOptions};
use serde::Deserialize;
use serde_json::{Value, json};
use std::time::Duration;

/// `POST /v1/chat/completions`.
#[derive(Debug, Deserialize)]
pub struct ChatRequest {
    /// The model asked for (one model is served, whatever the name).
    pub model: Option<String>,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// The fields both endpoints take.
    #[serde(flatten)]
    pub common: Common,
    /// Qwen3's thinking switch (llama-server's and vLLM's spellings).
    pub enable_thinking: Option<bool>,
    /// The chat template's arguments (vLLM's and llama-server's way to switch thinking).
    pub chat_template_kwargs: Option<TemplateKwargs>,
}

/// `POST /v1/completions`.
#[derive(Debug, Deserialize)]
pub struct CompletionRequest {
    /// The model asked for (one model is served, whatever the name).
    pub model: Option<String>,
    /// The text to continue.
    pub prompt: String,
    /// The fields both endpoints take.
    #[serde(flatten)]
    pub common: Common,
}

/// The fields both endpoints take.
#[derive(Debug, Default, Deserialize)]
pub struct Common {
    /// Server-sent events, a chunk a token.
    #[serde(default)]
    pub stream: bool,
    /// With `stream`: whether a last chunk carries the usage.
    pub stream_options: Option<StreamOptions>,
    /// Most tokens to generate (the older spelling).
    pub max_tokens: Option<u32>,
    /// Most tokens to generate (the newer spelling, which wins).
    pub max_completion_tokens: Option<u32>,
    /// Sampling temperature (0: greedy).
    pub temperature: Option<f32>,
    /// Nucleus sampling's mass.
    pub top_p: Option<f32>,
    /// Most candidates kept (0: all).
    pub top_k: Option<u32>,
    /// Candidates below this fraction of the best one's probability dropped.
    pub min_p: Option<f32>,
    /// Subtracted from the logit of every token already generated.
    pub presence_penalty: Option<f32>,
    /// Subtracted from the logit of every recent token once for each time it occurs among them.
    pub frequency_penalty: Option<f32>,
    /// llama.cpp's repetition penalty.
    pub repetition_penalty: Option<f32>,
    /// The sampler's seed (default: a new one a request).
    pub seed: Option<u64>,
    /// Strings that end the reply.
    pub stop: Option<Stop>,
    /// Choices asked for: only 1 is served.
    pub n: Option<u32>,
    /// The caller's name (not used).
    pub user: Option<String>,
}

/// `stream_options`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamOptions {
    /// A last chunk with the usage.
    #[serde(default)]
    pub include_usage: bool,
}

/// `chat_template_kwargs`: of the template's arguments, only the thinking switch is read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateKwargs {
    /// Qwen3's thinking switch.
    pub enable_thinking: Option<bool>,
}

/// `stop`: one string or several.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Stop {
    /// One string.
    One(String),
    /// Up to 4.
    Many(Vec<String>),
}

/// One message of a conversation.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ChatMessage {
    /// system, developer, user, assistant or tool.
    pub role: String,
    /// Its text.
    pub content: Option<Content>,
    /// An assistant message's reasoning, as this server returns it.
    pub reasoning_content: Option<String>,
    /// The speaker's name (not used).
    pub name: Option<String>,
}

/// A message's content: text, or parts of which only text is taken.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    /// Plain text.
    Text(String),
    /// Parts, each of which must be text.
    Parts(Vec<Part>),
}

/// One part of a message's content.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Part {
    /// Its type: only `text` is read.
    #[serde(rename = "type")]
    pub kind: String,
    /// Its text.
    pub text: Option<String>,
}

/// The fields of [`Common`], and each endpoint's own.
const COMMON: [&str; 16] = [
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "seed",
    "stop",
    "n",
    "user",
    "model",
];
const CHAT: [&str; 3] = ["messages", "enable_thinking", "chat_template_kwargs"];
const COMPLETION: [&str; 1] = ["prompt"];

/// Parses a request body of type `T`, refusing malformed JSON, wrong types and fields the endpoint does not
/// know (serde cannot deny unknown fields of a struct with a flattened part).
fn parse<T: serde::de::DeserializeOwned>(body: &[u8], own: &[&str]) -> Result<T, ApiError> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the body is not JSON: {e}")))?;
    let Some(fields) = value.as_object() else {
        return Err(ApiError::bad_request("the body must be a JSON object"));
    };
    if let Some(unknown) = fields.keys().find(|k| !COMMON.contains(&k.as_str()) && !own.contains(&k.as_str()))
    {
        return Err(ApiError::bad_request(format!("unknown field {unknown:?}")));
    }
    serde_json::from_value(value).map_err(|e| ApiError::bad_request(e.to_string()))
}

impl ChatRequest {
    /// Parses a body, refusing malformed JSON, wrong types and unknown fields.
    ///
    /// # Errors
    /// A 400 [`ApiError`] naming what was wrong.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        parse(body, &CHAT)
    }
}

impl CompletionRequest {
    /// Parses a body, as [`ChatRequest::parse`].
    ///
    /// # Errors
    /// A 400 [`ApiError`] naming what was wrong.
    pub fn parse(body: &[u8]) -> Result<Self, ApiError> {
        parse(body, &COMPLETION)
    }
}

/// A request refused: its status and what to tell the client.
#[derive(Debug)]
pub struct ApiError {
    /// The HTTP status.
    pub status: u16,
    /// What was wrong, and what to do.
    pub message: String,
    /// OpenAI's error type.
    pub kind: &'static str,
}

impl ApiError {
    /// A 400 with this message.
    pub fn bad_request(message: impl Into<String>) -> Self {
        ApiError { status: 400, message: message.into(), kind: "invalid_request_error" }
    }

    /// The body OpenAI's clients parse.
    pub fn body(&self) -> Value {
        json!({ "error": { "message": self.message, "type": self.kind, "param": null, "code": null } })
    }
}

/// What a request asks the engine for.
pub struct Asked {
    /// Generation options.
    pub opts: GenerateOptions,
    /// Server-sent events.
    pub stream: bool,
    /// A last chunk with the usage.
    pub include_usage: bool,
}

impl Common {
    /// Generation options from the request's fields, each checked.
    ///
    /// # Errors
    /// A 400 [`ApiError`] naming the field.
    pub fn asked(&self, default_max_tokens: u32) -> Result<Asked, ApiError> {
        if self.n.is_some_and(|n| n != 1) {
            return Err(ApiError::bad_request("n: one choice a request is served (n = 1)"));
        }
        let mut sampling = SamplingOptions {
            // OpenAI's default temperature is 1; top-k 0 and top-p 1 leave every token in.
            temperature: self.temperature.unwrap_or(1.0),
            top_p: self.top_p.unwrap_or(1.0),
            top_k: self.top_k.unwrap_or(0) as usize,
            min_p: self.min_p.unwrap_or(0.0),
            presence_penalty: self.presence_penalty.unwrap_or(0.0),
            frequency_penalty: self.frequency_penalty.unwrap_or(0.0),
            repetition_penalty: self.repetition_penalty.unwrap_or(1.0),
            ..SamplingOptions::default()
        };
        // Without a seed, each request draws differently.
        sampling.seed = self.seed.unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64)
        });
        sampling.validate().map_err(ApiError::bad_request)?;
        let max_tokens = self.max_completion_tokens.or(self.max_tokens).unwrap_or(default_max_tokens);
        if max_tokens == 0 {
            return Err(ApiError::bad_request("max_tokens must be at least 1"));
        }
        let stop = match &self.stop {
            None => Vec::new(),
            Some(Stop::One(s)) => vec![s.clone()],
            Some(Stop::Many(v)) if v.len() > 4 => {
                return Err(ApiError::bad_request("stop: at most 4 strings"));
            }
            Some(Stop::Many(v)) => v.clone(),
        };
        let mut opts = GenerateOptions::default();
        opts.sampling = sampling;
        opts.max_tokens = max_tokens as usize;
        opts.stop = stop;
        let include_usage = self.stream_options.as_ref().is_some_and(|o| o.include_usage);
        Ok(Asked { opts, stream: self.stream, include_usage })
    }
}

impl ChatRequest {
    /// The conversation as the chat template takes it, and whether the model may think first: unless the
    /// request turns thinking off, the last `/think` or `/no_think` in its system and user messages decides
    /// (Qwen3's soft switch, which its model card says a turn follows when thinking is on; switched here in
    /// the template, so that a model not trained on it follows it too), and thinking is on without either.
    ///
    /// # Errors
    /// A 400 [`ApiError`] naming the message.
    pub fn conversation(&self) -> Result<(Vec<Message>, bool), ApiError> {
        if self.messages.is_empty() {
            return Err(ApiError::bad_request("messages: at least one message is needed"));
        }
        let mut out = Vec::with_capacity(self.messages.len());
        for (i, m) in self.messages.iter().enumerate() {
            let role = match m.role.as_str() {
                "system" | "developer" => Role::System,
                "user" => Role::User,
                "assistant" => Role::Assistant,
                "tool" => Role::Tool,
                other => {
                    return Err(ApiError::bad_request(format!(
                        "messages[{i}].role: {other:?} is not one of system, developer, user, assistant, tool"
                    )));
                }
            };
            let content = match &m.content {
                None => String::new(),
                Some(Content::Text(t)) => t.clone(),
                Some(Content::Parts(parts)) => {
                    let mut text = String::new();
                    for (j, p) in parts.iter().enumerate() {
                        match (p.kind.as_str(), &p.text) {
                            ("text", Some(t)) => text.push_str(t),
                            _ => {
                                return Err(ApiError::bad_request(format!(
                                    "messages[{i}].content[{j}]: only text parts are read (type \"text\" with a text)"
                                )));
                            }
                        }
                    }
                    text
                }
            };
            let mut message = match role {
                Role::System => Message::system(content),
                Role::User => Message::user(content),
                Role::Assistant => Message::assistant(content),
                Role::Tool => Message::tool(content),
            };
            message.reasoning_content.clone_from(&m.reasoning_content);
            out.push(message);
        }
        let asked =
            self.chat_template_kwargs.as_ref().and_then(|k| k.enable_thinking).or(self.enable_thinking);
        let thinking = asked != Some(false) && soft_switch(&out).unwrap_or(true);
        Ok((out, thinking))
    }
}

/// The last of Qwen3's soft switches (`/think`: true, `/no_think`: false) among the words of the system and
/// user messages.
fn soft_switch(messages: &[Message]) -> Option<bool> {
    messages
        .iter()
        .filter(|m| matches!(m.role, Role::System | Role::User))
        .flat_map(|m| m.content.split_whitespace())
        .filter_map(|word| match word {
            "/think" => Some(true),
            "/no_think" => Some(false),
            _ => None,
        })
        .next_back()
}

/// OpenAI's name for why a reply ended.
pub fn finish_reason(end: &EndReason) -> &'static str {
    match end {
        EndReason::StopToken(_) | EndReason::StopString(_) | EndReason::Cancelled => "stop",
        EndReason::MaxTokens | EndReason::ContextFull => "length",
    }
}

/// The `usage` object.
pub fn usage(prompt: usize, completion: usize) -> Value {
    json!({ "prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion })
}

/// Where a reply's time went on the engine's side, as measured by the engine's thread: what a client
/// compares its own times with to see the server's overhead.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Timings {
    /// From the handler queueing the request to the engine taking it.
    pub queued: Duration,
    /// From the engine taking it to its first token (the prompt's prefill and the first pick).
    pub prompt: Duration,
    /// From the engine taking it to the first text it handed on (later than the first token when that
    /// token's text was held back: part of a character, or the start of a stop string).
    pub first_text: Duration,
    /// From the first token to the end, over the tokens after the first.
    pub predicted: Duration,
}

impl Timings {
    /// The `timings` object (llama-server's names, with `queued_ms` and `first_text_ms` added) of a reply
    /// of `completion` tokens after a prompt of `prompt` tokens.
    pub fn json(&self, prompt: usize, completion: usize) -> Value {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        let per_second = |n: usize, d: Duration| if d.is_zero() { 0.0 } else { n as f64 / d.as_secs_f64() };
        let predicted = completion.saturating_sub(1);
        json!({
            "queued_ms": ms(self.queued), "first_text_ms": ms(self.first_text),
            "prompt_n": prompt, "prompt_ms": ms(self.prompt), "prompt_per_second": per_second(prompt, self.prompt),
            "predicted_n": predicted, "predicted_ms": ms(self.predicted),
            "predicted_per_second": per_second(predicted, self.predicted),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<ChatRequest, ApiError> {
        ChatRequest::parse(body.to_string().as_bytes())
    }

    #[test]
    fn a_chat_request_becomes_a_conversation_and_options() {
        let r = chat(json!({
            "model": "m", "messages": [{"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "hi "}, {"type": "text", "text": "there"}]}],
            "temperature": 0.5, "top_k": 20, "max_tokens": 7, "stop": "x", "seed": 3, "stream": true,
            "stream_options": {"include_usage": true}, "chat_template_kwargs": {"enable_thinking": false}
        }))
        .unwrap();
        let (messages, thinking) = r.conversation().unwrap();
        assert_eq!(messages, [Message::system("be brief"), Message::user("hi there")]);
        assert!(!thinking);
        let a = r.common.asked(100).unwrap();
        assert!(a.stream && a.include_usage);
        assert_eq!((a.opts.max_tokens, a.opts.stop.clone()), (7, vec!["x".to_owned()]));
        assert_eq!((a.opts.sampling.temperature, a.opts.sampling.top_k, a.opts.sampling.seed), (0.5, 20, 3));
    }

    #[test]
    fn the_last_soft_switch_turns_thinking_on_or_off_unless_the_request_turned_it_off() {
        let thinking = |messages: Value, extra: Value| {
            let mut body = json!({"messages": messages});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            chat(body).unwrap().conversation().unwrap().1
        };
        let user = |text: &str| json!({"role": "user", "content": text});
        let none = json!({});
        assert!(thinking(json!([user("hi")]), none.clone()));
        assert!(!thinking(json!([user("hi /no_think")]), none.clone()));
        assert!(!thinking(json!([{"role": "system", "content": "/no_think"}, user("hi")]), none.clone()));
        assert!(thinking(
            json!([user("hi /no_think"), {"role": "assistant", "content": "ok"}, user("/think why?")]),
            none.clone()
        ));
        assert!(!thinking(json!([user("/think hi"), user("and now /no_think")]), none.clone()));
        // An assistant's words switch nothing, nor does a switch inside a word.
        assert!(thinking(
            json!([{"role": "assistant", "content": "/no_think"}, user("a/no_think")]),
            none.clone()
        ));
        // Asked for by the request: on lets the switch decide, off wins.
        assert!(!thinking(json!([user("hi /no_think")]), json!({"enable_thinking": true})));
        assert!(!thinking(
            json!([user("/think hi")]),
            json!({"chat_template_kwargs": {"enable_thinking": false}})
        ));
    }

    #[test]
    fn bad_requests_are_refused_naming_the_field() {
        assert!(
            chat(json!({"messages": [], "temperature": "hot"})).unwrap_err().message.contains("invalid type")
        );
        assert!(chat(json!({"messages": [], "tempature": 1})).unwrap_err().message.contains("tempature"));
        assert!(ChatRequest::parse(b"{\"messages\": [").unwrap_err().message.contains("not JSON"));
        assert!(ChatRequest::parse(b"[]").unwrap_err().message.contains("object"));
        let nested = json!({"messages": [{"role": "user", "content": "x", "mood": 1}]});
        assert!(chat(nested).unwrap_err().message.contains("mood"));
        let body = json!({"messages": [{"role": "user", "content": "x"}], "frequency_penalty": 0.5});
        assert_eq!(chat(body).unwrap().common.asked(10).unwrap().opts.sampling.frequency_penalty, 0.5);
        let refused = |body: Value| {
            let r = chat(body).unwrap();
            r.conversation().err().or_else(|| r.common.asked(10).err()).unwrap().message
        };
        assert!(refused(json!({"messages": []})).contains("messages"));
        assert!(
            refused(json!({"messages": [{"role": "robot", "content": "x"}]})).contains("messages[0].role")
        );
        let image = json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]});
        assert!(refused(image).contains("messages[0].content[0]"));
        let one = |extra: Value| {
            let mut body = json!({"messages": [{"role": "user", "content": "x"}]});
            body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
            refused(body)
        };
        assert!(one(json!({"n": 2})).contains("n:"));
        assert!(one(json!({"max_tokens": 0})).contains("max_tokens"));
        assert!(one(json!({"temperature": -1.0})).contains("temperature"));
        assert!(one(json!({"stop": ["a", "b", "c", "d", "e"]})).contains("stop"));
    }
}
