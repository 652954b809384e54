//! The demo model `diskformer chat` and `diskformer serve` run when no `--model` is given: a 2 MB qwen3moe
//! (4 layers, 8 experts of which the router picks 2, a 1,024-token byte-level BPE) trained by
//! `scripts/demo/train_demo.py` on Ambrose Bierce's "The Devil's Dictionary" (1911, public domain) set as
//! chats, so that the whole pipeline answers in words: ask it what a word means. `demo/README.md` says how
//! it was made and what it does.

use std::io::Write;
use std::path::{Path, PathBuf};

/// The demo model's GGUF.
pub const DEMO_GGUF: &[u8] = include_bytes!("../demo/devil-moe.gguf");

/// Its file name, with a hash of its bytes: another model (a retrained one has the same size) gets another
/// name, so that a store ingested from an older one beside it is never taken for its own.
pub fn demo_file_name() -> String {
    // FNV-1a, 64 bits: enough to tell the models built into different binaries apart.
    let hash = DEMO_GGUF
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    format!("devil-moe-{hash:016x}.gguf")
}

/// Writes the demo model into `dir` (made if missing) unless it is there already, and returns its path. The
/// bytes go to a temporary file first, renamed into place, so an interrupted write leaves no partial model.
///
/// # Errors
/// Creating the directory or writing the file.
pub fn write_demo(dir: &Path) -> std::io::Result<PathBuf> {
    let path = dir.join(demo_file_name());
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == DEMO_GGUF.len() as u64) {
        return Ok(path);
    }
    std::fs::create_dir_all(dir)?;
    let part = path.with_extension(format!("{}.part", std::process::id()));
    let written =
        std::fs::File::create(&part).and_then(|mut f| f.write_all(DEMO_GGUF).and_then(|()| f.sync_all()));
    match written.and_then(|()| std::fs::rename(&part, &path)) {
        Ok(()) => Ok(path),
        Err(e) => {
            let _ = std::fs::remove_file(&part);
            Err(e)
        }
    }
}

/// [`write_demo`] into `diskformer-demo` in the temporary directory, where the CLI keeps it and its store.
///
/// # Errors
/// As [`write_demo`].
pub fn demo_in_temp_dir() -> std::io::Result<PathBuf> {
    write_demo(&std::env::temp_dir().join("diskformer-demo"))
}
