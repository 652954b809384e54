//! `diskformer chat` on a qwen35moe file (lavapipe in CI): the architecture is recognised, the model runs
//! with every weight on the GPU, and the reply printed is the one the library generates for the same
//! conversation.

use std::process::Command;

use diskformer::bpe::chat::Message;
use diskformer::qwen3_moe::qwen35moe::Model;
use diskformer::qwen3_moe::qwen35moe::synthetic::{Shape, write};
use diskformer::runtime::{Event, GenerateOptions, Generation};

#[test]
fn chat_replies_with_a_qwen35moe_file() {
    let dir = std::env::temp_dir().join(format!("diskformer-chat-qwen35moe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let gguf = dir.join("small.gguf");
    write(&Shape::small(), 7, &gguf).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_diskformer"))
        .args(["chat", "--model", gguf.to_str().unwrap(), "--prompt", "Hello", "--max-tokens", "6"])
        .args(["--temperature", "0", "--ctx", "256"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("qwen35moe, every weight on the GPU"), "{stderr}");
    assert!(stderr.contains("[6 tokens"), "{stderr}");

    let mut model = Model::open(&gguf, Some(256)).unwrap();
    let mut opts = GenerateOptions::default();
    opts.max_tokens = 6;
    let mut want = Vec::new();
    for event in Generation::start(&mut model, &[Message::user("Hello")], &opts).unwrap() {
        if let Event::Text(t) = event.unwrap() {
            want.extend_from_slice(t.as_bytes());
        }
    }
    assert!(!want.is_empty());
    assert_eq!(out.stdout, want, "the reply printed is the library's");
    let _ = std::fs::remove_dir_all(&dir);
}
