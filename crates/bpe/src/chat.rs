//! Chat templates: Qwen's (ChatML) rendered in Rust, and (feature `jinja`) a model's own Jinja template.
//!
//! [`ChatTemplate::Qwen3`] follows, branch for branch, the Jinja template of Qwen3's `tokenizer_config.json`
//! (system prompt and tool signatures, multi-step tool calls, `<think>` reasoning split off assistant turns
//! before the last user query, tool responses merged into one user turn, `enable_thinking`); its goldens are
//! rendered by jinja2 from that file (`scripts/bpe/make_chat_goldens.py`).
//!
//! [`ChatTemplate::Qwen35`] differs in the generation prompt: the assistant turn opens with `<think>\n` when
//! thinking is on. Its conversation rendering is Qwen3's; Qwen3.5's own template (not in the packages the
//! tests fetch, so without goldens) is reported to write tool calls differently (`<function=…>` /
//! `<parameter=…>` blocks), so tool calls rendered for Qwen3.5 are not yet what that model was trained on.
//!
//! `JinjaTemplate` (feature `jinja`) renders the template a GGUF carries (`tokenizer.chat_template`) as
//! Hugging Face does; Qwen3's own renders every golden case to the byte, and a tokenizer built with a
//! template renders with it ([`Tokenizer::render_chat`](crate::Tokenizer::render_chat)).
//!
//! ```
//! use diskformer_bpe::chat::{ChatOptions, ChatTemplate, Message};
//!
//! let messages = [Message::system("Be brief."), Message::user("Hi")];
//! let options = ChatOptions { enable_thinking: false, ..Default::default() };
//! let prompt = ChatTemplate::Qwen3.render(&messages, &options);
//! assert_eq!(
//!     prompt,
//!     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n\
//!      <|im_start|>assistant\n<think>\n\n</think>\n\n"
//! );
//! ```

/// Who speaks a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The system prompt (first message), or a later system message.
    System,
    /// The user.
    User,
    /// The model.
    Assistant,
    /// A tool's response to a call.
    Tool,
}

impl Role {
    /// The name written after `<|im_start|>`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::System => "system",
            Self::User => "user",
            Self::Assistant => "assistant",
            Self::Tool => "tool",
        }
    }
}

/// A tool call made by the assistant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ToolCall {
    /// The function name.
    pub name: String,
    /// The arguments as JSON text, written verbatim (as the template does for string arguments).
    pub arguments: String,
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Message {
    /// Who speaks.
    pub role: Role,
    /// The text.
    pub content: String,
    /// The assistant's reasoning; when `None`, a `<think>…</think>` block in `content` is split off instead.
    pub reasoning_content: Option<String>,
    /// Tool calls of an assistant message.
    pub tool_calls: Vec<ToolCall>,
}

impl Message {
    /// A message with no reasoning and no tool calls.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Self { role, content: content.into(), reasoning_content: None, tool_calls: Vec::new() }
    }

    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }

    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }

    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }

    /// A tool response.
    pub fn tool(content: impl Into<String>) -> Self {
        Self::new(Role::Tool, content)
    }
}

/// Rendering options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatOptions {
    /// Open an assistant turn at the end (default true).
    pub add_generation_prompt: bool,
    /// Let the model think (default true); when false the generation prompt carries an empty think block.
    pub enable_thinking: bool,
    /// Tool signatures, each as the JSON text to place in `<tools>` (the template's `tool | tojson`).
    pub tools: Vec<String>,
}

impl Default for ChatOptions {
    fn default() -> Self {
        Self { add_generation_prompt: true, enable_thinking: true, tools: Vec::new() }
    }
}

/// The chat templates this crate renders.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ChatTemplate {
    /// Qwen3 (and Qwen3 MoE).
    Qwen3,
    /// Qwen3.5 / 3.6.
    Qwen35,
}

