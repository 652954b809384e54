//! The built-in demo model (`diskformer::demo`) answers in words: asked what a noun of "The Devil's
//! Dictionary" it recalls is, its greedy reply opens with the entry's headword as it was trained to ("A
//! cynic, n. …"), whether its experts are all resident or stream through a pool of 2 × top-k slots with the
//! misses on the CPU; and `diskformer chat` without `--model` runs it (lavapipe in CI).

use std::process::Command;

use diskformer::bpe::chat::Message;
use diskformer::demo::write_demo;
use diskformer::qwen3_moe::{Engine, EngineOptions, Event, GenerateOptions};

/// Nouns whose entries it recalls (of 40 entries drawn at random, it opened 19 replies with the headword:
/// demo/README.md), with their articles.
const NOUNS: [&str; 5] = ["a cynic", "an abstainer", "a bore", "a dog", "an egotist"];

/// The greedy reply to "What is `noun`?", up to 24 tokens.
fn ask(engine: &mut Engine, noun: &str) -> String {
    engine.reset();
    let mut opts = GenerateOptions::default();
    (opts.max_tokens, opts.thinking) = (24, false);
    let mut text = String::new();
    for event in engine.generate(&[Message::user(format!("What is {noun}?"))], &opts).unwrap() {
        if let Event::Text(t) = event.unwrap() {
            text.push_str(&t);
        }
    }
    text
}

#[test]
fn the_demo_model_answers_with_its_dictionary_entries() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = write_demo(dir.path()).unwrap();
    assert_eq!(write_demo(dir.path()).unwrap(), gguf, "written once");
    let mut streaming = EngineOptions::default();
    (streaming.pool_slots, streaming.cpu.enabled) = (Some(4), Some(true));
    for (name, opts) in [("resident", EngineOptions::default()), ("streaming", streaming)] {
        let mut engine = Engine::open_gguf(&gguf, None, &opts, &mut |_| {}).unwrap();
        for noun in NOUNS {
            let reply = ask(&mut engine, noun);
            let headword = format!("{}{}, n.", noun[..1].to_uppercase(), &noun[1..]);
            assert!(reply.starts_with(&headword), "{name}: asked about {noun:?}, got {reply:?}");
        }
    }
}

#[test]
fn chat_without_a_model_runs_the_demo() {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_diskformer"))
        .args(["chat", "--prompt", "What is a cynic?", "--max-tokens", "24"])
        .args(["--temperature", "0", "--no-think"])
        .env("TMPDIR", home.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("built-in demo model"), "{stderr}");
    let reply = String::from_utf8_lossy(&out.stdout);
    assert!(reply.starts_with("A cynic, n."), "{reply:?}");
}
