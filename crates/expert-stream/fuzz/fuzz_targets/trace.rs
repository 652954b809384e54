//! A routing trace of any bytes, read token by token for a small model (3 layers of 8 experts, top-2): each
//! token either gives picks of that shape (checked here again) or a clear error naming the trace and line;
//! never a panic, and never more tokens than the trace has lines.
#![no_main]

use std::path::Path;

use diskformer_expert_stream::{Error, RouteShape, RouteSource, TraceRoutes};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let shape = RouteShape { layers: 3, experts: 8, top_k: 2 };
    let mut routes = TraceRoutes::from_reader(data, Path::new("fuzz.jsonl"), shape);
    let lines = data.split(|&b| b == b'\n').count();
    for _ in 0..=lines {
        match routes.next_token() {
            Ok(picks) => assert!(shape.check(&picks).is_none(), "a token of the wrong shape: {picks:?}"),
            Err(Error::Trace { line, .. }) => {
                assert!(line >= 1 && line <= lines, "line {line} of {lines}");
                return;
            }
            Err(Error::TraceEnded { .. } | Error::TraceIo { .. }) => return,
            Err(other) => panic!("unexpected error {other}"),
        }
    }
    panic!("more tokens than lines");
});
