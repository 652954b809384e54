//! The routed experts' FFN on the host: `out[t] = Σ_a w_a · down_a(silu(gate_a · x_t) ⊙ (up_a · x_t))` over
//! the assignments `a` of token `t`, in assignment order, for one token or a few.
//!
//! One job on the pool. gate‖up: a task is 32 rows of one expert for every token assigned to it (each
//! weight row read once, while it is in L1, for all of them), its SwiGLU written and, for quantised
//! math, quantised as a block. down: a task is 64 output rows of one expert for each of its assignments, into
//! the assignment's own output; the outputs are summed in assignment order at the end, so the result
//! does not depend on the thread count.

// Performance note (2026-12-04, on the 2-core development machine): a dot of 4 rows at once (each input
// block loaded once for the 4, their sums side by side) ran 35 % slower than one row at a time. Again
// (2026-12-05, the same machine, now with AVX-512 VNNI): Q4_K/Q5_K rows two at once on quantised inputs (a
// gate row with its up row, down rows in pairs, the input's loads and run terms shared) took Q4_K on Q16
// inputs from 7.0 to 7.3–7.5 GiB/s on one thread but Q5_K on Q8_0 from 8.3–8.6 to 7.8–8.2, and moved two
// threads by ±6 %: not kept.
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::activation::{quantize_block, quantize_block_16, sums_of_16};
use crate::dot::dot;
use crate::gemv::check_input;
use crate::{BLOCK, Error, Input, Isa, PoolTimes, Q8Row, Q16Row, QuantMatrix, Result, WorkerPool};

/// Rows a gate‖up task takes: one Q8_0 block of the activation, so a task quantises what it wrote.
const TASK_ROWS: usize = BLOCK;
/// Output rows a down task takes (of one expert: 52 KB of Q8_0 weights at ffn 768).
const DOWN_ROWS: usize = 64;

/// One expert's three matrices: gate and up `[ffn, hidden]`, down `[hidden, ffn]` (rows × values a row).
#[derive(Clone, Copy, Debug)]
pub struct ExpertWeights<'a> {
    gate: QuantMatrix<'a>,
    up: QuantMatrix<'a>,
    down: QuantMatrix<'a>,
}

impl<'a> ExpertWeights<'a> {
    /// The expert, its shapes checked.
    ///
    /// # Errors
    /// [`Error::ShapeMismatch`] when gate and up differ or down is not their transpose's shape.
    pub fn new(gate: QuantMatrix<'a>, up: QuantMatrix<'a>, down: QuantMatrix<'a>) -> Result<Self> {
        let (ffn, hidden) = (gate.rows(), gate.cols());
        if (up.rows(), up.cols()) != (ffn, hidden) || (down.rows(), down.cols()) != (hidden, ffn) {
            return Err(Error::ShapeMismatch {
                what: "expert",
                detail: format!(
                    "gate [{ffn}, {hidden}], up [{}, {}], down [{}, {}]; down must be [{hidden}, {ffn}]",
                    up.rows(),
                    up.cols(),
                    down.rows(),
                    down.cols()
                ),
            });
        }
        Ok(Self { gate, up, down })
    }

    /// Model width.
    pub fn hidden(&self) -> usize {
        self.gate.cols()
    }

    /// Expert FFN width.
    pub fn ffn(&self) -> usize {
        self.gate.rows()
    }

    /// Bytes of weights one pass reads.
    pub fn weight_bytes(&self) -> usize {
        self.gate.weight_bytes() + self.up.weight_bytes() + self.down.weight_bytes()
    }
}

/// How the matmuls take their inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Math {
    /// f32 inputs, weights dequantised exactly: the GPU path's numerics (the goldens' tolerance).
    #[default]
    F32,
    /// Inputs quantised to Q8_0 first (the token row before gate‖up, the activation before down), as
    /// llama.cpp's CPU backend does for Q8_0 and Q4_0 (for the K-quants it takes Q8_K, a scale a
    /// 256-value block; here they take the same Q8_0 rows): integer dot products, less to read from cache,
    /// faster.
    Q8,
    /// Inputs quantised to 16 bits as two int8 halves ([`crate::Q16Row`]), at the same points: the Q8
    /// kernels' integer products twice, within 2^-16 of a block's largest value (2^-15 at worst) where Q8
    /// is within 2^-8, so that a pick computed here agrees with the GPU's f32 one to about f32's rounding.
    Q16,
}

