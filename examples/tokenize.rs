//! This example shows how to tokenize text with the tokenizer stored in a GGUF file (any GGUF holding the
//! `tokenizer.ggml.*` keys; no tensors are needed).
//!
//! ```text
//! echo 'Hello world' | cargo run --release --example tokenize -- model.gguf
//! printf '"a"\n"<|im_start|>b"\n' | cargo run --release --example tokenize -- model.gguf --jsonl
//! ```
//!
//! Without `--jsonl` all of stdin is one text and one JSON array of ids is printed; with it, each stdin line
//! is a JSON string and one array is printed per line, in order. `--no-special` spells out control-token
//! text.

use std::io::{BufRead, Read, Write};
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use diskformer::bpe::Tokenizer;
use diskformer::gguf::GgufFile;

#[derive(Parser)]
#[command(about = "Tokenize stdin with a GGUF's tokenizer, printing JSON arrays of token ids")]
struct Args {
    /// GGUF file holding the tokenizer.ggml.* metadata.
    gguf: PathBuf,
    /// Read one JSON string per line and print one array per line.
    #[arg(long)]
    jsonl: bool,
    /// Do not parse control-token text (such as <|im_start|>) as special tokens.
    #[arg(long)]
    no_special: bool,
}

fn print_ids(out: &mut impl Write, ids: &[u32]) -> std::io::Result<()> {
    let list: Vec<String> = ids.iter().map(u32::to_string).collect();
    writeln!(out, "[{}]", list.join(","))
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let gguf = GgufFile::open(&args.gguf).with_context(|| format!("opening {}", args.gguf.display()))?;
    let tokenizer = Tokenizer::from_gguf(&gguf).context("reading the tokenizer")?;
    let parse_special = !args.no_special;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if args.jsonl {
        for (n, line) in std::io::stdin().lock().lines().enumerate() {
            let line = line.context("reading stdin")?;
            let text: String = serde_json::from_str(&line)
                .with_context(|| format!("line {} is not a JSON string", n + 1))?;
            print_ids(&mut out, &tokenizer.encode(&text, parse_special))?;
        }
    } else {
        let mut text = String::new();
        std::io::stdin().read_to_string(&mut text).context("reading stdin as UTF-8")?;
        print_ids(&mut out, &tokenizer.encode(&text, parse_special))?;
    }
    out.flush()?;
    Ok(())
}
