//! Bad input and damage: each gives its typed error, never a half-used store. Also the planned layout of the
//! real Qwen3-30B-A3B shape.

mod common;

use std::io::Write;

use common::{Shape, TempDir, flip, write_model};
use diskformer_gguf::{GgufWriter, Header, TensorType, Value};
use diskformer_store::{Error, ExpertKey, IngestOptions, Layout, Manifest, Pin, RecordBuf, Store, ingest};

fn ingest_default(dir: &TempDir) -> std::path::PathBuf {
    let src = write_model(dir.path(), "m.gguf", &Shape::small(), 1);
    ingest(&src, &dir.path().join("s"), &IngestOptions::default(), &mut |_| {}).unwrap();
    src
}

#[test]
fn qwen3_30b_a3b_record_is_5013504_bytes() {
    // Header only: the tensor fills fail at once, after the header has been written.
    let mut w = GgufWriter::new();
    for l in 0..48 {
        for (n, dims) in [("gate", [2048, 768, 128]), ("up", [2048, 768, 128]), ("down", [768, 2048, 128])] {
            w.add_tensor_fill(format!("blk.{l}.ffn_{n}_exps.weight"), TensorType::Q8_0, &dims, |_| {
                Err(std::io::Error::other("header only"))
            })
            .unwrap();
        }
    }
    let mut bytes = Vec::new();
    assert!(w.write_to(&mut bytes).is_err());
    let layout = Layout::plan(&Header::parse(&bytes).unwrap()).unwrap();
    let x = layout.experts.unwrap();
    assert_eq!((x.n_layers, x.n_experts, x.hidden, x.ffn), (48, 128, 2048, 768));
    assert_eq!(x.record_bytes, 5_013_504);
    assert_eq!(x.file_bytes(), 6144 * 5_013_504);
}

#[test]
fn verify_names_a_flipped_byte() {
    let dir = TempDir::new("flip");
    ingest_default(&dir);
    let store = Store::open(dir.path().join("s")).unwrap();
    let x = store.layout().experts.clone().unwrap();
    let key = ExpertKey { layer: 1, expert: 2 };
    let at = x.record_offset(key) + x.down_quants.offset + 5;
    flip(&dir.path().join("s/experts.bin"), at);
    match store.verify() {
        Err(Error::ChecksumMismatch { what }) => assert_eq!(what, "expert record (layer 1, expert 2)"),
        other => panic!("expected a checksum mismatch, got {other:?}"),
    }
    flip(&dir.path().join("s/experts.bin"), at);
    store.verify().unwrap();
    let t = store.layout().dense_tensor("blk.0.attn_q.weight").unwrap().clone();
    let diskformer_store::DenseData::Planes { scales, .. } = t.data else {
        panic!("q8_0 is stored as planes")
    };
    flip(&dir.path().join("s/dense.bin"), scales.offset);
    assert!(
        matches!(store.verify(), Err(Error::ChecksumMismatch { what }) if what.contains("blk.0.attn_q.weight"))
    );
}

