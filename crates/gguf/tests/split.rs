//! gguf-split sets: opened from the first shard as one model, and every check llama.cpp's loader makes
//! refusing a broken set with an error that names what is wrong.

use std::path::{Path, PathBuf};

use diskformer_gguf::{
    Error, GgufModel, GgufWriter, SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT, TensorType, Value,
};

/// A fresh directory under the system's temporary one, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new(name: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("diskformer-split-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        Dir(dir)
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a shard is written: its split keys (each as the value given, or left out).
#[derive(Clone)]
struct Keys {
    no: Option<Value>,
    count: Option<Value>,
    tensors: Option<Value>,
}

/// Tensor `i`: 32 f32 values, each `i`.
fn tensor_data(i: u32) -> Vec<u8> {
    (0..32).flat_map(|_| (i as f32).to_le_bytes()).collect()
}

/// Writes `path` with the tensors named `t{i}` for `ids`, the split keys, and in the first shard a model key.
fn write_shard(path: &Path, ids: &[u32], keys: &Keys, first: bool) {
    let mut w = GgufWriter::new();
    if first {
        w.add_metadata("general.architecture", Value::String("qwen3moe".into())).unwrap();
    }
    for (key, value) in
        [(SPLIT_NO, &keys.no), (SPLIT_COUNT, &keys.count), (SPLIT_TENSORS_COUNT, &keys.tensors)]
    {
        if let Some(v) = value {
            w.add_metadata(key, v.clone()).unwrap();
        }
    }
    for &i in ids {
        w.add_tensor(format!("t{i}"), TensorType::F32, &[32], tensor_data(i)).unwrap();
    }
    w.write_file(path).unwrap();
}

/// Writes a set of `shards` over `prefix` in `dir`, tensors 0..7 spread over them; `edit(i, keys)` may
/// change shard i's keys and tensor ids first. Returns the shards' paths.
fn write_set(
    dir: &Path,
    prefix: &str,
    shards: u16,
    mut edit: impl FnMut(usize, &mut Keys, &mut Vec<u32>),
) -> Vec<PathBuf> {
    let per = 7usize.div_ceil(usize::from(shards));
    (0..shards)
        .map(|s| {
            let path = dir.join(format!("{prefix}-{:05}-of-{shards:05}.gguf", s + 1));
            let mut keys = Keys {
                no: Some(Value::U16(s)),
                count: Some(Value::U16(shards)),
                tensors: Some(Value::I32(7)),
            };
            let mut ids: Vec<u32> = (0..7u32).filter(|i| *i as usize / per == usize::from(s)).collect();
            edit(usize::from(s), &mut keys, &mut ids);
            write_shard(&path, &ids, &keys, s == 0);
            path
        })
        .collect()
}

fn problem(result: Result<GgufModel, Error>) -> String {
    match result {
        Err(Error::Split { problem, .. }) => problem,
        Err(other) => panic!("expected a split error, got {other}"),
        Ok(_) => panic!("expected a split error, the set opened"),
    }
}

#[test]
fn a_set_opens_from_its_first_shard_as_one_model() {
    let dir = Dir::new("ok");
    let paths = write_set(&dir.0, "model", 3, |_, _, _| {});
    let model = GgufModel::open(&paths[0]).unwrap();
    assert_eq!(model.shards().map(|(p, _)| p.to_owned()).collect::<Vec<_>>(), paths);
    assert_eq!(model.metadata().get_str("general.architecture").unwrap(), "qwen3moe");
    assert_eq!(model.tensors().len(), 7);
    for i in 0..7u32 {
        let (shard, info) = model.tensor(&format!("t{i}")).unwrap();
        assert_eq!((shard, info.ty), (i as usize / 3, TensorType::F32));
        assert_eq!(model.tensor_data(&format!("t{i}")).unwrap(), tensor_data(i));
    }
    assert!(model.tensor("t7").is_none());
}

#[test]
fn a_file_that_is_not_split_opens_alone() {
    let dir = Dir::new("single");
    let path = dir.0.join("plain.gguf");
    write_shard(&path, &[0, 1], &Keys { no: None, count: None, tensors: None }, true);
    let model = GgufModel::open(&path).unwrap();
    assert_eq!((model.shards().len(), model.tensors().len()), (1, 2));
    // A merged file keeps split.count 0.
    let merged = dir.0.join("merged.gguf");
    write_shard(
        &merged,
        &[0],
        &Keys { no: Some(Value::U16(0)), count: Some(Value::U16(0)), tensors: None },
        true,
    );
    assert_eq!(GgufModel::open(&merged).unwrap().shards().len(), 1);
}

#[test]
fn a_later_shard_names_the_first() {
    let dir = Dir::new("later");
    let paths = write_set(&dir.0, "model", 3, |_, _, _| {});
    let p = problem(GgufModel::open(&paths[1]));
    assert!(p.contains("shard 2 of 3") && p.contains("-00001-of-00003.gguf"), "{p}");
}

