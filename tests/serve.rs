//! `diskformer serve` over plain HTTP on a tiny random model (lavapipe in CI; one test a qwen35moe file): health
//! and model list, chat and text completions streamed and whole with their usage, and every bad request a 4xx JSON error after
//! which the server keeps answering: malformed JSON, unknown fields, wrong types, a prompt past the context,
//! max_tokens past it, a body over the limit, an unknown route; a full queue is a 503 with Retry-After, and
//! a client that leaves mid-stream frees the engine for the next request, a client that stalls its body gets a
//! 408, and a bounded load (16 clients × 8 requests) ends with each answered or refused and memory flat.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use diskformer::qwen3_moe::qwen35moe::synthetic::{Shape, write};
use diskformer::qwen3_moe::synthetic::{SynthShape, SynthSpec, SynthVocab, write_synthetic};
use serde_json::{Value, json};

/// The server on a tiny model, killed when dropped.
struct Server {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn server(name: &str, args: &[&str]) -> Server {
    server_of(name, args, |model| {
        write_synthetic(&SynthSpec { shape: SynthShape::tiny(), vocab: SynthVocab::Bytes, seed: 5 }, model)
            .unwrap();
    })
}

/// The server on the model `write` writes.
fn server_of(name: &str, args: &[&str], write: impl FnOnce(&Path)) -> Server {
    let dir = std::env::temp_dir().join(format!("diskformer-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let model = dir.join("tiny.gguf");
    write(&model);
    let mut child = Command::new(env!("CARGO_BIN_EXE_diskformer"))
        .args(["serve", "--model", model.to_str().unwrap(), "--port", "0"])
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port =
        line.trim().rsplit(':').next().and_then(|p| p.parse().ok()).unwrap_or_else(|| panic!("{line:?}"));
    Server { child, port, dir }
}

/// A response: status, headers (lower-cased names) and body.
struct Reply {
    status: u16,
    headers: String,
    body: String,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("{e}: {:?}", self.body))
    }

    /// The data of each server-sent event.
    fn events(&self) -> Vec<String> {
        self.body.lines().filter_map(|l| l.strip_prefix("data: ")).map(str::to_owned).collect()
    }

    /// The error message of a JSON error response.
    fn error(&self) -> String {
        self.json()["error"]["message"].as_str().unwrap_or_else(|| panic!("{:?}", self.body)).to_owned()
    }
}

fn send(port: u16, method: &str, path: &str, body: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let head = format!(
        "{method} {path} HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    let _ = s.write_all(body); // a refused body may be cut off
    s
}

fn request(port: u16, method: &str, path: &str, body: &[u8]) -> Reply {
    let mut raw = String::new();
    send(port, method, path, body).read_to_string(&mut raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("{head:?}"));
    Reply { status, headers: head.to_ascii_lowercase(), body: body.to_owned() }
}

fn post(port: u16, path: &str, body: Value) -> Reply {
    request(port, "POST", path, body.to_string().as_bytes())
}

fn hello(extra: Value) -> Value {
    let mut body = json!({"model": "tiny", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 8,
                          "temperature": 0});
    body.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
    body
}

/// A qwen35moe file is served (every weight on the GPU): a whole reply of the length asked for.
#[test]
fn a_qwen35moe_file_is_served() {
    let s = server_of("qwen35moe", &["--ctx", "256"], |model| {
        write(&Shape::small(), 3, model).unwrap();
    });
    let r = post(s.port, "/v1/chat/completions", hello(json!({"max_tokens": 4})));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["usage"]["completion_tokens"].as_u64(), Some(4), "{v}");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
}

#[test]
fn completions_whole_and_streamed() {
    let s = server("ok", &["--ctx", "256"]);
    assert_eq!(request(s.port, "GET", "/health", b"").json()["status"], "ok");
    assert_eq!(request(s.port, "GET", "/v1/models", b"").json()["data"][0]["id"], "tiny");

    let r = post(s.port, "/v1/chat/completions", hello(json!({})));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    let u = &v["usage"];
    assert!(u["prompt_tokens"].as_u64().unwrap() > 0);
    let completion = u["completion_tokens"].as_u64().unwrap();
    assert!(completion <= 8);
    assert_eq!(u["total_tokens"].as_u64(), Some(u["prompt_tokens"].as_u64().unwrap() + completion));
    let finish = v["choices"][0]["finish_reason"].as_str().unwrap();
    assert!(finish == "length" && completion == 8 || finish == "stop", "{finish} after {completion}");
    // The engine's side of it: the same counts, and times in order.
    let t = &v["timings"];
    assert_eq!(
        (&t["prompt_n"], t["predicted_n"].as_u64()),
        (&u["prompt_tokens"], Some(completion - 1)),
        "{t}"
    );
    let ms = |field: &str| t[field].as_f64().unwrap_or_else(|| panic!("{field} in {t}"));
    assert!(ms("queued_ms") >= 0.0 && ms("prompt_ms") > 0.0 && ms("first_text_ms") >= ms("prompt_ms"), "{t}");
    assert!(ms("predicted_ms") >= 0.0, "{t}");
    let whole = format!(
        "{}{}",
        v["choices"][0]["message"]["reasoning_content"].as_str().unwrap_or(""),
        v["choices"][0]["message"]["content"].as_str().unwrap()
    );

    // The same greedy reply, streamed: a role chunk, text chunks, the finish reason, the usage, [DONE].
    let r = post(
        s.port,
        "/v1/chat/completions",
        hello(json!({"stream": true, "stream_options": {"include_usage": true}})),
    );
    assert_eq!(r.status, 200);
    assert!(r.headers.contains("content-type: text/event-stream"), "{}", r.headers);
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    let chunks: Vec<Value> =
        events[..events.len() - 1].iter().map(|e| serde_json::from_str(e).unwrap()).collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"].get(0))
        .flat_map(|c| [&c["delta"]["reasoning_content"], &c["delta"]["content"]])
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(text, whole);
    assert_eq!(
        chunks.iter().filter_map(|c| c["choices"].get(0)?["finish_reason"].as_str()).collect::<Vec<_>>(),
        [finish]
    );
    // The finish chunk carries the engine's timings.
    let finished = chunks.iter().find(|c| c["choices"][0]["finish_reason"].is_string()).unwrap();
    assert_eq!(finished["timings"]["predicted_n"].as_u64(), Some(completion.saturating_sub(1)), "{finished}");
    assert_eq!(chunks.last().unwrap()["usage"], *u);

    let r =
        post(s.port, "/v1/completions", json!({"prompt": "Once upon", "max_tokens": 5, "temperature": 0}));
    assert_eq!(r.status, 200, "{}", r.body);
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert!(v["usage"]["prompt_tokens"].as_u64().unwrap() >= 9, "one token a byte");
    assert!(v["choices"][0]["text"].is_string());
}

#[test]
fn bad_requests_are_json_errors_and_the_server_keeps_answering() {
    let s = server("bad", &["--ctx", "256", "--body-limit", "4096", "--body-timeout", "1"]);
    // A client that stalls midway through its body holds its connection only, and only for the timeout.
    let mut stalled = TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    stalled
        .write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n{\"prompt\"")
        .unwrap();
    let chat = "/v1/chat/completions";
    let cases: Vec<(&str, Reply, u16, &str)> = vec![
        ("malformed JSON", request(s.port, "POST", chat, b"{\"messages\": ["), 400, "not JSON"),
        ("an unknown field", post(s.port, chat, hello(json!({"tempature": 1}))), 400, "tempature"),
        ("a wrong type", post(s.port, chat, hello(json!({"max_tokens": "many"}))), 400, "invalid type"),
        ("no messages", post(s.port, chat, json!({"messages": []})), 400, "messages"),
        (
            "a prompt past the context",
            post(s.port, "/v1/completions", json!({"prompt": "a".repeat(300)})),
            400,
            "context",
        ),
        (
            "max_tokens past the context",
            post(s.port, chat, hello(json!({"max_tokens": 1000}))),
            400,
            "max_tokens",
        ),
        (
            "a body over the limit",
            post(s.port, "/v1/completions", json!({"prompt": "a".repeat(5000)})),
            413,
            "--body-limit",
        ),
        ("an unknown route", post(s.port, "/v1/embeddings", json!({})), 404, "route"),
    ];
    for (what, reply, status, says) in cases {
        assert_eq!(reply.status, status, "{what}: {}", reply.body);
        let message = reply.error();
        assert!(message.contains(says), "{what}: {message:?} does not say {says:?}");
    }
    let r = post(s.port, chat, hello(json!({})));
    assert_eq!(r.status, 200, "after the errors: {}", r.body);
    let mut raw = String::new();
    stalled.read_to_string(&mut raw).unwrap();
    assert!(raw.starts_with("HTTP/1.1 408"), "the stalled client got {raw:?}");
    // A JSON error like the others, saying what to do.
    let body = raw.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("the 408's body is not JSON ({e}): {raw:?}"));
    let message = v["error"]["message"].as_str().unwrap_or_else(|| panic!("no error message: {raw:?}"));
    assert!(message.contains("--body-timeout"), "{message:?} does not name the option");
}