impl Math {
    /// Its name in stats and JSON: `f32`, `q8` or `q16`.
    pub fn name(self) -> &'static str {
        match self {
            Math::F32 => "f32",
            Math::Q8 => "q8",
            Math::Q16 => "q16",
        }
    }
}

/// One token's use of one expert.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Assignment {
    /// Row of the input.
    pub token: usize,
    /// Index into the experts given.
    pub expert: usize,
    /// Its routing weight.
    pub weight: f32,
}

/// A pointer through which tasks write disjoint parts of one buffer.
struct Shared<T>(*mut T, usize);

// Safety: tasks only write disjoint ranges (each method's caller guarantees it) of a buffer that outlives
// the job.
unsafe impl<T: Send> Sync for Shared<T> {}

impl<T> Shared<T> {
    fn new(v: &mut [T]) -> Self {
        Self(v.as_mut_ptr(), v.len())
    }

    /// # Safety
    /// No live mutable reference overlaps `start..start + len`.
    unsafe fn read(&self, start: usize, len: usize) -> &[T] {
        assert!(start + len <= self.1, "task range past its buffer");
        // Safety: in bounds (checked) and not written meanwhile (the caller's guarantee).
        unsafe { std::slice::from_raw_parts(self.0.add(start), len) }
    }

    /// # Safety
    /// No other live reference overlaps `start..start + len`.
    #[allow(clippy::mut_from_ref)]
    unsafe fn range(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.1, "task range past its buffer");
        // Safety: in bounds (checked) and unaliased (the caller's guarantee).
        unsafe { std::slice::from_raw_parts_mut(self.0.add(start), len) }
    }
}

/// The experts' FFN on a worker pool, with one SIMD path for all of it.
#[derive(Debug)]
pub struct CpuExperts {
    pool: WorkerPool,
    isa: Isa,
    buffers: Mutex<Buffers>,
}

/// A job's working memory, kept from call to call: made afresh, a decode layer's ~100 KB came from pages
/// the allocator had handed back, and faulting them in again took tens of microseconds a layer on the
/// calling thread before the job started. Every value a job reads it wrote first, so nothing is cleared.
#[derive(Debug, Default)]
struct Buffers {
    /// Each assignment's SwiGLU activation, `[A, ffn]`, and with quantised math its quants (high halves),
    /// Q16's low halves, block scales, and sums of 16 of each.
    act: Vec<f32>,
    act_q: Vec<i8>,
    act_lo: Vec<i8>,
    act_s: Vec<f32>,
    act_sums: Vec<i32>,
    act_lo_sums: Vec<i32>,
    /// Each assignment's down row, `[A, hidden]`.
    ys: Vec<f32>,
    /// The token rows, quantised for `Math::Q8` or `Math::Q16`.
    q8: Vec<Q8Row>,
    q16: Vec<Q16Row>,
}

impl CpuExperts {
    /// `threads` threads in all (the caller's included), the `isa` path.
    ///
    /// # Errors
    /// [`Error::IsaUnavailable`] when this CPU lacks `isa`.
    pub fn new(threads: usize, isa: Isa) -> Result<Self> {
        if !isa.available() {
            return Err(Error::IsaUnavailable { isa });
        }
        Ok(Self { pool: WorkerPool::new(threads), isa, buffers: Mutex::default() })
    }

    /// The path it runs.
    pub fn isa(&self) -> Isa {
        self.isa
    }

    /// Threads, the caller's included.
    pub fn threads(&self) -> usize {
        self.pool.threads()
    }

