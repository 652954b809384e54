//! CPU dequantisation equals PyPI `gguf`'s dequantiser bit for bit on seeded random blocks of every type we
//! dequantise (golden made by scripts/gguf/make_dequant_golden.py), directly and through the planes.

use diskformer_gguf::{TensorType, dequantize, dequantize_planes, plane_sizes, split_planes};
use serde_json::Value;

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn tensor_type(name: &str) -> TensorType {
    TensorType::ALL.into_iter().find(|t| t.name() == name).unwrap_or_else(|| panic!("unknown type {name}"))
}

#[test]
fn dequantize_matches_gguf_py() {
    let doc: Value = serde_json::from_str(include_str!("data/dequant_golden.json")).unwrap();
    let cases = doc["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 14, "one case per type dequantised (every type but f32 and q8_K)");
    for case in cases {
        let ty = tensor_type(case["type"].as_str().unwrap());
        let blocks = hex(case["blocks_hex"].as_str().unwrap());
        let expected: Vec<u32> =
            case["values_f32_bits"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let mut out = vec![f32::NAN; expected.len()];
        dequantize(ty, &blocks, &mut out).unwrap();
        for (i, (&got, &want)) in out.iter().zip(&expected).enumerate() {
            assert_eq!(got.to_bits(), want, "{ty} value {i}: got {got}, gguf-py {}", f32::from_bits(want));
        }

        if matches!(ty, TensorType::Q8_0 | TensorType::Q4_0) {
            let (nq, ns) = plane_sizes(ty, expected.len() / 32).unwrap();
            let (mut q, mut s) = (vec![0; nq], vec![0; ns]);
            split_planes(ty, &blocks, &mut q, &mut s).unwrap();
            let mut from_planes = vec![f32::NAN; expected.len()];
            dequantize_planes(ty, &q, &s, &mut from_planes).unwrap();
            assert!(from_planes.iter().zip(&expected).all(|(a, &b)| a.to_bits() == b), "{ty} planes differ");
        }
    }
}