/// With checks, a record whose bytes do not match its checksum is read again once (past the page cache),
/// then refused, naming the record, its file and what to do; the other records still read, and a reader
/// without checks reads the damaged bytes as they are. In place, the bytes are the GGUF's: the record read
/// whole and its three mapped slices are checked alike.
#[test]
fn checked_reads_refuse_a_damaged_record_naming_it() {
    use diskformer_store::ExpertPart;
    for (name, shape, copy_experts) in
        [("copied", Shape::small(), true), ("in-gguf", Shape::small_k_quant(), false)]
    {
        let dir = TempDir::new(&format!("checked-{name}"));
        let src = write_model(dir.path(), "m.gguf", &shape, 1);
        ingest(
            &src,
            &dir.path().join("s"),
            &IngestOptions { copy_experts, ..IngestOptions::default() },
            &mut |_| {},
        )
        .unwrap();
        let store = Store::open(dir.path().join("s")).unwrap();
        let checks = store.record_checks().unwrap();
        let reader = store.record_reader(false).unwrap().with_checks(checks.clone());
        let plain = store.record_reader(false).unwrap();
        assert!(reader.checks_reads() && !plain.checks_reads());
        let map = store.map_experts().unwrap();
        let x = store.layout().experts.clone().unwrap();
        let mut buf = RecordBuf::new(x.record_bytes as usize);
        let key = ExpertKey { layer: 1, expert: 2 };
        let (file, at) = match store.experts_in_gguf() {
            None => (dir.path().join("s/experts.bin"), x.record_offset(key) + x.record_bytes / 2),
            Some(g) => {
                let (file, at, len) = g.locate(key, ExpertPart::Up);
                (g.path(file).to_owned(), at + len / 3)
            }
        };
        let mapped_matches = || match map.record(key) {
            diskformer_store::RecordBytes::Whole(r) => checks.matches(key, r),
            diskformer_store::RecordBytes::Parts(p) => checks.matches_blocks(key, p),
        };
        reader.read(key, &mut buf).unwrap();
        assert!(mapped_matches(), "{name}");
        flip(&file, at);
        let err = reader.read(key, &mut buf).unwrap_err();
        let text = err.to_string();
        assert!(
            matches!(&err, Error::DamagedRecord { layer: 1, expert: 2, file: f, .. } if *f == file),
            "{name}: {err:?}"
        );
        let what = if copy_experts { "--repair STORE" } else { "download it again" };
        assert!(text.contains("read twice") && text.contains(what), "{name}: {text}");
        assert_eq!(reader.activity().rereads, 1, "{name}");
        assert!(!mapped_matches(), "{name}: the mapped record is damaged too");
        let mapped = map.check(key, &checks).unwrap_err();
        assert!(matches!(&mapped, Error::DamagedRecord { file: f, .. } if *f == file), "{name}: {mapped:?}");
        map.check(ExpertKey { layer: 1, expert: 1 }, &checks).unwrap();
        plain.read(key, &mut buf).unwrap();
        assert!(!checks.matches(key, buf.as_slice()), "{name}");
        reader.read(ExpertKey { layer: 1, expert: 1 }, &mut buf).unwrap();
        reader.read(ExpertKey { layer: 0, expert: 2 }, &mut buf).unwrap();
        assert!(!checks.matches(ExpertKey { layer: 2, expert: 0 }, buf.as_slice()), "a key past the model");
        flip(&file, at);
        reader.read(key, &mut buf).unwrap();
        assert!(mapped_matches(), "{name}");
        map.check(key, &checks).unwrap();
    }
}

