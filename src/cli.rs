//! What command-line programs built on diskformer share: byte sizes as people write them, GPU budgets, and
//! an environment the GPU drivers start quietly in.

/// A byte size as people write it: `4GB`, `512MiB`, `4g`, `1.5GB` (units B, K/KB, M/MB, G/GB = powers of
/// 1000; KiB, MiB, GiB = powers of 1024; case ignored).
pub fn parse_bytes(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("{s:?} is not a size like 4GB or 512MiB"))?;
    let mult = match unit.trim() {
        "" | "b" => 1.0,
        "kb" | "k" => 1e3,
        "mb" | "m" => 1e6,
        "gb" | "g" => 1e9,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        other => return Err(format!("unknown unit {other:?} in {s:?}; use B, KB, MB, GB, KiB, MiB or GiB")),
    };
    Ok((n * mult) as u64)
}

/// A GPU memory budget as people give it: `auto` (`None`: the engine sizes it from the adapter's memory,
/// `auto_gpu_budget`) or a size as [`parse_bytes`] reads it.
pub fn parse_budget(s: &str) -> Result<Budget, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(Budget(None));
    }
    parse_bytes(s).map(|b| Budget(Some(b))).map_err(|e| format!("{e}, or auto"))
}

/// What [`parse_budget`] read: `None` for `auto`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Budget(pub Option<u64>);

/// Gives the process a private `XDG_RUNTIME_DIR` when it has none (a container, a service, ssh without a
/// login session): Mesa's drivers (lavapipe among them) look for a display server there and print
/// "XDG_RUNTIME_DIR is invalid or not set" otherwise. Call first thing in `main`, before any thread starts.
pub fn runtime_dir_for_drivers() {
    let valid = std::env::var_os("XDG_RUNTIME_DIR").is_some_and(|d| std::path::Path::new(&d).is_dir());
    if valid {
        return;
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        // Per user (the name carries the uid), private as the spec asks.
        let dir = std::env::temp_dir().join(format!("diskformer-runtime-{}", unsafe { libc::getuid() }));
        if std::fs::DirBuilder::new().mode(0o700).create(&dir).is_ok() || dir.is_dir() {
            // Safety: called before any other thread exists, so nothing reads the environment meanwhile.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_budgets_parse_as_people_write_them() {
        assert_eq!(parse_bytes("4GB"), Ok(4_000_000_000));
        assert_eq!(parse_bytes("512MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5g"), Ok(1_500_000_000));
        assert!(parse_bytes("4 parsecs").unwrap_err().contains("unknown unit"));
        assert_eq!(parse_budget("auto"), Ok(Budget(None)));
        assert_eq!(parse_budget(" AUTO "), Ok(Budget(None)));
        assert_eq!(parse_budget("16GB"), Ok(Budget(Some(16_000_000_000))));
        let bad = parse_budget("lots").unwrap_err();
        assert!(bad.contains("\"lots\"") && bad.ends_with("or auto"), "{bad}");
    }
}