#[test]
fn a_missing_shard_is_named() {
    let dir = Dir::new("missing");
    let paths = write_set(&dir.0, "model", 3, |_, _, _| {});
    std::fs::remove_file(&paths[2]).unwrap();
    let p = problem(GgufModel::open(&paths[0]));
    assert!(
        p.contains("shard 3 of 3") && p.contains("model-00003-of-00003.gguf") && p.contains("missing"),
        "{p}"
    );
}

#[test]
fn a_foreign_or_renamed_shard_is_refused() {
    let dir = Dir::new("foreign");
    let paths = write_set(&dir.0, "model", 3, |s, keys, _| {
        if s == 1 {
            keys.no = Some(Value::U16(2));
        }
    });
    let p = problem(GgufModel::open(&paths[0]));
    assert!(p.contains("split.no 2, not 1"), "{p}");
}

#[test]
fn a_first_shard_not_named_as_gguf_split_names_it_is_refused() {
    let dir = Dir::new("name");
    let path = dir.0.join("model.gguf");
    let keys = Keys { no: Some(Value::U16(0)), count: Some(Value::U16(2)), tensors: Some(Value::I32(1)) };
    write_shard(&path, &[0], &keys, true);
    let p = problem(GgufModel::open(&path));
    assert!(p.contains("PREFIX-00001-of-00002.gguf") && p.contains("\"model.gguf\""), "{p}");
}

#[test]
fn split_keys_of_the_wrong_type_are_refused() {
    let dir = Dir::new("types");
    let paths = write_set(&dir.0, "a", 2, |s, keys, _| {
        if s == 0 {
            keys.count = Some(Value::U32(2));
        }
    });
    assert!(problem(GgufModel::open(&paths[0])).contains("split.count is u32, not u16"));
    let paths = write_set(&dir.0, "b", 2, |s, keys, _| {
        if s == 0 {
            keys.tensors = Some(Value::U32(7));
        }
    });
    assert!(problem(GgufModel::open(&paths[0])).contains("split.tensors.count is u32, not i32"));
}

#[test]
fn a_tensor_in_two_shards_or_a_wrong_total_is_refused() {
    let dir = Dir::new("tensors");
    let paths = write_set(&dir.0, "dup", 2, |s, keys, ids| {
        if s == 1 {
            ids.push(0);
            keys.tensors = Some(Value::I32(8));
        }
    });
    let p = problem(GgufModel::open(&paths[0]));
    assert!(p.contains("\"t0\" is in shard 1 and again in shard 2"), "{p}");
    let paths = write_set(&dir.0, "total", 2, |s, keys, _| {
        if s == 0 {
            keys.tensors = Some(Value::I32(9));
        }
    });
    let p = problem(GgufModel::open(&paths[0]));
    assert!(p.contains("hold 7 tensors") && p.contains("says 9"), "{p}");
}

#[test]
fn write_split_makes_a_set_that_opens_as_the_file_and_merges_to_its_header() {
    let dir = Dir::new("write");
    let plain = dir.0.join("plain.gguf");
    write_shard(&plain, &[0, 1, 2, 3, 4], &Keys { no: None, count: None, tensors: None }, true);
    let file = diskformer_gguf::GgufFile::open(&plain).unwrap();
    let first = dir.0.join("m-00001-of-00003.gguf");
    let paths = diskformer_gguf::write_split(&file, 3, &first).unwrap();
    assert_eq!(paths.len(), 3);
    let model = GgufModel::open(&first).unwrap();
    assert_eq!(model.shards().len(), 3);
    for i in 0..5u32 {
        assert_eq!(model.tensor_data(&format!("t{i}")).unwrap(), tensor_data(i));
    }
    // Spread by bytes: every shard holds some of the five equal tensors.
    assert!(model.shards().all(|(_, f)| !f.tensors().is_empty()));
    let merged = diskformer_gguf::Header::parse(&model.merged_header().unwrap()).unwrap();
    assert_eq!(merged, *file.header());
    assert_eq!(*model.header().unwrap(), *file.header());
    // A file that is not split is its own merged header, byte for byte.
    let alone = GgufModel::open(&plain).unwrap().merged_header().unwrap();
    assert_eq!(alone, file.bytes()[..file.header().data_offset as usize]);
    // A bad name or count is refused.
    assert!(diskformer_gguf::write_split(&file, 1, &first).is_err());
    let p = match diskformer_gguf::write_split(&file, 2, &dir.0.join("x.gguf")) {
        Err(Error::Split { problem, .. }) => problem,
        other => panic!("expected a split error, got {other:?}"),
    };
    assert!(p.contains("PREFIX-00001-of-00002.gguf"), "{p}");
}

/// A file without tensors may end inside the padding before its data section (found by the split fuzz
/// target): its merged header is the bytes it has, and they parse.
#[test]
fn a_file_ending_before_its_data_section_merges_to_the_bytes_it_has() {
    let dir = Dir::new("short");
    let path = dir.0.join("short.gguf");
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend([0u8; 17]);
    std::fs::write(&path, &bytes).unwrap();
    let model = GgufModel::open(&path).unwrap();
    let merged = model.merged_header().unwrap();
    assert_eq!(merged, bytes);
    assert!(diskformer_gguf::Header::parse(&merged).unwrap().tensors.is_empty());
}
