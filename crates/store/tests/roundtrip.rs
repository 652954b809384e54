//! Ingest is lossless: every expert record joins back to exactly its GGUF slices, and every dense tensor to
//! its source bytes, for arbitrary small qwen3moe-shaped GGUFs (Q8_0 and Q4_0 experts in planes, and K-quant
//! mixes in blocks: Q4_K gate and up, Q6_K down on odd layers).

mod common;

use common::{Shape, TempDir, write_model};
use diskformer_gguf::{GgufFile, TensorType, join_planes, write_split};
use diskformer_store::{DenseData, ExpertKey, ExpertPart, IngestOptions, RecordBuf, Store, ingest};
use proptest::prelude::*;

/// Every dense tensor, as the store maps it (`dense.bin`, or the GGUF for those kept there), is its source
/// bytes (Q8_0 planes joined back).
fn check_dense(gguf: &GgufFile, store: &Store) -> Result<(), TestCaseError> {
    let map = store.map_dense().unwrap();
    for t in &store.layout().dense {
        let src = gguf.tensor_data(&t.name).unwrap();
        if let Some((quants, scales)) = map.planes(&t.data) {
            let mut joined = vec![0u8; src.len()];
            join_planes(TensorType::Q8_0, quants, scales, &mut joined).unwrap();
            prop_assert_eq!(&joined[..], src, "dense tensor {}", t.name);
        } else {
            prop_assert_eq!(map.raw(&t.data).unwrap(), src, "dense tensor {}", t.name);
        }
    }
    Ok(())
}

