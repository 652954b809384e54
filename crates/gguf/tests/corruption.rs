//! Corrupt input: each validation of ggml's gguf.cpp has a test that builds the bad file and matches the
//! typed error; truncation at every byte and random corruption never panic.

mod common;

use common::{Raw, Rng};
use diskformer_gguf::{Error, Gguf, GgufWriter, Header, TensorType, Value};
use proptest::prelude::*;

const F32: u32 = 0;
const Q8_0: u32 = 8;

fn parse(raw: &Raw) -> Result<Gguf<&[u8]>, Error> {
    Gguf::from_bytes(&raw.bytes[..])
}

fn expect(raw: &Raw, check: impl Fn(&Error) -> bool) {
    match parse(raw) {
        Ok(_) => panic!("corrupt file parsed"),
        Err(e) => assert!(check(&e), "unexpected error: {e:?}"),
    }
}

#[test]
fn bad_magic() {
    let mut raw = Raw::start(3, 0, 0);
    raw.bytes[0] = b'X';
    expect(&raw, |e| matches!(e, Error::BadMagic { found } if found == b"XGUF"));
}

#[test]
fn unsupported_versions() {
    // v1 used 32-bit counts; 4 is unknown; a big-endian v3 file reads as 0x03000000 on little-endian.
    for version in [1, 4, 0x0300_0000] {
        expect(
            &Raw::start(version, 0, 0),
            |e| matches!(e, Error::UnsupportedVersion { version: v } if *v == version),
        );
    }
    assert!(parse(&Raw::start(2, 0, 0)).is_ok());
    assert!(parse(&Raw::start(3, 0, 0)).is_ok());
}

#[test]
fn truncated_fixed_field() {
    let mut raw = Raw::start(3, 0, 1);
    raw.str("k").u32(10); // u64 value missing
    expect(&raw, |e| matches!(e, Error::Truncated { needed: 8, available: 0, .. }));
}

#[test]
fn counts_checked_before_allocating() {
    // A billion metadata pairs in a 24-byte file.
    expect(
        &Raw::start(3, 0, 1 << 30),
        |e| matches!(e, Error::CountTooLarge { count, .. } if *count == 1 << 30),
    );
    // A string claiming 2^63 bytes.
    let mut raw = Raw::start(3, 0, 1);
    raw.u64(1 << 63);
    expect(&raw, |e| matches!(e, Error::CountTooLarge { .. }));
    // An array of 2^40 u64.
    let mut raw = Raw::start(3, 0, 1);
    raw.str("a").u32(9).u32(10).u64(1 << 40);
    expect(
        &raw,
        |e| matches!(e, Error::CountTooLarge { count, min_bytes, .. } if *count == 1 << 40 && *min_bytes == 8 << 40),
    );
    // A billion tensor infos.
    expect(&Raw::start(3, 1 << 30, 0), |e| matches!(e, Error::CountTooLarge { .. }));
}

#[test]
fn invalid_utf8() {
    let mut raw = Raw::start(3, 0, 1);
    raw.u64(2);
    raw.bytes.extend_from_slice(&[0xC3, 0x28]);
    raw.u32(0).bytes.push(1);
    expect(&raw, |e| matches!(e, Error::InvalidUtf8 { offset: 32, .. }));
}

#[test]
fn unknown_value_type() {
    let mut raw = Raw::start(3, 0, 1);
    raw.str("k").u32(13).u32(0);
    expect(&raw, |e| matches!(e, Error::UnknownValueType { key, type_id: 13 } if key == "k"));
}

#[test]
fn arrays_nested_too_deep() {
    let mut raw = Raw::start(3, 0, 1);
    raw.str("deep");
    raw.u32(9);
    for _ in 0..100 {
        raw.u32(9).u64(1);
    }
    raw.u32(0).u64(0);
    expect(&raw, |e| matches!(e, Error::ArrayTooDeep { .. }));
}

#[test]
fn nested_arrays_within_the_limit_parse() {
    let mut raw = Raw::start(3, 0, 1);
    raw.str("nested").u32(9);
    raw.u32(9).u64(2); // array of 2 arrays
    raw.u32(4).u64(1).u32(7); // [7u32]
    raw.u32(8).u64(1).str("x"); // ["x"]
    let gguf = parse(&raw).unwrap();
    let a = gguf.metadata().get_array("nested").unwrap();
    assert_eq!(a.len(), 2);
}

#[test]
fn duplicate_key() {
    let mut raw = Raw::start(3, 0, 2);
    raw.kv_u32("k", 1).kv_u32("k", 2);
    expect(&raw, |e| matches!(e, Error::DuplicateKey { key } if key == "k"));
}

#[test]
fn duplicate_tensor() {
    let mut raw = Raw::start(3, 2, 0);
    raw.tensor("t", &[4], F32, 0).tensor("t", &[4], F32, 32).data(32, 48);
    expect(&raw, |e| matches!(e, Error::DuplicateTensor { name } if name == "t"));
}

#[test]
fn bad_alignment() {
    for a in [0, 48] {
        let mut raw = Raw::start(3, 0, 1);
        raw.kv_u32("general.alignment", a);
        expect(&raw, |e| matches!(e, Error::BadAlignment { alignment } if *alignment == u64::from(a)));
    }
    // gguf.cpp reads the alignment as u32 only.
    let mut raw = Raw::start(3, 0, 1);
    raw.str("general.alignment").u32(10).u64(32);
    expect(&raw, |e| matches!(e, Error::WrongType { key, .. } if key == "general.alignment"));
}

