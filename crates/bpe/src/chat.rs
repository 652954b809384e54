//! Qwen chat templates (ChatML), rendered in Rust.
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
