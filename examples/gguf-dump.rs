//! This example shows how to read a GGUF file's header with diskformer: it prints the metadata (arrays
//! abbreviated with their length) and the tensor table, or with `--json` the same in the JSON shape of the
//! PyPI `gguf` package's `gguf-dump --json` (so the two can be compared).
//!
//! ```text
//! cargo run --release --example gguf-dump -- model.gguf [--json [--json-array]]
//! ```

use std::process::ExitCode;

use clap::Parser;
use diskformer::gguf::{Array, GgufFile, Value, ValueType};
use serde_json::{Map, json};

/// Print the metadata and tensor table of a GGUF file.
#[derive(Parser)]
struct Args {
    /// The GGUF file.
    file: std::path::PathBuf,
    /// Print JSON shaped like `gguf-dump --json` of the PyPI `gguf` package.
    #[arg(long)]
    json: bool,
    /// With --json, include every array element (otherwise arrays give only their types).
    #[arg(long, requires = "json")]
    json_array: bool,
    /// Array elements shown per array in the text output.
    #[arg(long, default_value_t = 6)]
    show: usize,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match GgufFile::open(&args.file) {
        Ok(gguf) => {
            if args.json {
                println!("{}", to_json(&gguf, args.json_array));
            } else {
                print_text(&gguf, args.show);
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("gguf-dump: {}: {e}", args.file.display());
            ExitCode::FAILURE
        }
    }
}

fn print_text(gguf: &GgufFile, show: usize) {
    let h = gguf.header();
    println!(
        "GGUF v{}: {} metadata keys, {} tensors, alignment {}, data section at byte {}",
        h.version,
        h.metadata.len(),
        h.tensors.len(),
        h.alignment,
        h.data_offset
    );
    println!("\nmetadata:");
    for (key, value) in h.metadata.iter() {
        match value {
            Value::Array(a) => {
                println!("  {key}: [{}; {}] = {}", a.element_type(), a.len(), text_array(a, show))
            }
            v => println!("  {key}: {} = {}", v.value_type(), text_scalar(v)),
        }
    }
    println!("\ntensors:");
    let width = h.tensors.iter().map(|t| t.name.len()).max().unwrap_or(4).max(4);
    println!("  {:<width$}  {:<5}  {:<24}  {:>14}  {:>14}", "name", "type", "dims", "offset", "bytes");
    for t in &h.tensors {
        let dims = format!("{:?}", t.dims);
        println!(
            "  {:<width$}  {:<5}  {:<24}  {:>14}  {:>14}",
            t.name,
            t.ty.name(),
            dims,
            t.offset,
            t.n_bytes
        );
    }
}

fn text_scalar(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => json_scalar(other).to_string(),
    }
}

fn text_array(a: &Array, show: usize) -> String {
    let items: Vec<String> = match a {
        Array::String(v) => v.iter().take(show).map(|s| format!("{s:?}")).collect(),
        Array::Array(v) => {
            v.iter().take(show).map(|inner| format!("[{}; {}]", inner.element_type(), inner.len())).collect()
        }
        other => {
            json_array(other).as_array().into_iter().flatten().take(show).map(|x| x.to_string()).collect()
        }
    };
    let more = if a.len() > show { ", ..." } else { "" };
    format!("[{}{more}]", items.join(", "))
}

/// gguf-py's names of the value types.
fn py_type(t: ValueType) -> &'static str {
    match t {
        ValueType::U8 => "UINT8",
        ValueType::I8 => "INT8",
        ValueType::U16 => "UINT16",
        ValueType::I16 => "INT16",
        ValueType::U32 => "UINT32",
        ValueType::I32 => "INT32",
        ValueType::F32 => "FLOAT32",
        ValueType::Bool => "BOOL",
        ValueType::String => "STRING",
        ValueType::Array => "ARRAY",
        ValueType::U64 => "UINT64",
        ValueType::I64 => "INT64",
        ValueType::F64 => "FLOAT64",
        _ => "UNKNOWN",
    }
}

fn json_scalar(v: &Value) -> serde_json::Value {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::F32(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::Array(a) => json_array(a),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F64(x) => json!(x),
    }
}

fn json_array(a: &Array) -> serde_json::Value {
    match a {
        Array::U8(v) => json!(v),
        Array::I8(v) => json!(v),
        Array::U16(v) => json!(v),
        Array::I16(v) => json!(v),
        Array::U32(v) => json!(v),
        Array::I32(v) => json!(v),
        Array::F32(v) => json!(v),
        Array::Bool(v) => json!(v),
        Array::String(v) => json!(v),
        Array::Array(v) => v.iter().map(json_array).collect(),
        Array::U64(v) => json!(v),
        Array::I64(v) => json!(v),
        Array::F64(v) => json!(v),
    }
}

fn to_json(gguf: &GgufFile, full_arrays: bool) -> serde_json::Value {
    let h = gguf.header();
    let mut metadata = Map::new();
    metadata.insert("GGUF.version".into(), json!({"type": "UINT32", "value": h.version}));
    metadata.insert("GGUF.tensor_count".into(), json!({"type": "UINT64", "value": h.tensors.len()}));
    metadata.insert("GGUF.kv_count".into(), json!({"type": "UINT64", "value": h.metadata.len()}));
    for (key, value) in h.metadata.iter() {
        let mut entry = Map::new();
        entry.insert("type".into(), json!(py_type(value.value_type())));
        match value {
            Value::Array(a) => {
                entry.insert("array_types".into(), json!(array_types(a)));
                if full_arrays {
                    entry.insert("value".into(), json_array(a));
                }
            }
            v => {
                entry.insert("value".into(), json_scalar(v));
            }
        }
        metadata.insert(key.to_owned(), entry.into());
    }
    let mut tensors = Map::new();
    for (index, t) in h.tensors.iter().enumerate() {
        tensors.insert(
            t.name.clone(),
            json!({
                "index": index,
                "shape": t.dims,
                "type": t.ty.name().to_uppercase(),
                "data_offset": h.data_offset + t.offset,
                "n_bytes": t.n_bytes,
            }),
        );
    }
    json!({"metadata": metadata, "tensors": tensors})
}

/// gguf-py lists an array's element type, then the inner arrays' types for arrays of arrays.
fn array_types(a: &Array) -> Vec<&'static str> {
    let mut out = vec![py_type(a.element_type())];
    if let Array::Array(inner) = a
        && let Some(first) = inner.first()
    {
        out.extend(array_types(first));
    }
    out
}
