//! Round trips: anything the writer writes, the reader reads back equal (alignment honoured, also inside a
//! larger buffer at a non-zero offset); a short prefix asks for more; planes split and join bit-exact.

mod common;

use common::{Rng, TensorSpec, arbitrary_metadata, arbitrary_tensors};
use diskformer_gguf::{
    Gguf, GgufWriter, Header, PrefixParse, TensorType, Value, dequantize, dequantize_planes, join_planes,
    plane_sizes, split_planes,
};
use proptest::prelude::*;

fn write(metadata: &[(String, Value)], tensors: &[TensorSpec], alignment: Option<u32>, v2: bool) -> Vec<u8> {
    let mut w = GgufWriter::new();
    if v2 {
        w = w.version_2();
    }
    if let Some(a) = alignment {
        w.set_alignment(a).unwrap();
    }
    for (k, v) in metadata {
        w.add_metadata(k.clone(), v.clone()).unwrap();
    }
    for t in tensors {
        w.add_tensor(t.name.clone(), t.ty, &t.dims, t.data.clone()).unwrap();
    }
    let mut out = Vec::new();
    let n = w.write_to(&mut out).unwrap();
    assert_eq!(n, out.len() as u64);
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn write_then_read_is_equal(
        metadata in arbitrary_metadata(),
        tensors in arbitrary_tensors(),
        alignment in prop::option::of(prop::sample::select(vec![1u32, 8, 32, 64, 256])),
        v2 in any::<bool>(),
        prefix_len in 0usize..100,
    ) {
        let bytes = write(&metadata, &tensors, alignment, v2);
        // The same GGUF inside a larger buffer, at an arbitrary (unaligned) offset.
        let mut outer = Rng(prefix_len as u64).bytes(prefix_len);
        outer.extend_from_slice(&bytes);
        outer.extend_from_slice(&[0xAB; 7]);
        let gguf = Gguf::from_bytes(&outer[prefix_len..prefix_len + bytes.len()]).unwrap();
        let header = gguf.header();

        prop_assert_eq!(header.version, if v2 { 2 } else { 3 });
        let align = u64::from(alignment.unwrap_or(32));
        prop_assert_eq!(header.alignment, align);
        prop_assert_eq!(header.data_offset % align, 0);
        let read: Vec<(String, Value)> = gguf.metadata().iter()
            .filter(|(k, _)| *k != "general.alignment")
            .map(|(k, v)| (k.to_owned(), v.clone()))
            .collect();
        prop_assert_eq!(&read, &metadata);
        prop_assert_eq!(gguf.tensors().len(), tensors.len());
        for (info, spec) in gguf.tensors().iter().zip(&tensors) {
            prop_assert_eq!(&info.name, &spec.name);
            prop_assert_eq!(info.ty, spec.ty);
            prop_assert_eq!(&info.dims, &spec.dims);
            prop_assert_eq!(info.offset % align, 0);
            prop_assert_eq!(gguf.tensor_data(&spec.name).unwrap(), &spec.data[..]);
        }

        // Every prefix shorter than the header asks for more; the header's own bytes complete it.
        let header_end = header.data_offset as usize;
        let cut = prefix_len * header_end / 100;
        match Header::parse_prefix(&bytes[..cut]).unwrap() {
            PrefixParse::NeedMore(n) => prop_assert!(n >= 1 && cut as u64 + n <= header_end as u64),
            PrefixParse::Complete(h) => prop_assert_eq!(&*h, header),
        }
        match Header::parse_prefix(&bytes[..header_end]).unwrap() {
            PrefixParse::Complete(h) => prop_assert_eq!(&*h, header),
            PrefixParse::NeedMore(n) => prop_assert!(false, "complete header asked for {} more", n),
        }
    }

    #[test]
    fn planes_split_join_and_dequantise_like_blocks(
        ty in prop::sample::select(vec![TensorType::Q8_0, TensorType::Q4_0]),
        n_blocks in 0usize..40,
        seed in any::<u64>(),
    ) {
        let mut blocks = Rng(seed).bytes(n_blocks * ty.block_bytes() as usize);
        // Finite scales only: NaN != NaN would make equal outputs compare unequal.
        for b in blocks.chunks_exact_mut(ty.block_bytes() as usize) {
            b[1] &= 0x7B;
        }
        let (nq, ns) = plane_sizes(ty, n_blocks).unwrap();
        let (mut q, mut s) = (vec![0; nq], vec![0; ns]);
        split_planes(ty, &blocks, &mut q, &mut s).unwrap();
        let mut joined = vec![0; blocks.len()];
        join_planes(ty, &q, &s, &mut joined).unwrap();
        prop_assert_eq!(&joined, &blocks);

        let (mut a, mut b) = (vec![0f32; n_blocks * 32], vec![1f32; n_blocks * 32]);
        dequantize(ty, &blocks, &mut a).unwrap();
        dequantize_planes(ty, &q, &s, &mut b).unwrap();
        prop_assert_eq!(a.iter().map(|x| x.to_bits()).collect::<Vec<_>>(), b.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
    }
}

#[test]
fn streamed_tensor_must_write_its_exact_size() {
    let mut w = GgufWriter::new();
    w.add_tensor_fill("t", TensorType::F32, &[4], |out| out.write_all(&[0; 12])).unwrap();
    let err = w.write_to(Vec::new()).unwrap_err();
    assert!(matches!(err, diskformer_gguf::Error::TensorSize { expected: 16, got: 12, .. }), "{err}");
}

#[test]
fn writer_refuses_duplicates_and_bad_sizes() {
    use diskformer_gguf::Error;
    let mut w = GgufWriter::new();
    w.add_metadata("k", Value::U8(1)).unwrap();
    assert!(matches!(w.add_metadata("k", Value::U8(2)), Err(Error::DuplicateKey { .. })));
    assert!(matches!(w.set_alignment(48), Err(Error::BadAlignment { alignment: 48 })));
    w.add_tensor("t", TensorType::F32, &[2], vec![0; 8]).unwrap();
    assert!(matches!(
        w.add_tensor("t", TensorType::F32, &[2], vec![0; 8]),
        Err(Error::DuplicateTensor { .. })
    ));
    assert!(matches!(w.add_tensor("u", TensorType::F32, &[2], vec![0; 7]), Err(Error::TensorSize { .. })));
    assert!(matches!(
        w.add_tensor("v", TensorType::Q8_0, &[31], vec![0; 34]),
        Err(Error::RowNotBlockAligned { .. })
    ));
}

#[test]
fn file_round_trip_through_mmap() {
    let dir = std::env::temp_dir().join(format!("diskformer-gguf-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.gguf");
    let mut w = GgufWriter::new();
    w.add_metadata("general.name", Value::String("t".into())).unwrap();
    w.add_tensor("a", TensorType::Q8_0, &[64, 2], Rng(1).bytes(136)).unwrap();
    let n = w.write_file(&path).unwrap();
    let file = diskformer_gguf::GgufFile::open(&path).unwrap();
    assert_eq!(file.bytes().len() as u64, n);
    assert_eq!(file.tensor_data("a").unwrap(), &Rng(1).bytes(136)[..]);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn missing_file_is_an_io_error_naming_the_path() {
    let err = diskformer_gguf::GgufFile::open("/nonexistent/model.gguf").unwrap_err();
    assert!(matches!(&err, diskformer_gguf::Error::Io { path, .. } if path.ends_with("model.gguf")));
}