/// A record's check taken piece by piece as its bytes stream past agrees with the whole record's, for any
/// cut into pieces, on records of planes and of blocks, intact or with a byte flipped; pieces out of
/// order, missing or given twice never match.
#[test]
fn a_record_hashed_in_pieces_matches_as_it_does_whole() {
    for (name, shape) in [("planes", Shape::small()), ("blocks", Shape::small_k_quant())] {
        let dir = TempDir::new(&format!("hasher-{name}"));
        let src = write_model(dir.path(), "m.gguf", &shape, 3);
        ingest(&src, &dir.path().join("s"), &IngestOptions::default(), &mut |_| {}).unwrap();
        let store = Store::open(dir.path().join("s")).unwrap();
        let checks = store.record_checks().unwrap();
        let reader = store.record_reader(false).unwrap();
        let x = store.layout().experts.clone().unwrap();
        let mut buf = RecordBuf::new(x.record_bytes as usize);
        let mut rng = common::Rng(11);
        for trial in 0..200u64 {
            let key = ExpertKey { layer: (trial % 2) as u32, expert: (trial / 2 % 4) as u32 };
            reader.read(key, &mut buf).unwrap();
            let mut record = buf.as_slice()[..x.record_bytes as usize].to_vec();
            if trial % 3 == 1 {
                let at = rng.below(record.len() as u64) as usize;
                record[at] ^= 1 << rng.below(8);
            }
            let whole = checks.matches(key, &record);
            let mut cuts: Vec<usize> =
                (0..rng.below(6)).map(|_| rng.below(record.len() as u64) as usize).collect();
            cuts.extend([0, record.len()]);
            cuts.sort_unstable();
            let pieces: Vec<(usize, usize)> = cuts.windows(2).map(|w| (w[0], w[1])).collect();
            let hash = |pieces: &[(usize, usize)]| {
                let mut h = checks.hasher(key);
                for &(a, b) in pieces {
                    h.update(a, &record[a..b]);
                }
                h.matches()
            };
            assert_eq!(hash(&pieces), whole, "{name} trial {trial}");
            // Pieces holding some of a part's bytes (the rest is padding, which the check ignores).
            let parts = x.record_parts(key.layer);
            let counted: Vec<usize> = (0..pieces.len())
                .filter(|&i| {
                    let (a, b) = (pieces[i].0 as u64, pieces[i].1 as u64);
                    parts.iter().any(|p| a.max(p.offset) < b.min(p.end()))
                })
                .collect();
            if whole && let [i, j, ..] = counted[..] {
                let mut swapped = pieces.clone();
                swapped.swap(i, j);
                assert!(!hash(&swapped), "{name} trial {trial}: out of order");
                let mut missing = pieces.clone();
                missing.remove(j);
                assert!(!hash(&missing), "{name} trial {trial}: a piece missing");
                let mut twice = pieces.clone();
                twice.insert(i, pieces[i]);
                assert!(!hash(&twice), "{name} trial {trial}: a piece twice");
            }
        }
        // Read through a bounce buffer of any size, in pieces, as a checked load does: the same bytes, and
        // they match.
        let checked = store.record_reader(false).unwrap().with_checks(checks.clone());
        for trial in 0..20u64 {
            let key = ExpertKey { layer: (trial % 2) as u32, expert: (trial % 4) as u32 };
            reader.read(key, &mut buf).unwrap();
            let record = x.record_bytes as usize;
            let mut got = vec![0u8; record];
            let mut bounce = vec![0u8; 1 + rng.below(9000) as usize];
            let (mut hasher, cut) = (checked.hasher(key).unwrap(), rng.below(record as u64) as usize);
            let (head, tail) = got.split_at_mut(cut);
            checked.read_part_hashed(key, 0, head, &mut bounce, &mut hasher).unwrap();
            checked.read_part_hashed(key, cut, tail, &mut bounce, &mut hasher).unwrap();
            assert_eq!(got, buf.as_slice()[..record], "{name} trial {trial}");
            assert!(hasher.matches(), "{name} trial {trial}");
        }
        let past = ExpertKey { layer: x.n_layers, expert: 0 };
        let mut h = checks.hasher(past);
        h.update(0, &buf.as_slice()[..x.record_bytes as usize]);
        assert!(!h.matches(), "{name}: a key past the model");
    }
}

#[test]
fn incomplete_foreign_and_damaged_stores_are_refused() {
    let dir = TempDir::new("refuse");
    ingest_default(&dir);
    let s = dir.path().join("s");
    let mut m = Manifest::load(&s).unwrap().unwrap();
    m.complete = false;
    m.save(&s).unwrap();
    assert!(matches!(Store::open(&s), Err(Error::Incomplete { .. })));
    m.complete = true;
    // A store of the first format (records of Q8_0 planes only) is refused with what to do.
    m.version = 1;
    m.save(&s).unwrap();
    assert!(matches!(Store::open(&s),
        Err(Error::BadManifest { what, .. }) if what.contains("version 1") && what.contains("ingest the GGUF again")));
    m.version = diskformer_store::FORMAT_VERSION;
    m.save(&s).unwrap();
    std::fs::OpenOptions::new().append(true).open(s.join("experts.bin")).unwrap().write_all(&[0]).unwrap();
    assert!(matches!(Store::open(&s), Err(Error::WrongFileSize { .. })));
    assert!(matches!(Store::open(dir.path()), Err(Error::NotAStore { .. })));
    std::fs::write(s.join("manifest.json"), "{").unwrap();
    assert!(matches!(Store::open(&s), Err(Error::BadManifest { .. })));
}