const TOOLS_HEAD: &str = "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n\
You are provided with function signatures within <tools></tools> XML tags:\n<tools>";
const TOOLS_TAIL: &str = "\n</tools>\n\nFor each function call, return a json object with function name and \
arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": \
<args-json-object>}\n</tool_call><|im_end|>\n";

impl ChatTemplate {
    /// The template for a GGUF's pre-tokenizer (`qwen2` → Qwen3, `qwen35` → Qwen3.5).
    pub fn for_pre_tokenizer(pre: crate::PreTokenizer) -> Self {
        match pre {
            crate::PreTokenizer::Qwen2 => Self::Qwen3,
            crate::PreTokenizer::Qwen35 => Self::Qwen35,
        }
    }

    /// Renders a conversation to the prompt text (encode it with special-token parsing on).
    pub fn render(self, messages: &[Message], options: &ChatOptions) -> String {
        let mut out = String::new();
        let first_is_system = messages.first().is_some_and(|m| m.role == Role::System);
        if !options.tools.is_empty() {
            out.push_str("<|im_start|>system\n");
            if first_is_system {
                out.push_str(&messages[0].content);
                out.push_str("\n\n");
            }
            out.push_str(TOOLS_HEAD);
            for tool in &options.tools {
                out.push('\n');
                out.push_str(tool);
            }
            out.push_str(TOOLS_TAIL);
        } else if first_is_system {
            out.push_str("<|im_start|>system\n");
            out.push_str(&messages[0].content);
            out.push_str("<|im_end|>\n");
        }

        // The last user message that is not a wrapped tool response.
        let last_query = messages
            .iter()
            .rposition(|m| {
                m.role == Role::User
                    && !(m.content.starts_with("<tool_response>") && m.content.ends_with("</tool_response>"))
            })
            .unwrap_or(messages.len().wrapping_sub(1));

        for (i, m) in messages.iter().enumerate() {
            match m.role {
                Role::System if i == 0 => {}
                Role::User | Role::System => {
                    out.push_str("<|im_start|>");
                    out.push_str(m.role.as_str());
                    out.push('\n');
                    out.push_str(&m.content);
                    out.push_str("<|im_end|>\n");
                }
                Role::Assistant => {
                    let (content, reasoning) = split_reasoning(m);
                    out.push_str("<|im_start|>assistant\n");
                    if i > last_query && (i + 1 == messages.len() || !reasoning.is_empty()) {
                        out.push_str("<think>\n");
                        out.push_str(reasoning.trim_matches('\n'));
                        out.push_str("\n</think>\n\n");
                        out.push_str(content.trim_start_matches('\n'));
                    } else {
                        out.push_str(content);
                    }
                    for (j, call) in m.tool_calls.iter().enumerate() {
                        if j > 0 || !content.is_empty() {
                            out.push('\n');
                        }
                        out.push_str("<tool_call>\n{\"name\": \"");
                        out.push_str(&call.name);
                        out.push_str("\", \"arguments\": ");
                        out.push_str(&call.arguments);
                        out.push_str("}\n</tool_call>");
                    }
                    out.push_str("<|im_end|>\n");
                }
                Role::Tool => {
                    if i == 0 || messages[i - 1].role != Role::Tool {
                        out.push_str("<|im_start|>user");
                    }
                    out.push_str("\n<tool_response>\n");
                    out.push_str(&m.content);
                    out.push_str("\n</tool_response>");
                    if i + 1 == messages.len() || messages[i + 1].role != Role::Tool {
                        out.push_str("<|im_end|>\n");
                    }
                }
            }
        }

        if options.add_generation_prompt {
            out.push_str("<|im_start|>assistant\n");
            match (self, options.enable_thinking) {
                (_, false) => out.push_str("<think>\n\n</think>\n\n"),
                (Self::Qwen35, true) => out.push_str("<think>\n"),
                (Self::Qwen3, true) => {}
            }
        }
        out
    }
}