    /// Where the pool's jobs spent their time since it started or the last call ([`WorkerPool::take_times`]).
    pub fn take_pool_times(&self) -> PoolTimes {
        self.pool.take_times()
    }

    /// `out[t · hidden..][..hidden] = Σ_a w_a · FFN_{expert_a}(x[t])` over the assignments of each token `t`,
    /// summed in the order given; a token without assignments gets zeros. `x` and `out` are `[T, hidden]`.
    ///
    /// # Errors
    /// [`Error::OutOfRange`] for an assignment past `experts` or the tokens; [`Error::ShapeMismatch`] when the
    /// experts differ in shape or `x` and `out` are not whole rows of their width; [`Error::QuantisedInput`]
    /// for [`Math::Q8`] with experts other than Q8_0, Q4_0, Q4_K, Q5_K and Q6_K; nothing is computed then.
    pub fn moe(
        &self,
        math: Math,
        experts: &[ExpertWeights<'_>],
        x: &[f32],
        assignments: &[Assignment],
        out: &mut [f32],
    ) -> Result<()> {
        self.moe_while(math, experts, x, assignments, out, || ())
    }

    /// [`CpuExperts::moe`], with the calling thread running `meanwhile` while the pool's threads start on
    /// the experts, then joining them; `meanwhile` runs even when the arguments are refused.
    ///
    /// # Errors
    /// As [`CpuExperts::moe`].
    pub fn moe_while<R>(
        &self,
        math: Math,
        experts: &[ExpertWeights<'_>],
        x: &[f32],
        assignments: &[Assignment],
        out: &mut [f32],
        meanwhile: impl FnOnce() -> R,
    ) -> Result<R> {
        let Some(first) = experts.first() else {
            out.fill(0.0);
            let r = meanwhile();
            return match assignments.first() {
                Some(a) => Err(Error::OutOfRange { index: 0, what: "expert", value: a.expert, len: 0 }),
                None => Ok(r),
            };
        };
        let (hidden, ffn) = (first.hidden(), first.ffn());
        let checked = check_shapes(experts, x, assignments, out, (hidden, ffn)).and_then(|()| match experts
            .iter()
            .flat_map(|e| [e.gate, e.up, e.down])
            .find(|m| !m.weight_type().takes_q8())
        {
            Some(k) if math != Math::F32 => {
                Err(Error::QuantisedInput { what: "expert", ty: k.tensor_type() })
            }
            _ => Ok(()),
        });
        if let Err(e) = checked {
            meanwhile();
            return Err(e);
        }
        let tokens = x.len() / hidden;

        // Each expert's assignments, experts in order of first use.
        let mut groups: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, a) in assignments.iter().enumerate() {
            match groups.iter_mut().find(|(e, _)| *e == a.expert) {
                Some((_, members)) => members.push(i),
                None => groups.push((a.expert, vec![i])),
            }
        }
        let rows: Vec<&[f32]> = x.chunks_exact(hidden).collect();
        let mut buffers = self.buffers.lock().unwrap_or_else(|e| e.into_inner());
        let Buffers { act, act_q, act_lo, act_s, act_sums, act_lo_sums, ys, q8, q16 } = &mut *buffers;
        match math {
            Math::F32 => {}
            Math::Q8 => {
                q8.resize_with(tokens, Q8Row::default);
                q8.iter_mut().zip(&rows).for_each(|(q, x)| q.quantize_from(x));
            }
            Math::Q16 => {
                q16.resize_with(tokens, Q16Row::default);
                q16.iter_mut().zip(&rows).for_each(|(q, x)| q.quantize_from(x));
            }
        }
        let (q8, q16) = (&*q8, &*q16);
        let input = |t: usize| match math {
            Math::F32 => Input::F32(rows[t]),
            Math::Q8 => Input::Q8(&q8[t]),
            Math::Q16 => Input::Q16(&q16[t]),
        };
        if let Err(e) = check_input("token row", hidden, input(0)) {
            meanwhile();
            return Err(e);
        }
        debug_assert!(tokens > 0);

        // One job: first every expert's gate‖up and SwiGLU, act[a] = silu(gate · x) ⊙ (up · x) ([A, ffn]),
        // TASK_ROWS rows a task; then every expert's down, DOWN_ROWS output rows a task, into each
        // assignment's own row of `ys` ([A, hidden]). A down task waits for its expert's gate‖up tasks,
        // which were all claimed before it (tasks are claimed in order), so the wait is at most one
        // task's length, and the job has no barrier between its halves.
        let n = assignments.len();
        act.resize(n * ffn, 0.0);
        // Quantised math: the activation's (high) quants, Q16's low halves, the blocks' scales, and the sums
        // of 16 of each (what the K-quant kernels' minimums take), written by each gate‖up task for its block
        // so that down tasks copy the row whole rather than making it again (or waiting on one that does).
        let (quantised, two) = (math != Math::F32, math == Math::Q16);
        act_q.resize(if quantised { n * ffn } else { 0 }, 0);
        act_lo.resize(if two { n * ffn } else { 0 }, 0);
        act_s.resize(if quantised { n * ffn / BLOCK } else { 0 }, 0.0);
        act_sums.resize(if quantised { n * ffn / 16 } else { 0 }, 0);
        act_lo_sums.resize(if two { n * ffn / 16 } else { 0 }, 0);
        ys.resize(n * hidden, 0.0);

        let up_chunks = ffn / TASK_ROWS;
        let down_chunks = hidden.div_ceil(DOWN_ROWS);
        let up_tasks = groups.len() * up_chunks;
        let finished: Vec<AtomicUsize> = groups.iter().map(|_| AtomicUsize::new(0)).collect();
        let isa = self.isa;
        let result = {
            let (act_w, q_w, s_w) = (Shared::new(act), Shared::new(act_q), Shared::new(act_s));
            let (lo_w, lo_sums_w) = (Shared::new(act_lo), Shared::new(act_lo_sums));
            let ys_w = Shared::new(ys);
            let sums_w = Shared::new(act_sums);
            let task = |task: usize| {
                if task < up_tasks {
                    let group = task / up_chunks;
                    // Counted even if the task panics, so no down task waits forever (the job then panics).
                    let _count = Finished(&finished[group]);
                    let (expert, members) = &groups[group];
                    let e = &experts[*expert];
                    let r0 = task % up_chunks * TASK_ROWS;
                    let ty = (e.gate.weight_type(), e.up.weight_type());
                    for &a in members {
                        let xt = input(assignments[a].token);
                        // Safety: task (expert, chunk) alone writes rows r0..r0 + 32 of its assignments.
                        let out = unsafe { act_w.range(a * ffn + r0, TASK_ROWS) };
                        for (i, o) in out.iter_mut().enumerate() {
                            let g = dot(isa, ty.0, e.gate.row(r0 + i), xt);
                            let u = dot(isa, ty.1, e.up.row(r0 + i), xt);
                            *o = g / (1.0 + (-g).exp()) * u;
                        }
                        if quantised {
                            // Safety: as above, one block of the quantised activation and its two sums of 16.
                            let (q, s, sums) = unsafe {
                                (
                                    q_w.range(a * ffn + r0, TASK_ROWS),
                                    s_w.range((a * ffn + r0) / BLOCK, 1),
                                    sums_w.range((a * ffn + r0) / 16, 2),
                                )
                            };
                            if two {
                                // Safety: as above, the block's low halves and their sums.
                                let (lo, lo_sums) = unsafe {
                                    (
                                        lo_w.range(a * ffn + r0, TASK_ROWS),
                                        lo_sums_w.range((a * ffn + r0) / 16, 2),
                                    )
                                };
                                s[0] = quantize_block_16(out, q, lo);
                                sums_of_16(lo, lo_sums);
                            } else {
                                s[0] = quantize_block(out, q);
                            }
                            sums_of_16(q, sums);
                        }
                    }
                    return;
                }
                let task = task - up_tasks;
                let group = task / down_chunks;
                while finished[group].load(Ordering::Acquire) < up_chunks {
                    std::hint::spin_loop();
                }
                let (expert, members) = &groups[group];
                let down = &experts[*expert].down;
                let r0 = task % down_chunks * DOWN_ROWS;
                let count = DOWN_ROWS.min(hidden - r0);
                for &a in members {
                    // Safety: the expert's gate‖up tasks have finished (the Acquire above), and nothing
                    // writes these rows again during the job.
                    let act_row = unsafe { act_w.read(a * ffn, ffn) };
                    // Safety (the reads below): as above; the gate‖up tasks wrote the sums with the quants.
                    let high = || unsafe {
                        Q8Row {
                            quants: q_w.read(a * ffn, ffn).to_vec(),
                            scales: s_w.read(a * ffn / BLOCK, ffn / BLOCK).to_vec(),
                            sums: sums_w.read(a * ffn / 16, ffn / 16).to_vec(),
                        }
                    };
                    let (q8, q16);
                    let x = match math {
                        Math::F32 => Input::F32(act_row),
                        Math::Q8 => {
                            q8 = high();
                            Input::Q8(&q8)
                        }
                        Math::Q16 => {
                            let hi = high();
                            let lo = Q8Row {
                                // Safety: as above.
                                quants: unsafe { lo_w.read(a * ffn, ffn) }.to_vec(),
                                scales: hi.scales.iter().map(|d| d / 256.0).collect(),
                                // Safety: as above.
                                sums: unsafe { lo_sums_w.read(a * ffn / 16, ffn / 16) }.to_vec(),
                            };
                            q16 = Q16Row::from_halves(hi, lo);
                            Input::Q16(&q16)
                        }
                    };
                    // Safety: task (expert, chunk) alone writes these rows of its assignments' outputs.
                    let y = unsafe { ys_w.range(a * hidden + r0, count) };
                    for (i, y) in y.iter_mut().enumerate() {
                        *y = dot(isa, down.weight_type(), down.row(r0 + i), x);
                    }
                }
            };
            self.pool.run_while(up_tasks + groups.len() * down_chunks, &task, meanwhile)
        };

        // The weighted sum, in assignment order.
        out.fill(0.0);
        for (a, y) in assignments.iter().zip(ys.chunks_exact(hidden)) {
            for (o, y) in out[a.token * hidden..][..hidden].iter_mut().zip(y) {
                *o += a.weight * y;
            }
        }
        Ok(result)
    }
}

/// Counts one finished gate‖up task of an expert when dropped (also when the task unwinds).
struct Finished<'a>(&'a AtomicUsize);