#[test]
fn a_version_mismatch_or_other_source_starts_over() {
    let dir = TempDir::new("over");
    let src = ingest_default(&dir);
    let s = dir.path().join("s");
    let again = ingest(&src, &s, &IngestOptions::default(), &mut |_| {}).unwrap();
    assert!(again.up_to_date);
    let other = write_model(dir.path(), "other.gguf", &Shape { experts: 5, ..Shape::small() }, 9);
    let summary = ingest(&other, &s, &IngestOptions::default(), &mut |_| {}).unwrap();
    assert!(!summary.up_to_date && summary.resumed_from.is_none());
    assert_eq!(Store::open(&s).unwrap().layout().experts.as_ref().unwrap().n_experts, 5);
    // Nothing of the first model survives, not even in alignment gaps.
    let fresh = dir.path().join("fresh");
    ingest(&other, &fresh, &IngestOptions::default(), &mut |_| {}).unwrap();
    for f in [diskformer_store::DENSE_FILE, diskformer_store::EXPERTS_FILE] {
        assert!(std::fs::read(s.join(f)).unwrap() == std::fs::read(fresh.join(f)).unwrap(), "{f} differs");
    }
}

#[test]
fn truncated_source_is_refused_before_writing() {
    let dir = TempDir::new("trunc");
    let src = write_model(dir.path(), "m.gguf", &Shape::small(), 1);
    let len = std::fs::metadata(&src).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&src).unwrap().set_len(len - 100).unwrap();
    let err = ingest(&src, &dir.path().join("s"), &IngestOptions::default(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::SourceTruncated { .. }), "{err}");
    assert!(Manifest::load(&dir.path().join("s")).unwrap().is_none());
    // Cut inside the header.
    std::fs::OpenOptions::new().write(true).open(&src).unwrap().set_len(40).unwrap();
    let err = ingest(&src, &dir.path().join("s"), &IngestOptions::default(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::SourceTruncated { .. } | Error::Gguf { .. }), "{err}");
}