#[test]
fn too_many_dims() {
    let mut raw = Raw::start(3, 1, 0);
    raw.tensor("t", &[1, 1, 1, 1, 1], F32, 0).data(32, 4);
    expect(&raw, |e| matches!(e, Error::TooManyDims { n_dims: 5, max: 4, .. }));
}

#[test]
fn negative_dim() {
    let mut raw = Raw::start(3, 1, 0);
    raw.tensor("t", &[4, u64::MAX], F32, 0).data(32, 16);
    expect(&raw, |e| matches!(e, Error::NegativeDim { index: 1, value: -1, .. }));
}

#[test]
fn element_count_overflow() {
    let mut raw = Raw::start(3, 1, 0);
    raw.tensor("t", &[1 << 31, 1 << 31, 1 << 31], F32, 0);
    expect(&raw, |e| matches!(e, Error::ElementCountOverflow { name, .. } if name == "t"));
}

#[test]
fn unknown_tensor_type() {
    for type_id in [4, 9, 31, 1000] {
        let mut raw = Raw::start(3, 1, 0);
        raw.tensor("blk.0.x", &[32], type_id, 0).data(32, 64);
        expect(
            &raw,
            |e| matches!(e, Error::UnknownTensorType { name, type_id: t } if name == "blk.0.x" && *t == type_id),
        );
    }
}

#[test]
fn row_not_block_aligned() {
    let mut raw = Raw::start(3, 1, 0);
    raw.tensor("t", &[48, 2], Q8_0, 0).data(32, 136);
    expect(&raw, |e| {
        matches!(e, Error::RowNotBlockAligned { ne0: 48, block_size: 32, ty: TensorType::Q8_0, .. })
    });
}

#[test]
fn tensor_overlap() {
    let mut raw = Raw::start(3, 2, 0);
    raw.tensor("a", &[16], F32, 0).tensor("b", &[4], F32, 32).data(32, 96);
    expect(&raw, |e| matches!(e, Error::TensorOverlap { name, offset: 32, previous_end: 64 } if name == "b"));
}

#[test]
fn tensor_misplaced() {
    // After a gap, and unaligned.
    for offset in [64, 40] {
        let mut raw = Raw::start(3, 2, 0);
        raw.tensor("a", &[4], F32, 0).tensor("b", &[4], F32, offset).data(32, 128);
        expect(&raw, |e| matches!(e, Error::TensorMisplaced { expected: 32, offset: o, .. } if *o == offset));
    }
    // The first tensor must start the data section.
    let mut raw = Raw::start(3, 1, 0);
    raw.tensor("a", &[4], F32, 32).data(32, 64);
    expect(&raw, |e| matches!(e, Error::TensorMisplaced { expected: 0, .. }));
}

#[test]
fn tensor_out_of_bounds() {
    let mut raw = Raw::start(3, 1, 0);
    raw.tensor("a", &[8], F32, 0).data(32, 31);
    expect(
        &raw,
        |e| matches!(e, Error::TensorOutOfBounds { name, size: 32, data_len: 31, .. } if name == "a"),
    );
    // The header alone (no data at all) still parses as a header.
    let header_only = &raw.bytes[..raw.bytes.len() - 31];
    assert!(Header::parse(header_only).is_ok());
}

#[test]
fn zero_size_tensor_past_the_end() {
    // Found by the fuzzer: an empty tensor whose data would start after the end of a file missing its padding.
    let mut raw = Raw::start(3, 1, 0);
    raw.tensor("empty", &[0], F32, 0);
    assert!(!raw.bytes.len().is_multiple_of(32), "the header must end unaligned for this test");
    expect(&raw, |e| matches!(e, Error::TensorOutOfBounds { name, size: 0, .. } if name == "empty"));
}

fn valid_file() -> Vec<u8> {
    let mut w = GgufWriter::new();
    w.add_metadata("general.architecture", Value::String("qwen3moe".into())).unwrap();
    w.add_metadata("tokens", Value::Array(diskformer_gguf::Array::String(vec!["a".into(), "bc".into()])))
        .unwrap();
    w.add_metadata("x", Value::F64(1.5)).unwrap();
    w.add_tensor("a", TensorType::Q8_0, &[64, 2], Rng(3).bytes(136)).unwrap();
    w.add_tensor("b", TensorType::F32, &[3], Rng(4).bytes(12)).unwrap();
    let mut out = Vec::new();
    w.write_to(&mut out).unwrap();
    out
}

#[test]
fn every_truncation_is_an_error() {
    let bytes = valid_file();
    let last_tensor_end = bytes.len() - 20; // 12 bytes of "b", then padding to 32
    for cut in 0..last_tensor_end {
        let err = Gguf::from_bytes(&bytes[..cut]).expect_err("truncated file parsed");
        assert!(
            matches!(
                err,
                Error::Truncated { .. } | Error::CountTooLarge { .. } | Error::TensorOutOfBounds { .. }
            ),
            "cut at {cut}: {err:?}"
        );
    }
    // Missing trailing padding is fine (gguf.cpp only needs the tensor bytes).
    assert!(Gguf::from_bytes(&bytes[..last_tensor_end]).is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_corruption_never_panics(flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8)) {
        let mut bytes = valid_file();
        for (i, b) in flips {
            let i = i.index(bytes.len());
            bytes[i] = b;
        }
        let _ = Gguf::from_bytes(&bytes[..]);
        let _ = Header::parse_prefix(&bytes[..bytes.len() / 2]);
    }
}