/// (content, reasoning) of an assistant message, as the template computes them.
fn split_reasoning(m: &Message) -> (&str, &str) {
    if let Some(r) = &m.reasoning_content {
        return (&m.content, r);
    }
    match m.content.find("</think>") {
        Some(_) => {
            let after = m.content.rsplit("</think>").next().unwrap_or_default().trim_start_matches('\n');
            let before = m.content.split("</think>").next().unwrap_or_default().trim_end_matches('\n');
            let reasoning = before.rsplit("<think>").next().unwrap_or_default().trim_start_matches('\n');
            (after, reasoning)
        }
        None => (&m.content, ""),
    }
}

/// The model's own chat template as its tokenizer holds it, compiled once (with the `jinja` feature).
#[derive(Clone, Debug, Default)]
pub(crate) struct ModelTemplate {
    #[cfg(feature = "jinja")]
    compiled: Option<std::sync::Arc<JinjaTemplate>>,
    /// Why a template the model has is not used.
    problem: Option<String>,
}

impl ModelTemplate {
    /// Compiles `source` where there is one.
    pub(crate) fn new(source: Option<String>) -> Self {
        let Some(source) = source else { return Self::default() };
        #[cfg(feature = "jinja")]
        {
            match JinjaTemplate::new(&source) {
                Ok(t) => Self { compiled: Some(std::sync::Arc::new(t)), problem: None },
                Err(e) => Self {
                    compiled: None,
                    problem: Some(format!("{e}; the built-in template of the model's family is used")),
                },
            }
        }
        #[cfg(not(feature = "jinja"))]
        {
            drop(source);
            Self {
                problem: Some(
                    "this build renders no Jinja (feature `jinja`); the built-in template of the model's \
                     family is used"
                        .into(),
                ),
            }
        }
    }

    /// The conversation rendered by the model's template; `None` without one, or where it refused.
    pub(crate) fn render(&self, messages: &[Message], options: &ChatOptions) -> Option<String> {
        #[cfg(feature = "jinja")]
        if let Some(t) = &self.compiled {
            return t.render(messages, options).ok();
        }
        let _ = (messages, options);
        None
    }

    /// Why the model's template is not used, where it has one.
    pub(crate) fn problem(&self) -> Option<&str> {
        self.problem.as_deref()
    }
}

/// A chat template in Jinja, as a GGUF's `tokenizer.chat_template` or a `tokenizer_config.json` holds it,
/// rendered as Hugging Face's `apply_chat_template` renders it: `trim_blocks` and `lstrip_blocks`, loop
/// controls, Python's string methods (`startswith`, `split`, `strip`, …), `tojson` as Python's
/// `json.dumps(ensure_ascii=False)` writes (`", "` and `": "` between items; `indent` taken), and
/// `raise_exception`. Qwen3's template renders every case of the crate's jinja2 goldens to the byte.
#[cfg(feature = "jinja")]
pub struct JinjaTemplate {
    env: minijinja::Environment<'static>,
}

/// A chat template that does not compile, or that refused a conversation.
#[cfg(feature = "jinja")]
#[derive(Debug, thiserror::Error)]
#[error("the chat template: {0}")]
pub struct TemplateError(String);

#[cfg(feature = "jinja")]
impl From<minijinja::Error> for TemplateError {
    fn from(e: minijinja::Error) -> Self {
        TemplateError(format!("{e:#}"))
    }
}

#[cfg(feature = "jinja")]
impl std::fmt::Debug for JinjaTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JinjaTemplate").finish_non_exhaustive()
    }
}

#[cfg(feature = "jinja")]
const JINJA_NAME: &str = "chat";