impl Drop for Finished<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Release);
    }
}

/// The checks of [`CpuExperts::moe`]'s arguments, `experts` non-empty and its first `(hidden, ffn)`.
fn check_shapes(
    experts: &[ExpertWeights<'_>],
    x: &[f32],
    assignments: &[Assignment],
    out: &[f32],
    (hidden, ffn): (usize, usize),
) -> Result<()> {
    if let Some(e) = experts.iter().find(|e| (e.hidden(), e.ffn()) != (hidden, ffn)) {
        let detail = format!("[{ffn}, {hidden}] and [{}, {}]", e.ffn(), e.hidden());
        return Err(Error::ShapeMismatch { what: "experts of one call", detail });
    }
    if !x.len().is_multiple_of(hidden) || x.len() != out.len() || !ffn.is_multiple_of(TASK_ROWS) {
        let detail = format!("input {} and output {} values, hidden {hidden}, ffn {ffn}", x.len(), out.len());
        return Err(Error::ShapeMismatch { what: "moe", detail });
    }
    let tokens = x.len() / hidden;
    for (index, a) in assignments.iter().enumerate() {
        if a.token >= tokens {
            return Err(Error::OutOfRange { index, what: "token", value: a.token, len: tokens });
        }
        if a.expert >= experts.len() {
            return Err(Error::OutOfRange { index, what: "expert", value: a.expert, len: experts.len() });
        }
    }
    Ok(())
}