fn check_store(gguf: &GgufFile, store: &Store) -> Result<(), TestCaseError> {
    check_dense(gguf, store)?;
    let layout = store.layout();
    let x = layout.experts.as_ref().unwrap();
    let ty = TensorType::from_name(&x.quant_type);
    let reader = store.record_reader(false).unwrap();
    let mut buf = RecordBuf::new(x.record_bytes as usize);
    for layer in 0..x.n_layers {
        for expert in 0..x.n_experts {
            reader.read(ExpertKey { layer, expert }, &mut buf).unwrap();
            let rec = buf.as_slice();
            let slice = |part: &str| {
                let data = gguf.tensor_data(&format!("blk.{layer}.ffn_{part}_exps.weight")).unwrap();
                let n = data.len() / x.n_experts as usize;
                data[expert as usize * n..(expert as usize + 1) * n].to_vec()
            };
            let region = |r: diskformer_store::Region| &rec[r.offset as usize..r.end() as usize];
            let Some(ty) = ty else {
                // Records of blocks: each part as the GGUF holds it, of its own type.
                for part in ExpertPart::ALL {
                    let (part_ty, r) = x.part(layer, part).unwrap();
                    let name = format!("blk.{layer}.ffn_{}_exps.weight", part.name());
                    prop_assert_eq!(Some(part_ty), gguf.header().tensor(&name).map(|t| t.ty));
                    prop_assert_eq!(
                        region(r),
                        &slice(part.name())[..],
                        "layer {} expert {} {:?}",
                        layer,
                        expert,
                        part
                    );
                }
                continue;
            };
            let (gq, gs) = (region(x.gate_up_quants), region(x.gate_up_scales));
            let (hq, hs) = (gq.len() / 2, gs.len() / 2);
            for (part, q, s) in [
                ("gate", &gq[..hq], &gs[..hs]),
                ("up", &gq[hq..], &gs[hs..]),
                ("down", region(x.down_quants), region(x.down_scales)),
            ] {
                let want = slice(part);
                let mut joined = vec![0u8; want.len()];
                join_planes(ty, q, s, &mut joined).unwrap();
                prop_assert_eq!(joined, want, "layer {} expert {} {}", layer, expert, part);
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn records_and_dense_tensors_join_back_to_the_gguf(
        layers in 1u32..4,
        experts in 1u64..6,
        hidden in prop::sample::select(vec![32u64, 64, 96]),
        ffn in prop::sample::select(vec![32u64, 64]),
        types in 0..3u8,
        chunk_kib in prop::sample::select(vec![4usize, 7, 64]),
        shards in 1u16..4,
        seed in any::<u64>(),
    ) {
        let dir = TempDir::new("prop");
        let (expert_type, odd_down) = [
            (TensorType::Q8_0, None),
            (TensorType::Q4_0, None),
            (TensorType::Q4K, Some(TensorType::Q6K)),
        ][types as usize];
        // K-quant rows are whole 256-value super-blocks.
        let (hidden, ffn) = if odd_down.is_some() { (hidden * 8, ffn * 8) } else { (hidden, ffn) };
        let shape = Shape { layers, experts, hidden, ffn, expert_type, odd_down, vocab: 3 };
        let path = write_model(dir.path(), "m.gguf", &shape, seed);
        // A gguf-split set of the same file is read as one stream across its shards.
        let source = if shards > 1 {
            let first = dir.path().join(format!("m-00001-of-{shards:05}.gguf"));
            write_split(&GgufFile::open(&path).unwrap(), shards, &first).unwrap();
            first
        } else {
            path.clone()
        };
        // Small chunks split tensors and expert slices across reads.
        let opts = IngestOptions { chunk_bytes: chunk_kib << 10, ..IngestOptions::default() };
        ingest(&source, &dir.path().join("store"), &opts, &mut |_| {}).unwrap();
        let store = Store::open(dir.path().join("store")).unwrap();
        store.verify().unwrap();
        check_store(&GgufFile::open(&path).unwrap(), &store)?;
    }
}

#[test]
fn a_split_set_makes_the_store_of_its_merged_file() {
    let dir = TempDir::new("split-store");
    let shape = Shape { layers: 3, ..Shape::small() };
    let path = write_model(dir.path(), "m.gguf", &shape, 11);
    let first = dir.path().join("m-00001-of-00003.gguf");
    let shards = write_split(&GgufFile::open(&path).unwrap(), 3, &first).unwrap();
    let opts = IngestOptions::default();
    ingest(&path, &dir.path().join("whole"), &opts, &mut |_| {}).unwrap();
    let mut last = None;
    let summary =
        ingest(&first, &dir.path().join("split"), &opts, &mut |p| last = Some((p.done, p.total))).unwrap();
    let size: u64 = shards.iter().map(|p| std::fs::metadata(p).unwrap().len()).sum();
    assert_eq!(last, Some((size, size)), "progress runs over every shard");
    let (whole, split) =
        (Store::open(dir.path().join("whole")).unwrap(), Store::open(dir.path().join("split")).unwrap());
    split.verify().unwrap();
    assert_eq!(split.header_bytes(), whole.header_bytes(), "the merged header is the file's");
    for file in [diskformer_store::DENSE_FILE, diskformer_store::EXPERTS_FILE] {
        let read = |d: &str| std::fs::read(dir.path().join(d).join(file)).unwrap();
        assert!(read("split") == read("whole"), "{file} differs");
    }
    assert_eq!(split.manifest().record_checksums, whole.manifest().record_checksums);
    assert_eq!(split.manifest().source.size, size);
    // The sha256 is the concatenated shards'.
    let mut all = Vec::new();
    for p in &shards {
        all.extend(std::fs::read(p).unwrap());
    }
    use sha2::Digest;
    let want: String = sha2::Sha256::digest(&all).iter().map(|b| format!("{b:02x}")).collect();
    assert_eq!(summary.sha256, want);
    // A second run finds the store complete.
    assert!(ingest(&first, &dir.path().join("split"), &opts, &mut |_| {}).unwrap().up_to_date);
}

/// A K-quant model ingested without copying its experts: the store holds no records, yet reads every record
/// (whole, and in parts as the pool's split reads do) exactly as the store that copied them, maps them in
/// place for the CPU tier, verifies, and refuses to open once the GGUF changes.
#[test]
fn experts_read_in_place_from_the_gguf_equal_the_copied_records() {
    use diskformer_store::{ExpertKey, RecordBytes};
    let dir = TempDir::new("in-gguf");
    let shape = Shape {
        layers: 3,
        experts: 5,
        hidden: 512,
        ffn: 256,
        expert_type: TensorType::Q4K,
        odd_down: Some(TensorType::Q6K),
        vocab: 3,
    };
    let path = write_model(dir.path(), "m.gguf", &shape, 21);
    let first = dir.path().join("m-00001-of-00002.gguf");
    write_split(&GgufFile::open(&path).unwrap(), 2, &first).unwrap();
    let copied = IngestOptions::default();
    let in_place = IngestOptions { copy_experts: false, ..IngestOptions::default() };
    ingest(&path, &dir.path().join("copied"), &copied, &mut |_| {}).unwrap();
    for (source, name) in [(&path, "whole"), (&first, "split")] {
        ingest(source, &dir.path().join(name), &in_place, &mut |_| {}).unwrap();
        let (a, b) =
            (Store::open(dir.path().join("copied")).unwrap(), Store::open(dir.path().join(name)).unwrap());
        assert!(a.experts_in_gguf().is_none());
        let in_gguf = b.experts_in_gguf().expect("experts left in the GGUF");
        assert_eq!(in_gguf.files.len(), if name == "split" { 2 } else { 1 });
        assert_eq!(std::fs::metadata(b.experts_path()).unwrap().len(), 0, "no records written");
        assert_eq!(a.manifest().record_checksums, b.manifest().record_checksums);
        // The dense tensors but the Q8_0 ones stay in the GGUF too: dense.bin holds the planes alone.
        assert_eq!(a.manifest().dense_checksums, b.manifest().dense_checksums);
        let (planes, in_gguf_dense): (Vec<_>, Vec<_>) =
            b.layout().dense.iter().partition(|t| matches!(t.data, DenseData::Planes { .. }));
        assert!(
            !in_gguf_dense.is_empty()
                && in_gguf_dense.iter().all(|t| matches!(t.data, DenseData::InGguf { .. }))
        );
        let plane_bytes: u64 = planes.iter().flat_map(|t| t.data.parts()).map(|r| r.len).sum();
        let dense_len = std::fs::metadata(b.dense_path()).unwrap().len();
        assert!(
            dense_len >= plane_bytes && dense_len < plane_bytes + 4096 * 2 * planes.len() as u64 + 4096,
            "{name}"
        );
        assert!(dense_len < std::fs::metadata(a.dense_path()).unwrap().len(), "{name}");
        check_dense(&GgufFile::open(&path).unwrap(), &b).unwrap();
        b.verify().unwrap();
        let x = a.layout().experts.clone().unwrap();
        // Read in place with O_DIRECT where the file system takes it (the slices are not page-aligned:
        // each read goes through an aligned buffer), through the page cache elsewhere; the same bytes.
        let (ra, rb) = (a.record_reader(false).unwrap(), b.record_reader(true).unwrap());
        assert_eq!(rb.is_direct(), opens_direct(&path), "{name}");
        let buffered = b.record_reader(false).unwrap();
        let mut rng = diskformer_testkit::Rng::new(7);
        let map = b.map_experts().unwrap();
        let (mut ba, mut bb) =
            (RecordBuf::new(x.record_bytes as usize), RecordBuf::new(x.record_bytes as usize));
        for i in 0..x.n_records() {
            let key: ExpertKey = x.key(i);
            ra.read(key, &mut ba).unwrap();
            rb.read(key, &mut bb).unwrap();
            assert!(ba.as_slice() == bb.as_slice(), "{name}: record {key:?}");
            // A piece of the record spanning a part boundary.
            let (_, up) = x.part(key.layer, ExpertPart::Up).unwrap();
            let start = up.offset as usize - 100;
            let mut piece = vec![0u8; 300];
            rb.read_part_into(key, start, &mut piece, 300).unwrap();
            assert_eq!(piece, ba.as_slice()[start..start + 300], "{name}: piece of {key:?}");
            // Pieces of any start and length, read directly and through the page cache.
            for _ in 0..4 {
                let start = rng.below(x.record_bytes - 1) as usize;
                let len = 1 + rng.below(x.record_bytes - start as u64) as usize;
                let (mut direct, mut cached) = (vec![1u8; len], vec![2u8; len]);
                rb.read_part_into(key, start, &mut direct, len).unwrap();
                buffered.read_part_into(key, start, &mut cached, len).unwrap();
                assert!(
                    direct == cached && direct[..] == ba.as_slice()[start..start + len],
                    "{name}: {key:?}"
                );
            }
            let RecordBytes::Parts(parts) = map.record(key) else {
                panic!("{name}: a record in place is parts")
            };
            for (p, bytes) in ExpertPart::ALL.into_iter().zip(parts) {
                let (_, r) = x.part(key.layer, p).unwrap();
                assert_eq!(
                    bytes,
                    &ba.as_slice()[r.offset as usize..r.end() as usize],
                    "{name}: {key:?} {p:?}"
                );
            }
        }
    }
    // The GGUF changed: the store that reads from it refuses to open, naming it and what to do.
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().set_len(1 << 20).unwrap();
    let err = Store::open(dir.path().join("whole")).unwrap_err();
    assert!(matches!(err, diskformer_store::Error::SourceChanged { .. }), "{err}");
    assert!(err.to_string().contains("m.gguf") && err.to_string().contains("ingest the GGUF again"), "{err}");
    assert!(Store::open(dir.path().join("copied")).is_ok(), "a store with its own records stands alone");
}

/// Records of planes (uniform Q8_0 experts) split every block, so they are copied whatever the option.
#[test]
fn planar_experts_are_copied_even_when_asked_not_to() {
    let dir = TempDir::new("in-gguf-planes");
    let path = write_model(dir.path(), "m.gguf", &Shape::small(), 3);
    let opts = IngestOptions { copy_experts: false, ..IngestOptions::default() };
    ingest(&path, &dir.path().join("s"), &opts, &mut |_| {}).unwrap();
    let store = Store::open(dir.path().join("s")).unwrap();
    assert!(store.experts_in_gguf().is_none());
    store.verify().unwrap();
    check_store(&GgufFile::open(&path).unwrap(), &store).unwrap();
}

/// With `either_mode`, a complete store of the same source made the other way is taken as it is (a flag at
/// its default neither copies the model again nor throws a copy away); without it, the store is made again
/// the way asked.
#[test]
fn either_mode_takes_a_store_made_the_other_way() {
    let dir = TempDir::new("either-mode");
    let shape = Shape::small_k_quant();
    let path = write_model(dir.path(), "m.gguf", &shape, 8);
    let store = dir.path().join("s");
    let in_place = IngestOptions { copy_experts: false, ..IngestOptions::default() };
    ingest(&path, &store, &in_place, &mut |_| {}).unwrap();
    let copied_either = IngestOptions { either_mode: true, ..IngestOptions::default() };
    let again = ingest(&path, &store, &copied_either, &mut |_| {}).unwrap();
    assert!(again.up_to_date && again.bytes_read == 0);
    assert!(Store::open(&store).unwrap().experts_in_gguf().is_some(), "still read in place");
    // Asked to copy, without either_mode: made again, copied.
    let again = ingest(&path, &store, &IngestOptions::default(), &mut |_| {}).unwrap();
    assert!(!again.up_to_date && again.bytes_read > 0);
    let s = Store::open(&store).unwrap();
    assert!(s.experts_in_gguf().is_none());
    check_store(&GgufFile::open(&path).unwrap(), &s).unwrap();
    // And a copy is kept by an in-place request with either_mode.
    let in_place_either = IngestOptions { either_mode: true, ..in_place };
    assert!(ingest(&path, &store, &in_place_either, &mut |_| {}).unwrap().up_to_date);
    assert!(Store::open(&store).unwrap().experts_in_gguf().is_none());
}

/// Whether the file system of `path` opens it with O_DIRECT (tmpfs does not).
fn opens_direct(path: &std::path::Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().read(true).custom_flags(libc::O_DIRECT).open(path).is_ok()
}