#[test]
fn a_full_queue_is_refused_and_a_client_that_leaves_frees_the_engine() {
    // No waiting room: a request is taken only while the engine waits for one.
    let s = server("queue", &["--queue", "0"]);
    // A long reply whose client stops reading: the engine is busy with it until it is cancelled.
    let long =
        hello(json!({"stream": true, "max_tokens": 3000, "messages": [{"role": "user", "content": "go"}]}));
    let mut busy = (0..200)
        .find_map(|_| {
            let mut s = send(s.port, "POST", "/v1/chat/completions", long.to_string().as_bytes());
            let mut first = [0u8; 12];
            s.read_exact(&mut first).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
            (&first == b"HTTP/1.1 200").then_some(s)
        })
        .expect("the engine took the long request");
    let mut refused = false;
    for _ in 0..50 {
        let r = post(s.port, "/v1/chat/completions", hello(json!({})));
        if r.status == 503 {
            assert!(r.headers.contains("retry-after:"), "{}", r.headers);
            assert!(r.error().contains("queue"));
            refused = true;
            break;
        }
        assert_eq!(r.status, 200, "{}", r.body); // the long reply ended before this one came
    }
    assert!(refused, "no request was refused while the engine was busy");
    let _ = busy.flush();
    drop(busy);
    // The engine is free again: a request is answered (the queue takes one only while the engine waits).
    let answered = (0..200).any(|_| {
        let r = post(s.port, "/v1/chat/completions", hello(json!({})));
        std::thread::sleep(std::time::Duration::from_millis(50));
        r.status == 200
    });
    assert!(answered, "the engine stayed busy after its client left");
}

