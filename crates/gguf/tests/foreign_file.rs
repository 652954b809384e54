//! A GGUF written by the PyPI `gguf` package (scripts/gguf/make_tiny_gguf.py) reads back with every value
//! type exact and every tensor dequantising to the values gguf-py computes.

use diskformer_gguf::{Array, GgufFile, TensorType, Value, dequantize};
use sha2::{Digest, Sha256};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data");

#[test]
fn reads_gguf_py_output() {
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(format!("{DATA}/tiny.json")).unwrap()).unwrap();
    let path = format!("{DATA}/tiny.gguf");
    let bytes = std::fs::read(&path).unwrap();
    let sha: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        sha,
        golden["fixture_sha256"].as_str().unwrap(),
        "tiny.gguf and tiny.json disagree: regenerate both"
    );

    let gguf = GgufFile::open(&path).unwrap();
    let m = gguf.metadata();
    assert_eq!(m.get_str("general.name").unwrap(), "tiny ☃ fixture");
    assert_eq!(m.get_u8("test.u8").unwrap(), 250);
    assert_eq!(m.get_i8("test.i8").unwrap(), -120);
    assert_eq!(m.get_u16("test.u16").unwrap(), 65000);
    assert_eq!(m.get_i16("test.i16").unwrap(), -32000);
    assert_eq!(m.get_u32("test.u32").unwrap(), 4_000_000_000);
    assert_eq!(m.get_i32("test.i32").unwrap(), -2_000_000_000);
    assert_eq!(m.get_f32("test.f32").unwrap(), 0.1);
    assert!(m.get_bool("test.bool").unwrap());
    assert_eq!(m.get_u64("test.u64").unwrap(), u64::MAX);
    assert_eq!(m.get_i64("test.i64").unwrap(), i64::MIN);
    assert_eq!(m.get_f64("test.f64").unwrap(), 1e-300);
    assert_eq!(m.get_str_array("tokenizer.ggml.tokens").unwrap(), ["a", "Ġb", "ĊĊ", "<|im_end|>", "数"]);
    assert_eq!(m.get_i32_array("tokenizer.ggml.token_type").unwrap(), [1, 1, 1, 3, 1]);
    assert_eq!(m.get_f32_array("test.f32_array").unwrap(), [0.5, -1.25, 3e-8]);
    assert_eq!(m.get("test.u64_array"), Some(&Value::Array(Array::U64(vec![0, u64::MAX]))));
    assert_eq!(m.get("test.bool_array"), Some(&Value::Array(Array::Bool(vec![true, false, true]))));
    assert_eq!(
        m.get_array("test.nested").unwrap(),
        &Array::Array(vec![Array::I32(vec![1, 2, 3]), Array::I32(vec![4])])
    );

    let tensors = golden["tensors"].as_object().unwrap();
    assert_eq!(gguf.tensors().len(), tensors.len());
    for (name, want) in tensors {
        let info = gguf.header().tensor(name).unwrap();
        assert_eq!(info.ty.name().to_uppercase(), want["type"].as_str().unwrap(), "{name}");
        let dims: Vec<u64> = want["dims"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap()).collect();
        assert_eq!(info.dims, dims, "{name}");
        let bits: Vec<u32> =
            want["values_f32_bits"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let mut out = vec![f32::NAN; info.n_elements as usize];
        dequantize(info.ty, gguf.tensor_data(name).unwrap(), &mut out).unwrap();
        assert!(out.iter().zip(&bits).all(|(a, &b)| a.to_bits() == b), "{name} values differ from gguf-py");
    }
    assert_eq!(gguf.header().tensor("token_embd.weight").unwrap().ty, TensorType::Q8_0);
}
