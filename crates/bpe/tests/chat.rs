//! Protects the chat templates: the Qwen3 renderer equals jinja2 running Qwen3's own template on the golden
//! conversations, and the Qwen3.5 generation prompt opens the think block.

use diskformer_bpe::chat::{ChatOptions, ChatTemplate, Message, Role, ToolCall};
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    name: String,
    messages: Vec<JsonMessage>,
    add_generation_prompt: bool,
    enable_thinking: bool,
    tools: Vec<String>,
    rendered: String,
}

#[derive(Deserialize)]
struct JsonMessage {
    role: String,
    content: String,
    reasoning_content: Option<String>,
    #[serde(default)]
    tool_calls: Vec<JsonToolCall>,
}

#[derive(Deserialize)]
struct JsonToolCall {
    function: JsonFunction,
}

#[derive(Deserialize)]
struct JsonFunction {
    name: String,
    arguments: String,
}

fn message(m: JsonMessage) -> Message {
    let role = match m.role.as_str() {
        "system" => Role::System,
        "user" => Role::User,
        "assistant" => Role::Assistant,
        "tool" => Role::Tool,
        other => panic!("role {other}"),
    };
    Message {
        role,
        content: m.content,
        reasoning_content: m.reasoning_content,
        tool_calls: m
            .tool_calls
            .into_iter()
            .map(|c| ToolCall { name: c.function.name, arguments: c.function.arguments })
            .collect(),
    }
}

#[test]
fn qwen3_matches_jinja() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden_chat_qwen3.json");
    let golden: Golden = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(golden.cases.len() >= 8);
    for case in golden.cases {
        let messages: Vec<Message> = case.messages.into_iter().map(message).collect();
        let options = ChatOptions {
            add_generation_prompt: case.add_generation_prompt,
            enable_thinking: case.enable_thinking,
            tools: case.tools,
        };
        assert_eq!(ChatTemplate::Qwen3.render(&messages, &options), case.rendered, "case {:?}", case.name);
    }
}

#[test]
fn qwen35_generation_prompt() {
    let m = [Message::user("Hi")];
    let on = ChatTemplate::Qwen35.render(&m, &ChatOptions::default());
    assert!(on.ends_with("<|im_start|>assistant\n<think>\n"), "{on:?}");
    let off = ChatTemplate::Qwen35.render(&m, &ChatOptions { enable_thinking: false, ..Default::default() });
    assert!(off.ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n"), "{off:?}");
    let qwen3 = ChatTemplate::Qwen3.render(&m, &ChatOptions::default());
    assert!(qwen3.ends_with("<|im_start|>assistant\n"), "{qwen3:?}");
}