#[test]
fn a_corrupt_header_length_is_not_read_into_memory() {
    let dir = TempDir::new("hdr");
    let path = dir.path().join("big.gguf");
    // One metadata string claiming 300 MiB, in a sparse file large enough to hold it.
    let mut bytes = b"GGUF".to_vec();
    for v in [3u32.to_le_bytes().to_vec(), 0u64.to_le_bytes().to_vec(), 1u64.to_le_bytes().to_vec()] {
        bytes.extend(v);
    }
    bytes.extend(1u64.to_le_bytes());
    bytes.push(b'k');
    bytes.extend(8u32.to_le_bytes());
    bytes.extend((300u64 << 20).to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(400 << 20).unwrap();
    let err = ingest(&path, &dir.path().join("s"), &IngestOptions::default(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::HeaderTooLarge { .. }), "{err}");
}

#[test]
fn pins_refuse_other_files() {
    let dir = TempDir::new("pin");
    let src = write_model(dir.path(), "m.gguf", &Shape::small(), 1);
    let size = std::fs::metadata(&src).unwrap().len();
    let opts = |size, sha: &str| IngestOptions {
        pin: Some(Pin { size, sha256: sha.into() }),
        ..IngestOptions::default()
    };
    let err = ingest(&src, &dir.path().join("s"), &opts(size + 1, "00"), &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::PinMismatch { .. }));
    let err = ingest(&src, &dir.path().join("s"), &opts(size, "00"), &mut |_| {}).unwrap_err();
    assert!(matches!(&err, Error::PinMismatch { what, .. } if what.contains("sha256")), "{err}");
    assert!(matches!(
        Store::open(dir.path().join("s")),
        Err(Error::NotAStore { .. } | Error::Incomplete { .. })
    ));
    let sha = {
        use sha2::{Digest, Sha256};
        Sha256::digest(std::fs::read(&src).unwrap()).iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let ok = ingest(&src, &dir.path().join("s"), &opts(size, &sha.to_uppercase()), &mut |_| {}).unwrap();
    assert_eq!(ok.sha256, sha);
    assert_eq!(
        Store::open(dir.path().join("s")).unwrap().manifest().source.sha256.as_deref(),
        Some(&sha[..])
    );
}

#[test]
fn unsupported_types_name_the_tensor() {
    let dir = TempDir::new("types");
    // An i-quant parses (gguf-dump lists it) and is refused here, named.
    let mut w = GgufWriter::new();
    w.add_tensor("blk.0.ffn_down_exps.weight", TensorType::IQ2XXS, &[256, 32, 2], vec![0; 66 * 64]).unwrap();
    w.write_file(dir.path().join("c.gguf")).unwrap();
    let err =
        ingest(&dir.path().join("c.gguf"), &dir.path().join("s"), &IngestOptions::default(), &mut |_| {});
    assert!(
        matches!(&err, Err(Error::UnsupportedExpertType { name, ty }) if name == "blk.0.ffn_down_exps.weight" && ty == "iq2_xxs")
    );
    let mut w = GgufWriter::new();
    w.add_tensor("output.weight", TensorType::IQ2XXS, &[256], vec![0; 66]).unwrap();
    w.write_file(dir.path().join("b.gguf")).unwrap();
    let err =
        ingest(&dir.path().join("b.gguf"), &dir.path().join("s"), &IngestOptions::default(), &mut |_| {});
    assert!(matches!(err, Err(Error::UnsupportedDenseType { name, .. }) if name == "output.weight"));
}

#[test]
fn a_gguf_split_shard_is_refused_before_writing() {
    let dir = TempDir::new("split");
    let mut w = GgufWriter::new();
    w.add_metadata("split.no", Value::U16(1)).unwrap();
    w.add_metadata("split.count", Value::U16(3)).unwrap();
    w.add_tensor("output.weight", TensorType::F32, &[32], vec![0; 128]).unwrap();
    let src = dir.path().join("m-00002-of-00003.gguf");
    w.write_file(&src).unwrap();
    let err = ingest(&src, &dir.path().join("s"), &IngestOptions::default(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::SplitShard { no: 1, count: 3, .. }), "{err}");
    assert!(
        err.to_string().contains("shard 2 of a gguf-split set of 3")
            && err.to_string().contains("-00001-of-00003.gguf")
    );
    assert!(!dir.path().join("s").exists(), "nothing written");
}

#[test]
fn a_set_with_a_missing_shard_is_refused_before_writing() {
    let dir = TempDir::new("split-missing");
    let path = write_model(dir.path(), "m.gguf", &Shape::small(), 5);
    let first = dir.path().join("m-00001-of-00003.gguf");
    let shards =
        diskformer_gguf::write_split(&diskformer_gguf::GgufFile::open(&path).unwrap(), 3, &first).unwrap();
    std::fs::remove_file(&shards[1]).unwrap();
    let err = ingest(&first, &dir.path().join("s"), &IngestOptions::default(), &mut |_| {}).unwrap_err();
    assert!(matches!(err, Error::Gguf { .. }), "{err}");
    let text = err.to_string();
    assert!(text.contains("shard 2 of 3") && text.contains("m-00002-of-00003.gguf"), "{text}");
    assert!(!dir.path().join("s").exists(), "nothing written");
}

#[test]
fn reader_errors_name_the_record() {
    let dir = TempDir::new("reader");
    ingest_default(&dir);
    let store = Store::open(dir.path().join("s")).unwrap();
    let reader = store.record_reader(true).unwrap();
    let n = reader.layout().record_bytes as usize;
    let mut buf = RecordBuf::new(n);
    assert!(matches!(
        reader.read(ExpertKey { layer: 2, expert: 0 }, &mut buf),
        Err(Error::NoSuchRecord { layer: 2, .. })
    ));
    assert!(matches!(
        reader.read(ExpertKey { layer: 0, expert: 0 }, &mut RecordBuf::new(n / 2)),
        Err(Error::BadBuffer { .. })
    ));
    // Pieces of a record read separately equal the whole record; O_DIRECT refuses unaligned pieces.
    let key = ExpertKey { layer: 1, expert: 2 };
    reader.read(key, &mut buf).unwrap();
    let whole = buf.as_slice()[..n].to_vec();
    let mut pieces = RecordBuf::new(n);
    let cut = 4096.min(n);
    let (head, tail) = pieces.as_mut_slice()[..n].split_at_mut(cut);
    reader.read_part_into(key, 0, head, cut).unwrap();
    let buffered = store.record_reader(false).unwrap();
    buffered.read_part_into(key, cut, tail, n - cut).unwrap();
    assert_eq!(&pieces.as_slice()[..n], &whole[..]);
    let mut odd = vec![0u8; n];
    if reader.is_direct() {
        assert!(matches!(reader.read_part_into(key, 100, &mut odd, 4096), Err(Error::BadBuffer { .. })));
    }
    assert!(matches!(buffered.read_part_into(key, n - 10, &mut odd, 20), Err(Error::BadBuffer { .. })));
    buffered.read_part_into(key, 100, &mut odd, 50).unwrap();
    assert_eq!(&odd[..50], &whole[100..150]);

    // Truncate experts.bin under an open reader: the last record reads short.
    let path = dir.path().join("s/experts.bin");
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(len - 4096).unwrap();
    let err = reader.read(ExpertKey { layer: 1, expert: 3 }, &mut buf).unwrap_err();
    assert!(matches!(err, Error::ShortRead { layer: 1, expert: 3, .. }), "{err}");
}

/// A store that reads its experts from the GGUF but copied its dense tensors (as stores did before they
/// stayed in the GGUF too), or whose manifest places one past its file's end, is refused with what to do.
#[test]
fn an_in_place_store_that_copied_its_dense_tensors_or_misplaces_one_is_refused() {
    let dir = TempDir::new("old-in-gguf");
    let shape = Shape::small_k_quant();
    let src = write_model(dir.path(), "m.gguf", &shape, 4);
    let store = dir.path().join("s");
    let opts = IngestOptions { copy_experts: false, ..IngestOptions::default() };
    ingest(&src, &store, &opts, &mut |_| {}).unwrap();
    Store::open(&store).unwrap();
    let good = Manifest::load(&store).unwrap().unwrap();
    // A dense tensor placed past the end of its GGUF file (a damaged manifest) is refused, not read.
    let mut m = good.clone();
    let t = m
        .layout
        .dense
        .iter_mut()
        .find(|t| matches!(t.data, diskformer_store::DenseData::InGguf { .. }))
        .unwrap();
    if let diskformer_store::DenseData::InGguf { data, .. } = &mut t.data {
        data.offset = std::fs::metadata(&src).unwrap().len();
    }
    m.save(&store).unwrap();
    let err = Store::open(&store).unwrap_err();
    assert!(matches!(err, Error::BadManifest { .. }) && err.to_string().contains("past the end"), "{err}");
    let mut m = good;
    for t in &mut m.layout.dense {
        if let diskformer_store::DenseData::InGguf { data, .. } = t.data {
            t.data = diskformer_store::DenseData::Raw { data };
        }
    }
    m.save(&store).unwrap();
    let err = Store::open(&store).unwrap_err();
    assert!(
        matches!(err, Error::BadManifest { .. }) && err.to_string().contains("ingest the GGUF again"),
        "{err}"
    );
}

/// An in-place store whose manifest places expert slices past the GGUF's end, or of the wrong size, is
/// refused at open rather than read.
#[test]
fn misplaced_expert_slices_are_refused() {
    let dir = TempDir::new("misplaced-experts");
    let shape = Shape::small_k_quant();
    let src = write_model(dir.path(), "m.gguf", &shape, 5);
    let store = dir.path().join("s");
    ingest(&src, &store, &IngestOptions { copy_experts: false, ..IngestOptions::default() }, &mut |_| {})
        .unwrap();
    let good = Manifest::load(&store).unwrap().unwrap();
    let size = std::fs::metadata(&src).unwrap().len();
    type Damage = fn(&mut diskformer_store::PartInFile, u64);
    let damages: [Damage; 3] = [|p, size| p.offset = size, |p, _| p.slice += 1, |p, _| p.file = 7];
    for damage in damages {
        let mut m = good.clone();
        damage(&mut m.experts_in_gguf.as_mut().unwrap().parts[1][2], size);
        m.save(&store).unwrap();
        let err = Store::open(&store).unwrap_err();
        assert!(
            matches!(err, Error::BadManifest { .. }) && err.to_string().contains("layer 1's Down"),
            "{err}"
        );
    }
    good.save(&store).unwrap();
    Store::open(&store).unwrap();
}
