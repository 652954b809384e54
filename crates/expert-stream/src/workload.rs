//! Routing workloads: where a run's expert picks come from when they are forced instead of the router's
//! own (ROUTING.md). A forced pick replaces the router's top-k; everything else runs as it would, the
//! weights coming from the router's softmax over the forced picks.
//!
//! - [`UniformRoutes`]: i.i.d. picks from a seeded generator, `top_k` distinct experts a layer a token. The
//!   hit rate then equals the cache fraction, and no predictor helps: the floor every design must survive.
//! - [`TraceRoutes`]: a trace file, one JSON object a line, one line a token,
//!   `{"picks": [[e, e, …], …]}` (one list of `top_k` distinct expert ids a layer, in layer order), checked
//!   line by line against the model; the `routing-trace` example writes such traces from
//!   [`CalibratedRoutes`](crate::CalibratedRoutes), synthetic picks calibrated to
//!   the published statistics of trained Qwen routers, and [`TraceWriter`] records a run's own picks.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// One token's picks: per layer, `top_k` expert ids.
pub type TokenPicks = Vec<Vec<u32>>;

/// A source of forced picks, one token at a time.
pub trait RouteSource: Send {
    /// The next token's picks.
    ///
    /// # Errors
    /// A trace's bad line or end ([`Error::Trace`], [`Error::TraceEnded`], [`Error::TraceIo`]).
    fn next_token(&mut self) -> Result<TokenPicks>;
}

/// The shape forced picks must have.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RouteShape {
    /// Layers with experts.
    pub layers: u32,
    /// Experts a layer.
    pub experts: u32,
    /// Picks a layer a token.
    pub top_k: u32,
}

impl RouteShape {
    /// Why `picks` are not one token's picks of this shape, if they are not.
    pub fn check(&self, picks: &TokenPicks) -> Option<String> {
        if picks.len() != self.layers as usize {
            return Some(format!("{} layers of picks; the model has {}", picks.len(), self.layers));
        }
        for (l, ids) in picks.iter().enumerate() {
            if ids.len() != self.top_k as usize {
                return Some(format!(
                    "layer {l} has {} picks; the model picks top-{}",
                    ids.len(),
                    self.top_k
                ));
            }
            if let Some(&e) = ids.iter().find(|&&e| e >= self.experts) {
                return Some(format!(
                    "layer {l} picks expert {e}; the model has {} (ids 0..{})",
                    self.experts, self.experts
                ));
            }
            if let Some((i, &e)) = ids.iter().enumerate().find(|(i, e)| ids[..*i].contains(e)) {
                return Some(format!("layer {l} picks expert {e} twice (at {i}); picks are distinct"));
            }
        }
        None
    }
}

/// A seeded generator (SplitMix64): the same seed gives the same workload on every machine.
#[derive(Clone, Debug)]
pub struct SeededRng(u64);

impl SeededRng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        SeededRng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }

    /// Uniform in `[0, 1)`.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// i.i.d. picks: each layer's `top_k` distinct experts drawn uniformly, a seeded generator.
#[derive(Clone, Debug)]
pub struct UniformRoutes {
    shape: RouteShape,
    rng: SeededRng,
}

impl UniformRoutes {
    /// Uniform picks of `shape` from `seed`.
    pub fn new(shape: RouteShape, seed: u64) -> Self {
        UniformRoutes { shape, rng: SeededRng::new(seed) }
    }
}

impl RouteSource for UniformRoutes {
    fn next_token(&mut self) -> Result<TokenPicks> {
        let RouteShape { layers, experts, top_k } = self.shape;
        Ok((0..layers)
            .map(|_| {
                let mut ids = Vec::with_capacity(top_k as usize);
                while ids.len() < top_k as usize {
                    let e = self.rng.below(u64::from(experts)) as u32;
                    if !ids.contains(&e) {
                        ids.push(e);
                    }
                }
                ids
            })
            .collect())
    }
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TraceLine {
    picks: TokenPicks,
}

/// Picks read from a trace (a file, or any reader), each line checked against the model's shape as it is
/// read.
#[derive(Debug)]
pub struct TraceRoutes<R = BufReader<File>> {
    path: PathBuf,
    lines: std::io::Lines<R>,
    shape: RouteShape,
    line: usize,
}

impl TraceRoutes {
    /// Opens the trace at `path` for a model of `shape`.
    ///
    /// # Errors
    /// [`Error::TraceIo`] when it cannot be opened.
    pub fn open(path: &Path, shape: RouteShape) -> Result<Self> {
        let file =
            File::open(path).map_err(|e| Error::TraceIo { path: path.to_owned(), source: Arc::new(e) })?;
        Ok(TraceRoutes::from_reader(BufReader::new(file), path, shape))
    }
}

impl<R: BufRead> TraceRoutes<R> {
    /// Reads a trace from `reader` for a model of `shape`; `path` names it in errors.
    pub fn from_reader(reader: R, path: &Path, shape: RouteShape) -> Self {
        TraceRoutes { path: path.to_owned(), lines: reader.lines(), shape, line: 0 }
    }

