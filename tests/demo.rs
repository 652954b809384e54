//! The built-in demo model (`diskformer::demo`) answers in words: asked what a noun of "The Devil's
//! Dictionary" it recalls is, its greedy reply opens with the entry's headword as it was trained to ("A
//! cynic, n. …"), whether its experts are all resident or stream through a pool of 2 × top-k slots with the
//! misses on the CPU; and `diskformer chat` without `--model` runs it (lavapipe in CI). Its recorded routing
//! (`demo/devil-moe.routing.jsonl`, a trained router's) forced through the tiers gives the resident run's
//! logits.

use std::path::PathBuf;
use std::process::Command;

use diskformer::bpe::chat::Message;
use diskformer::demo::write_demo;
use diskformer::qwen3_moe::{Engine, EngineOptions, Event, GenerateOptions, Routing};

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

/// `diskformer ARGS` with a temporary directory of its own (where the demo model is written), checked to
/// succeed; its stdout (the reply) and stderr.
fn diskformer(args: &[String]) -> (String, String) {
    let home = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_diskformer"))
        .args(args)
        .env("TMPDIR", home.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    (String::from_utf8_lossy(&out.stdout).into_owned(), stderr)
}

#[test]
fn chat_without_a_model_runs_the_demo() {
    let args =
        ["chat", "--prompt", "What is a cynic?", "--max-tokens", "24", "--temperature", "0", "--no-think"];
    let (reply, stderr) = diskformer(&args.map(String::from));
    assert!(stderr.contains("built-in demo model"), "{stderr}");
    assert!(reply.starts_with("A cynic, n."), "{reply:?}");
}

/// The README's quick-start command, as it is written there (default sampling, thinking on), answers the
/// way the README says: in words, ending on its own.
#[test]
fn the_readmes_chat_command_answers_in_words() {
    let readme = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).unwrap();
    let line =
        readme.lines().find(|l| l.contains("diskformer chat --prompt")).expect("the quick start's command");
    let command = &line[line.find("diskformer chat").unwrap() + "diskformer ".len()..];
    // Its arguments as the shell splits them (double quotes only).
    let mut args = Vec::new();
    for (i, part) in command.split('"').enumerate() {
        if i % 2 == 1 {
            args.push(part.to_owned());
        } else {
            args.extend(part.split_whitespace().take_while(|w| !w.starts_with('#')).map(str::to_owned));
        }
    }
    assert_eq!(args[..2], ["chat", "--prompt"], "{command}");
    let (reply, stderr) = diskformer(&args);
    assert!(stderr.contains("ended: Some(StopToken"), "the reply ends on its own: {stderr}");
    let answer = reply.rsplit("</think>").next().unwrap().trim();
    assert!(answer.starts_with("A cynic, n."), "{reply:?}");
    let words: Vec<&str> = answer.split_whitespace().collect();
    let wordlike =
        words.iter().filter(|w| w.chars().filter(|c| c.is_alphabetic()).count() * 2 >= w.len()).count();
    assert!(words.len() >= 10 && wordlike * 10 >= words.len() * 9, "words, not noise: {answer:?}");
}

/// The demo's recorded routing, a trained router's picks, forced on every path: streaming through a pool of
/// 2 × top-k slots (with the misses on the CPU or loaded), batched or token by token, gives the logits of
/// every expert resident under the same picks, and the pool and the CPU tier did work.
#[test]
fn the_demos_recorded_routing_runs_through_the_tiers() {
    let dir = tempfile::tempdir().unwrap();
    let gguf = write_demo(dir.path()).unwrap();
    let trace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("demo/devil-moe.routing.jsonl");
    let forced = |slots: Option<usize>, cpu: bool| {
        let mut o = EngineOptions::default();
        (o.pool_slots, o.cpu.enabled, o.routing) = (slots, Some(cpu), Routing::Trace(trace.clone()));
        o
    };
    // The prompt then steps on fixed tokens: forced picks make the experts the same whatever is sampled.
    let run = |opts: &EngineOptions, batched: bool| {
        let mut e = Engine::open_gguf(&gguf, None, opts, &mut |_| {}).unwrap();
        let prompt = e.tokenizer().encode("What is a cynic? A cynic, n. A blackguard", false);
        let mut logits = vec![e.prefill(&prompt, batched).unwrap()];
        for &id in &prompt[..12] {
            logits.push(e.step(id).unwrap());
        }
        (logits, e.stats())
    };
    for batched in [true, false] {
        let (want, _) = run(&forced(None, false), batched);
        for cpu in [true, false] {
            let (got, stats) = run(&forced(Some(4), cpu), batched);
            let what = format!("4 slots, CPU tier {cpu}, batched {batched}");
            // A one-token step's misses are the CPU tier's to compute where it runs (a chunk's, the pool's).
            assert!(stats.pool.misses > 0 || (cpu && !batched), "{what}: the pool loaded nothing");
            assert_eq!(stats.cpu_experts > 0, cpu, "{what}: {} picks on the CPU", stats.cpu_experts);
            for (step, (g, w)) in got.iter().zip(&want).enumerate() {
                // The host sums in another order than the GPU (f32 rounding, relative to the logits' size).
                let d = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
                let scale = w.iter().fold(1f32, |m, x| m.max(x.abs()));
                assert!(
                    d < 1e-4 * scale,
                    "{what}, step {step}: {d} from every expert resident (logits to {scale})"
                );
            }
        }
    }
}