/// The server's resident memory, in bytes.
fn rss(s: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.child.id())).unwrap();
    let kb = status.lines().find_map(|l| l.strip_prefix("VmRSS:")).unwrap().trim().trim_end_matches(" kB");
    kb.trim().parse::<u64>().unwrap() * 1024
}

/// 16 clients × 8 requests, a third of them streamed and left midway: every request is answered or refused
/// with a 503, and the server's memory ends where it started (within what the allocator keeps: 0.2–0.6 MB
/// in five runs on the development machine).
#[test]
fn a_bounded_load_ends_with_every_request_answered_or_refused() {
    let s = server("load", &["--ctx", "512"]);
    let warm = post(s.port, "/v1/chat/completions", hello(json!({})));
    assert_eq!(warm.status, 200);
    let before = rss(&s);
    let port = s.port;
    let clients: Vec<_> = (0..16)
        .map(|c| {
            std::thread::spawn(move || {
                let (mut answered, mut refused, mut left) = (0, 0, 0);
                for r in 0..8 {
                    if (c + r) % 3 == 0 {
                        let body = hello(json!({"stream": true, "max_tokens": 64}));
                        let mut stream =
                            send(port, "POST", "/v1/chat/completions", body.to_string().as_bytes());
                        let mut first = [0u8; 12];
                        stream.read_exact(&mut first).unwrap();
                        assert!(&first == b"HTTP/1.1 200" || &first == b"HTTP/1.1 503", "{first:?}");
                        left += 1; // and gone, mid-reply
                        continue;
                    }
                    let reply = post(port, "/v1/chat/completions", hello(json!({"seed": c * 8 + r})));
                    match reply.status {
                        200 => assert!(reply.json()["choices"][0]["message"]["content"].is_string()),
                        503 => assert!(reply.error().contains("queue")),
                        other => panic!("status {other}: {}", reply.body),
                    }
                    if reply.status == 200 { answered += 1 } else { refused += 1 }
                }
                (answered, refused, left)
            })
        })
        .collect();
    let (mut answered, mut refused, mut left) = (0, 0, 0);
    for c in clients {
        let (a, r, l) = c.join().unwrap();
        (answered, refused, left) = (answered + a, refused + r, left + l);
    }
    assert_eq!(answered + refused + left, 128);
    assert!(answered > 0, "no request was answered ({refused} refused)");
    let after = post(s.port, "/v1/chat/completions", hello(json!({})));
    assert_eq!(after.status, 200, "after the load: {}", after.body);
    let grown = rss(&s).saturating_sub(before);
    assert!(
        grown < 8 << 20,
        "the server grew {} KB over {answered} answered, {refused} refused, {left} left",
        grown >> 10
    );
}