    fn bad(&self, what: String) -> Error {
        Error::Trace { path: self.path.clone(), line: self.line, what }
    }
}

impl<R: BufRead + Send> RouteSource for TraceRoutes<R> {
    fn next_token(&mut self) -> Result<TokenPicks> {
        loop {
            let Some(text) = self.lines.next() else {
                return Err(Error::TraceEnded { path: self.path.clone(), tokens: self.line });
            };
            self.line += 1;
            let text = text.map_err(|e| Error::TraceIo { path: self.path.clone(), source: Arc::new(e) })?;
            if text.trim().is_empty() {
                continue;
            }
            let parsed: TraceLine = serde_json::from_str(&text).map_err(|e| {
                self.bad(format!("{e}; expected {{\"picks\": [[top-k expert ids], … one list a layer]}}"))
            })?;
            if let Some(what) = self.shape.check(&parsed.picks) {
                return Err(self.bad(what));
            }
            return Ok(parsed.picks);
        }
    }
}

/// Writes picks as a trace, one line a token, flushed as each token is written (so a run stopped
/// midway leaves whole lines).
#[derive(Debug)]
pub struct TraceWriter {
    path: PathBuf,
    out: BufWriter<File>,
}

impl TraceWriter {
    /// Creates (or truncates) the trace at `path`.
    ///
    /// # Errors
    /// [`Error::TraceIo`].
    pub fn create(path: &Path) -> Result<Self> {
        let file =
            File::create(path).map_err(|e| Error::TraceIo { path: path.to_owned(), source: Arc::new(e) })?;
        Ok(TraceWriter { path: path.to_owned(), out: BufWriter::new(file) })
    }

    /// Appends one token's picks.
    ///
    /// # Errors
    /// [`Error::TraceIo`].
    pub fn write(&mut self, picks: &TokenPicks) -> Result<()> {
        let io = |e: std::io::Error| Error::TraceIo { path: self.path.clone(), source: Arc::new(e) };
        let line = serde_json::to_string(&TraceLine { picks: picks.clone() }).expect("picks serialise");
        writeln!(self.out, "{line}").and_then(|()| self.out.flush()).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHAPE: RouteShape = RouteShape { layers: 2, experts: 8, top_k: 3 };

    fn trace(text: &str) -> (tempfile::TempDir, TraceRoutes) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.jsonl");
        std::fs::write(&path, text).unwrap();
        let routes = TraceRoutes::open(&path, SHAPE).unwrap();
        (dir, routes)
    }

    fn line_error(text: &str) -> (usize, String) {
        let (_dir, mut t) = trace(text);
        loop {
            match t.next_token() {
                Ok(_) => continue,
                Err(Error::Trace { line, what, .. }) => return (line, what),
                Err(e) => panic!("expected a line error, got {e}"),
            }
        }
    }

    #[test]
    fn a_written_trace_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.jsonl");
        let mut uniform = UniformRoutes::new(SHAPE, 7);
        let tokens: Vec<TokenPicks> = (0..5).map(|_| uniform.next_token().unwrap()).collect();
        let mut w = TraceWriter::create(&path).unwrap();
        for t in &tokens {
            assert!(SHAPE.check(t).is_none());
            w.write(t).unwrap();
        }
        let mut r = TraceRoutes::open(&path, SHAPE).unwrap();
        for t in &tokens {
            assert_eq!(&r.next_token().unwrap(), t);
        }
        assert!(matches!(r.next_token(), Err(Error::TraceEnded { tokens: 5, .. })));
    }

    #[test]
    fn bad_lines_are_named() {
        let good = r#"{"picks": [[0, 1, 2], [3, 4, 5]]}"#;
        let cases = [
            (r#"{"picks": [[0, 1, 2]]}"#, "1 layers"),
            (r#"{"picks": [[0, 1, 2], [3, 4, 8]]}"#, "expert 8"),
            (r#"{"picks": [[0, 1], [3, 4, 5]]}"#, "2 picks"),
            (r#"{"picks": [[0, 1, 1], [3, 4, 5]]}"#, "twice"),
            (r#"{"picks": [[0, 1, 2], [3, 4"#, "EOF"),
            (r#"{"ids": [[0, 1, 2], [3, 4, 5]]}"#, "unknown field"),
        ];
        for (bad, says) in cases {
            let (line, what) = line_error(&format!("{good}\n\n{bad}\n{good}\n"));
            assert_eq!(line, 3, "{bad}");
            assert!(what.contains(says), "{bad}: {what}");
        }
    }

    #[test]
    fn uniform_picks_are_distinct_seeded_and_spread() {
        let shape = RouteShape { layers: 1, experts: 16, top_k: 4 };
        let (mut a, mut b) = (UniformRoutes::new(shape, 3), UniformRoutes::new(shape, 3));
        let mut counts = [0u32; 16];
        for _ in 0..4000 {
            let t = a.next_token().unwrap();
            assert_eq!(t, b.next_token().unwrap());
            assert!(shape.check(&t).is_none());
            t[0].iter().for_each(|&e| counts[e as usize] += 1);
        }
        // 1,000 expected each; 5 standard deviations is ±150.
        assert!(counts.iter().all(|&c| (850..1150).contains(&c)), "{counts:?}");
    }
}