#[cfg(feature = "jinja")]
impl JinjaTemplate {
    /// Compiles `source`.
    ///
    /// # Errors
    /// A [`TemplateError`] naming the syntax error and its line.
    pub fn new(source: &str) -> Result<Self, TemplateError> {
        use minijinja::{Error, ErrorKind};
        let mut env = minijinja::Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", python_json);
        env.add_function("raise_exception", |what: String| -> Result<String, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, what))
        });
        env.add_template_owned(JINJA_NAME, source.to_owned())?;
        Ok(JinjaTemplate { env })
    }

    /// Renders a conversation to the prompt text (encode it with special-token parsing on). The messages
    /// are given as Hugging Face gives them (`role`, `content`, `reasoning_content` where there is one,
    /// `tool_calls` as `{"type": "function", "function": {"name", "arguments"}}` with the arguments' JSON
    /// text), the tools parsed from their JSON text, `add_generation_prompt` and `enable_thinking`.
    ///
    /// # Errors
    /// A [`TemplateError`] for a tool that is not JSON, or where the template fails or refuses
    /// (`raise_exception`).
    pub fn render(&self, messages: &[Message], options: &ChatOptions) -> Result<String, TemplateError> {
        use minijinja::Value;
        let tools = options
            .tools
            .iter()
            .enumerate()
            .map(|(i, t)| {
                serde_json::from_str::<serde_json::Value>(t)
                    .map_err(|e| TemplateError(format!("tool {i} is not JSON: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let messages: Vec<Value> = messages.iter().map(message_value).collect();
        let context = minijinja::context! {
            messages => messages,
            tools => if tools.is_empty() { Value::from(()) } else { Value::from_serialize(&tools) },
            add_generation_prompt => options.add_generation_prompt,
            enable_thinking => options.enable_thinking,
        };
        Ok(self.env.get_template(JINJA_NAME)?.render(context)?)
    }
}

/// A message as Hugging Face's templates take it.
#[cfg(feature = "jinja")]
fn message_value(m: &Message) -> minijinja::Value {
    use minijinja::Value;
    let mut fields: Vec<(&str, Value)> =
        vec![("role", Value::from(m.role.as_str())), ("content", Value::from(m.content.as_str()))];
    if let Some(r) = &m.reasoning_content {
        fields.push(("reasoning_content", Value::from(r.as_str())));
    }
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| {
                let function = Value::from_iter([
                    ("name", Value::from(c.name.as_str())),
                    ("arguments", Value::from(c.arguments.as_str())),
                ]);
                Value::from_iter([("type", Value::from("function")), ("function", function)])
            })
            .collect();
        fields.push(("tool_calls", Value::from(calls)));
    }
    Value::from_iter(fields)
}

/// `tojson` as Python's `json.dumps(value, ensure_ascii=False, indent=indent)` writes it (Hugging Face's
/// filter): `", "` and `": "` between items without `indent`, a line an item with it; no HTML escaping.
#[cfg(feature = "jinja")]
fn python_json(
    value: minijinja::Value,
    kwargs: minijinja::value::Kwargs,
) -> Result<minijinja::Value, minijinja::Error> {
    use serde::Serialize;
    let indent: Option<usize> = kwargs.get("indent")?;
    kwargs.assert_all_used()?;
    let fail =
        |e: serde_json::Error| minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string());
    let mut out = Vec::new();
    match indent {
        Some(n) => {
            let spaces = vec![b' '; n];
            let mut ser = serde_json::Serializer::with_formatter(
                &mut out,
                serde_json::ser::PrettyFormatter::with_indent(&spaces),
            );
            value.serialize(&mut ser).map_err(fail)?;
        }
        None => value
            .serialize(&mut serde_json::Serializer::with_formatter(&mut out, PythonFormatter))
            .map_err(fail)?,
    }
    Ok(minijinja::Value::from_safe_string(String::from_utf8(out).expect("serde_json writes UTF-8")))
}

/// Python's default JSON separators: `", "` between items, `": "` after keys.
#[cfg(feature = "jinja")]
struct PythonFormatter;

#[cfg(feature = "jinja")]
impl serde_json::ser::Formatter for PythonFormatter {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first { Ok(()) } else { w.write_all(b", ") }
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}
