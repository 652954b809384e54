//! CPU references of every kernel, written for clarity, in llama.cpp's operation order. The GPU tests
//! compare against them and the engine's tests may use them as a slow forward pass.
//!
//! Sums that the GPU does in f32 in some tree order are done here in f64 and rounded once, so a test's
//! tolerance bounds the GPU's own rounding.

use half::f16;

/// Dequantised Q8_0 element `(r, c)` of a `[rows, cols]` matrix given as planes.
fn q8(q: &[i8], scales: &[f16], cols: usize, r: usize, c: usize) -> f32 {
    f32::from(q[r * cols + c]) * scales[r * (cols / 32) + c / 32].to_f32()
}

/// Embedding lookup: `out[t] = dequantised row ids[t]` of a `[rows, cols]` Q8_0 table; ids past the
/// table give zeros.
pub fn embed_q8(q: &[i8], scales: &[f16], cols: usize, ids: &[u32]) -> Vec<f32> {
    let rows = q.len() / cols;
    ids.iter()
        .flat_map(|&id| {
            (0..cols)
                .map(move |c| if (id as usize) < rows { q8(q, scales, cols, id as usize, c) } else { 0.0 })
        })
        .collect()
}

/// RMSNorm per row of length `n`: `(x * (1/sqrt(mean(x²) + eps))) * w`, the mean square summed in f64
/// as ggml's CPU backend does.
pub fn rms_norm(x: &[f32], w: &[f32], n: usize, eps: f32) -> Vec<f32> {
    x.chunks(n)
        .flat_map(|row| {
            let ss: f64 = row.iter().map(|&v| f64::from(v * v)).sum();
            let scale = 1.0 / ((ss / n as f64) as f32 + eps).sqrt();
            row.iter().zip(w).map(move |(&v, &w)| (v * scale) * w)
        })
        .collect()
}

/// Residual add then RMSNorm: `h = a + b` and [`rms_norm`] of `h`. Returns `(h, out)`.
pub fn add_rms_norm(a: &[f32], b: &[f32], w: &[f32], n: usize, eps: f32) -> (Vec<f32>, Vec<f32>) {
    let h = add(a, b);
    let out = rms_norm(&h, w, n, eps);
    (h, out)
}

/// Q8_0 GEMV over T inputs: `y[t, r] = Σ_c dequant(W)[r, c] · x[t, c]` for `W [rows, cols]`.
pub fn q8_gemv(q: &[i8], scales: &[f16], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    q8_gemv_as(q, scales, rows, cols, x, f64::from)
}

/// IQ4_NL's codebook (ggml's `kvalues_iq4nl`).
const IQ4_VALUES: [i8; 16] = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113];

/// Value `v` (0..256) of a K-quant super-block (or of 256 values of the other block types), value by value as ggml's `dequantize_row_q2_K` …
/// `dequantize_row_q6_K` lay them out (the GPU kernels' reference; the gguf crate's dequantiser, checked bit
/// for bit against ggml's, is the tests' reference for this).
pub fn kquant_value(quant: crate::BlockQuant, block: &[u8], v: usize) -> f32 {
    let f16_at = |i: usize| f16::from_le_bytes([block[i], block[i + 1]]).to_f32();
    match quant {
        crate::BlockQuant::Q4K | crate::BlockQuant::Q5K => {
            // Sub-block j = v / 32 of chunk v / 64: the low nibbles, then the high ones; Q5_K's fifth bit is
            // bit j of qh[l] (its quants start after the 32 bytes of qh).
            let (j, l) = (v / 32, v % 32);
            let five = quant == crate::BlockQuant::Q5K;
            let q = block[if five { 48 } else { 16 } + 32 * (v / 64) + l];
            let q = if j % 2 == 0 { q & 0xF } else { q >> 4 };
            let q = if five { q | (((block[16 + l] >> j) & 1) << 4) } else { q };
            let s = &block[4..16];
            let (sc, m) = if j < 4 {
                (s[j] & 63, s[j + 4] & 63)
            } else {
                ((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4))
            };
            f16_at(0) * f32::from(sc) * f32::from(q) - f16_at(2) * f32::from(m)
        }
        crate::BlockQuant::Q2K | crate::BlockQuant::Q3K => {
            // Half h, quarter k, then l: value 128h + 32k + l, its 2 low bits at bits 2k of qs[32h + l], its
            // scale number v / 16. Q2_K: `scales[16]; qs[64]; d; dmin` with (scale, min) nibbles; Q3_K:
            // `hmask[32]; qs[64]; scales[12]; d`, 4 less unless bit v / 32 of hmask[l], 6-bit scales less 32.
            let (h, k, l) = (v / 128, (v % 128) / 32, v % 32);
            let (j, two) = (v / 16, quant == crate::BlockQuant::Q2K);
            let low = (block[if two { 16 } else { 32 } + 32 * h + l] >> (2 * k)) & 3;
            if two {
                let s = block[j];
                return f16_at(80) * f32::from(s & 0xF) * f32::from(low) - f16_at(82) * f32::from(s >> 4);
            }
            let q = i32::from(low) - if (block[l] >> (v / 32)) & 1 == 1 { 0 } else { 4 };
            let s = &block[96..108];
            let sc = (if j < 8 { s[j] & 0xF } else { s[j - 8] >> 4 })
                | (((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
            f16_at(108) * (i32::from(sc) - 32) as f32 * q as f32
        }
        crate::BlockQuant::Q4_0
        | crate::BlockQuant::Q4_1
        | crate::BlockQuant::Q5_0
        | crate::BlockQuant::Q5_1
        | crate::BlockQuant::IQ4NL => {
            // Block v / 32 of the 8; value j of a block the low nibble of qs[j] (j < 16) or the high nibble
            // of qs[j - 16], the 5-bit types' fifth bit bit j of the u32 qh.
            let size = (quant.block_bytes() / 8) as usize;
            let (b, j) = (&block[v / 32 * size..][..size], v % 32);
            let with_min = matches!(quant, crate::BlockQuant::Q4_1 | crate::BlockQuant::Q5_1);
            let five = matches!(quant, crate::BlockQuant::Q5_0 | crate::BlockQuant::Q5_1);
            let qs_at = 2 + 2 * usize::from(with_min) + 4 * usize::from(five);
            let byte = b[qs_at + j % 16];
            let mut q = u32::from(if j < 16 { byte & 0xF } else { byte >> 4 });
            if five {
                let qh = u32::from_le_bytes(b[qs_at - 4..qs_at].try_into().expect("4 bytes"));
                q |= ((qh >> j) & 1) << 4;
            }
            let f16_at = |i: usize| f16::from_le_bytes([b[i], b[i + 1]]).to_f32();
            let d = f16_at(0);
            match quant {
                crate::BlockQuant::Q4_0 => (q as i32 - 8) as f32 * d,
                crate::BlockQuant::Q5_0 => (q as i32 - 16) as f32 * d,
                crate::BlockQuant::IQ4NL => d * f32::from(IQ4_VALUES[q as usize]),
                // Q4_1 and Q5_1: their min follows d.
                _ => q as f32 * d + f16_at(2),
            }
        }
        crate::BlockQuant::Q8_0 => {
            let b = &block[v / 32 * 34..][..34];
            f32::from(b[2 + v % 32] as i8) * f16::from_le_bytes([b[0], b[1]]).to_f32()
        }
        crate::BlockQuant::IQ4XS => {
            // Run ib = v / 32 of 8: IQ4_NL's nibble layout at qs[16 ib..], scaled by d * (6-bit scale - 32).
            let (ib, j) = (v / 32, v % 32);
            let scales_h = u16::from_le_bytes([block[2], block[3]]);
            let low = (block[4 + ib / 2] >> (4 * (ib % 2))) & 0xF;
            let high = ((scales_h >> (2 * ib)) & 3) as u8;
            let dl = f16_at(0) * f32::from(i16::from(low | high << 4) - 32);
            let byte = block[8 + 16 * ib + j % 16];
            dl * f32::from(IQ4_VALUES[usize::from(if j < 16 { byte & 0xF } else { byte >> 4 })])
        }
        crate::BlockQuant::F16 => f16_at(2 * v),
        crate::BlockQuant::BF16 => {
            f32::from_bits(u32::from(u16::from_le_bytes([block[2 * v], block[2 * v + 1]])) << 16)
        }
        crate::BlockQuant::F32 => f32::from_le_bytes(block[4 * v..4 * v + 4].try_into().expect("4 bytes")),
        crate::BlockQuant::Q6K => {
            // Half h, then l and the quarter k: value 128h + 32k + l.
            let (h, k, l) = (v / 128, (v % 128) / 32, v % 32);
            let low = block[64 * h + l + 32 * (k % 2)];
            let low = if k < 2 { low & 0xF } else { low >> 4 };
            let high = (block[128 + 32 * h + l] >> (2 * k)) & 3;
            let q = i32::from(low | (high << 4)) - 32;
            let sc = block[192 + 8 * h + l / 16 + 2 * k] as i8;
            f16_at(208) * f32::from(sc) * q as f32
        }
    }
}

/// K-quant GEMV over T inputs: `y[t, r] = Σ_c W[r, c] · x[t, c]` for `W [rows, cols]` given as GGUF blocks
/// ([`kquant_value`]), summed in f64.
pub fn kquant_gemv(quant: crate::BlockQuant, w: &[u8], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    let block = quant.block_bytes() as usize;
    let dequantised: Vec<f32> = w[..rows * cols / 256 * block]
        .chunks_exact(block)
        .flat_map(|b| (0..256).map(move |v| kquant_value(quant, b, v)))
        .collect();
    x.chunks(cols)
        .flat_map(|x| {
            dequantised.chunks(cols).map(move |row| {
                row.iter().zip(x).map(|(&w, &x)| f64::from(w) * f64::from(x)).sum::<f64>() as f32
            })
        })
        .collect()
}

/// Expert K-quant GEMV (`Kernels::expert_kquant_gemv`): `y[pair] = W[slot_idx[pair]] · x[pair / x_div]`
/// where slot s's matrix is `rows × cols` blocks of `quant` from byte `s · slot_bytes + offset` of `pool`;
/// `[P, rows]` (a pair whose slot is past the pool gives zeros).
#[allow(clippy::too_many_arguments)]
pub fn expert_kquant_gemv(
    quant: crate::BlockQuant,
    pool: &[u8],
    (slot_bytes, offset): (usize, usize),
    (rows, cols): (usize, usize),
    slot_idx: &[u32],
    x: &[f32],
    x_div: usize,
) -> Vec<f32> {
    let bytes = rows * cols / 256 * quant.block_bytes() as usize;
    slot_idx
        .iter()
        .enumerate()
        .flat_map(|(pair, &slot)| {
            let at = slot as usize * slot_bytes + offset;
            match pool.get(at..at + bytes) {
                Some(w) => kquant_gemv(quant, w, rows, cols, &x[pair / x_div * cols..][..cols]),
                None => vec![0.0; rows],
            }
        })
        .collect()
}

/// What `Kernels::expert_kquant_gemv_swiglu` computes: [`expert_kquant_gemv`] of the slot's gate (from
/// byte `gate`) and up (from byte `up`), each `rows × cols`, then [`silu_mul`]: `[P, rows]`.
#[allow(clippy::too_many_arguments)]
pub fn expert_kquant_gemv_swiglu(
    quant: crate::BlockQuant,
    pool: &[u8],
    (slot_bytes, gate, up): (usize, usize, usize),
    (rows, cols): (usize, usize),
    slot_idx: &[u32],
    x: &[f32],
    x_div: usize,
) -> Vec<f32> {
    let g = expert_kquant_gemv(quant, pool, (slot_bytes, gate), (rows, cols), slot_idx, x, x_div);
    let u = expert_kquant_gemv(quant, pool, (slot_bytes, up), (rows, cols), slot_idx, x, x_div);
    let gate_up: Vec<f32> =
        g.chunks(rows).zip(u.chunks(rows)).flat_map(|(g, u)| g.iter().chain(u)).copied().collect();
    silu_mul(&gate_up, rows)
}

/// What `Kernels::expert_kquant_gemv_combine` computes: [`expert_q8_gemv_combine`] on records of blocks
/// ([`expert_kquant_gemv`] of each pick, x_div 1). Returns `(residual, scaled, squares)`.
#[allow(clippy::too_many_arguments)]
pub fn expert_kquant_gemv_combine(
    quant: crate::BlockQuant,
    pool: &[u8],
    (slot_bytes, offset): (usize, usize),
    (rows, cols, k): (usize, usize, usize),
    slot_idx: &[u32],
    x: &[f32],
    weights: &[f32],
    residual: &[f32],
    next_norm: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let slots = pool.len() / slot_bytes;
    let gemv =
        |inside: &[u32]| expert_kquant_gemv(quant, pool, (slot_bytes, offset), (rows, cols), inside, x, 1);
    combine_picks(gemv, (rows, k, slots), slot_idx, weights, residual, next_norm)
}

/// [`q8_gemv`] as the cooperative-matrix GEMMs compute it (`Kernels::q8_gemm_coop`): each weight
/// `q · d` rounded once to f16 (the product is exact in f32), each input rounded to f16, the products
/// summed (here in f64).
pub fn q8_gemv_f16(q: &[i8], scales: &[f16], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    q8_gemv_as(q, scales, rows, cols, x, |v| f64::from(f16::from_f32(v).to_f32()))
}

/// The Q8_0 GEMV with each dequantised weight and each input taken as `value(·)`, summed in f64.
fn q8_gemv_as(
    q: &[i8],
    scales: &[f16],
    rows: usize,
    cols: usize,
    x: &[f32],
    value: impl Fn(f32) -> f64 + Copy,
) -> Vec<f32> {
    x.chunks(cols)
        .flat_map(|xt| {
            (0..rows).map(move |r| {
                (0..cols).map(|c| value(q8(q, scales, cols, r, c)) * value(xt[c])).sum::<f64>() as f32
            })
        })
        .collect()
}

/// [`expert_q8_gemv`] with [`q8_gemv_f16`]'s rounding (`Kernels::expert_q8_gemm_coop`).
pub fn expert_q8_gemv_f16(
    q: &[i8],
    scales: &[f16],
    rows: usize,
    cols: usize,
    slot_idx: &[u32],
    x: &[f32],
    x_div: usize,
) -> Vec<f32> {
    expert_q8_gemv_as(q, scales, (rows, cols), slot_idx, x, x_div, q8_gemv_f16)
}

/// F32 GEMV over T inputs: `y[t, r] = Σ_c W[r, c] · x[t, c]` for `W [rows, cols]`.
pub fn f32_gemv(w: &[f32], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    x.chunks(cols)
        .flat_map(|xt| {
            (0..rows).map(move |r| {
                (0..cols).map(|c| f64::from(w[r * cols + c]) * f64::from(xt[c])).sum::<f64>() as f32
            })
        })
        .collect()
}

/// The NeoX RoPE table `[T, d/2]` of `(cos, sin)` for the given positions, in f32 as ggml computes it
/// (ggml-cpu `rope_yarn_cache_init` without scaling): θ starts at `pos` and is multiplied by
/// `theta_scale = freq_base^(-2/d)` for each successive pair; cos and sin in f32.
pub fn rope_cos_sin(positions: &[u32], head_dim: usize, freq_base: f32) -> Vec<[f32; 2]> {
    let theta_scale = freq_base.powf(-2.0 / head_dim as f32);
    positions
        .iter()
        .flat_map(|&pos| {
            let mut theta = pos as f32;
            (0..head_dim / 2).map(move |_| {
                let cs = [theta.cos(), theta.sin()];
                theta *= theta_scale;
                cs
            })
        })
        .collect()
}

/// Per-head RMSNorm with weight `w [d]`, then NeoX RoPE (pairs `i, i + d/2`) with `rope [T, d/2]`:
/// [`qk_norm_rope_partial`] turning every dim. `x` is `[T, heads, d]`.
pub fn qk_norm_rope(
    x: &[f32],
    w: &[f32],
    rope: &[[f32; 2]],
    heads: usize,
    head_dim: usize,
    eps: f32,
) -> Vec<f32> {
    qk_norm_rope_partial(x, w, rope, heads, head_dim, head_dim, head_dim, eps)
}

/// KV-cache store: `dst[positions[t], ..] = f16(src[t, ..])` (round to nearest even); positions past
/// the cache are skipped.
pub fn kv_store(src: &[f32], positions: &[u32], n: usize, dst: &mut [f16]) {
    let ctx = dst.len() / n;
    for (t, &pos) in positions.iter().enumerate() {
        if (pos as usize) < ctx {
            for i in 0..n {
                dst[pos as usize * n + i] = f16::from_f32(src[t * n + i]);
            }
        }
    }
}

/// What `qkv_rope_store` does, from [`qk_norm_rope`] and [`kv_store`]: `qkv` is `[T, heads + 2·kv_heads, d]`
/// (each token's Q heads, then K heads, then V heads); returns `q_out [T, heads, d]` and stores K (normed
/// with `k_norm`, rotated) and V into the `[ctx, kv_heads, d]` caches at `positions`.
#[allow(clippy::too_many_arguments)]
pub fn qkv_rope_store(
    qkv: &[f32],
    q_norm: &[f32],
    k_norm: &[f32],
    rope: &[[f32; 2]],
    positions: &[u32],
    (heads, kv_heads, head_dim): (usize, usize, usize),
    eps: f32,
    (k_cache, v_cache): (&mut [f16], &mut [f16]),
) -> Vec<f32> {
    let (q, kv) = (heads * head_dim, kv_heads * head_dim);
    let part = |from: usize, len: usize| -> Vec<f32> {
        qkv.chunks(q + 2 * kv).flat_map(|row| row[from..from + len].to_vec()).collect()
    };
    let q_out = qk_norm_rope(&part(0, q), q_norm, rope, heads, head_dim, eps);
    let k = qk_norm_rope(&part(q, kv), k_norm, rope, kv_heads, head_dim, eps);
    kv_store(&k, positions, kv, k_cache);
    kv_store(&part(q + kv, kv), positions, kv, v_cache);
    q_out
}

/// Causal GQA attention over an f16 cache `[ctx, kv_heads, d]`: for each query `[T, heads, d]` and
/// head h, softmax over positions `0..=positions[t]` of `q·k / sqrt(d)`, then the weighted sum of v.
pub fn attention(
    q: &[f32],
    k: &[f16],
    v: &[f16],
    positions: &[u32],
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
) -> Vec<f32> {
    let d = head_dim;
    let ctx = k.len() / (kv_heads * d);
    let scale = 1.0 / (d as f64).sqrt();
    let mut out = vec![0.0; q.len()];
    for (t, &pos) in positions.iter().enumerate() {
        let len = (pos as usize + 1).min(ctx);
        for h in 0..heads {
            let kvh = h / (heads / kv_heads);
            let qh = &q[(t * heads + h) * d..][..d];
            let scores: Vec<f64> = (0..len)
                .map(|j| {
                    let kj = &k[(j * kv_heads + kvh) * d..][..d];
                    qh.iter().zip(kj).map(|(&a, &b)| f64::from(a) * f64::from(b.to_f32())).sum::<f64>()
                        * scale
                })
                .collect();
            let m = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let sum: f64 = e.iter().sum();
            for i in 0..d {
                let acc: f64 =
                    (0..len).map(|j| e[j] * f64::from(v[(j * kv_heads + kvh) * d + i].to_f32())).sum();
                out[(t * heads + h) * d + i] = (acc / sum) as f32;
            }
        }
    }
    out
}

/// Residual add.
pub fn add(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

/// Router for T tokens of `experts` logits: softmax over all experts (f64, rounded to f32), the k
/// largest logits (ties to the lower index, best first), weights = picked probs / their sum (in pick
/// order). Returns `(ids [T, k], weights [T, k])`.
pub fn router_topk(logits: &[f32], experts: usize, k: usize) -> (Vec<u32>, Vec<f32>) {
    let mut ids = Vec::new();
    let mut weights = Vec::new();
    for row in logits.chunks(experts) {
        let m = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f64 = row.iter().map(|&l| f64::from(l - m).exp()).sum();
        let probs: Vec<f32> = row.iter().map(|&l| (f64::from(l - m).exp() / sum) as f32).collect();
        let mut order: Vec<usize> = (0..experts).collect();
        // Stable sort: equal logits keep index order, so ties go to the lower index.
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]));
        let picked = &order[..k];
        let psum: f32 = picked.iter().map(|&i| probs[i]).sum();
        ids.extend(picked.iter().map(|&i| i as u32));
        weights.extend(picked.iter().map(|&i| probs[i] / psum));
    }
    (ids, weights)
}

/// One slot's int8 and scale planes (`values` per slot) of Q8_0 pool planes.
fn q8_slot<'a>(q: &'a [i8], scales: &'a [f16], values: usize, slot: u32) -> (&'a [i8], &'a [f16]) {
    let s = slot as usize;
    (&q[s * values..][..values], &scales[s * values / 32..][..values / 32])
}

/// Expert Q8_0 GEMV: `y[pair] = W[slot_idx[pair]] · x[pair / x_div]` with the pool planes
/// `[slots, rows, cols]` int8 and `[slots, rows, cols/32]` f16.
pub fn expert_q8_gemv(
    q: &[i8],
    scales: &[f16],
    rows: usize,
    cols: usize,
    slot_idx: &[u32],
    x: &[f32],
    x_div: usize,
) -> Vec<f32> {
    expert_q8_gemv_as(q, scales, (rows, cols), slot_idx, x, x_div, q8_gemv)
}

/// A Q8_0 GEMV reference: `(q, scales, rows, cols, x)` to `y`.
type Q8GemvRef = fn(&[i8], &[f16], usize, usize, &[f32]) -> Vec<f32>;

/// The expert GEMV with each pair's product by `gemv` ([`q8_gemv`] or [`q8_gemv_f16`]).
fn expert_q8_gemv_as(
    q: &[i8],
    scales: &[f16],
    (rows, cols): (usize, usize),
    slot_idx: &[u32],
    x: &[f32],
    x_div: usize,
    gemv: Q8GemvRef,
) -> Vec<f32> {
    slot_idx
        .iter()
        .enumerate()
        .flat_map(|(pair, &slot)| {
            let (qs, ss) = q8_slot(q, scales, rows * cols, slot);
            gemv(qs, ss, rows, cols, &x[pair / x_div * cols..][..cols])
        })
        .collect()
}

/// Q8_0 quantisation of f32 rows as llama.cpp's `quantize_row_q8_0` (and [`Kernels::quantize_q8`]) does
/// it: per 32-value block `d = max|x| / 127` and `q = round(x / d)` (halves away from zero), `d` rounded to
/// f16. Returns the int8 values and the block scales (as f32).
///
/// [`Kernels::quantize_q8`]: crate::Kernels::quantize_q8
pub fn quantize_q8(x: &[f32]) -> (Vec<i8>, Vec<f32>) {
    let mut q = Vec::with_capacity(x.len());
    let mut s = Vec::with_capacity(x.len() / 32);
    for block in x.chunks(32) {
        let d = block.iter().fold(0f32, |m, v| m.max(v.abs())) / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        q.extend(block.iter().map(|v| (v * id).round() as i8));
        s.push(f16::from_f32(d).to_f32());
    }
    (q, s)
}

/// The rows [`Kernels::quantize_q8`] writes, from [`quantize_q8`]'s output: per row of `cols` values its
/// int8, then its `cols / 32` scales as little-endian f32.
///
/// [`Kernels::quantize_q8`]: crate::Kernels::quantize_q8
pub fn pack_q8_rows(q: &[i8], s: &[f32], cols: usize) -> Vec<u8> {
    q.chunks(cols)
        .zip(s.chunks(cols / 32))
        .flat_map(|(qr, sr)| {
            qr.iter().map(|&v| v as u8).chain(sr.iter().flat_map(|v| v.to_le_bytes())).collect::<Vec<_>>()
        })
        .collect()
}

/// Q8_0 GEMV on inputs Q8_0-quantised ([`Kernels::q8_gemv_i8`], which quantises as it reads): [`q8_gemm_i8`]
/// of `x` (`[T, cols]`) quantised by [`quantize_q8`].
///
/// [`Kernels::q8_gemv_i8`]: crate::Kernels::q8_gemv_i8
pub fn q8_gemv_i8(q: &[i8], scales: &[f16], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    let (xq, xs) = quantize_q8(x);
    q8_gemm_i8(q, scales, rows, cols, &xq, &xs)
}

/// Q8_0 GEMM on Q8_0-quantised inputs ([`Kernels::q8_gemm_i8`]): `y[t, r] = Σ_b (Σ_c q[r, c] · xq[t, c]) ·
/// scale[r, b] · xs[t, b]` over the 32-column blocks b, each inner sum exact.
///
/// [`Kernels::q8_gemm_i8`]: crate::Kernels::q8_gemm_i8
pub fn q8_gemm_i8(q: &[i8], scales: &[f16], rows: usize, cols: usize, xq: &[i8], xs: &[f32]) -> Vec<f32> {
    let nblk = cols / 32;
    xq.chunks(cols)
        .zip(xs.chunks(nblk))
        .flat_map(|(xt, st)| {
            (0..rows).map(move |r| {
                (0..nblk)
                    .map(|b| {
                        let dot: i32 = (b * 32..b * 32 + 32)
                            .map(|c| i32::from(q[r * cols + c]) * i32::from(xt[c]))
                            .sum();
                        f64::from(dot) * f64::from(scales[r * nblk + b].to_f32()) * f64::from(st[b])
                    })
                    .sum::<f64>() as f32
            })
        })
        .collect()
}

/// Expert Q8_0 GEMM on Q8_0-quantised inputs ([`Kernels::expert_q8_gemm_i8`]): [`q8_gemm_i8`] of
/// `W[slot_idx[pair]]` and input row `pair / x_div`, pool planes as [`expert_q8_gemv`].
///
/// [`Kernels::expert_q8_gemm_i8`]: crate::Kernels::expert_q8_gemm_i8
#[allow(clippy::too_many_arguments)]
pub fn expert_q8_gemm_i8(
    q: &[i8],
    scales: &[f16],
    rows: usize,
    cols: usize,
    slot_idx: &[u32],
    (xq, xs): (&[i8], &[f32]),
    x_div: usize,
) -> Vec<f32> {
    slot_idx
        .iter()
        .enumerate()
        .flat_map(|(pair, &slot)| {
            let (qs, ss) = q8_slot(q, scales, rows * cols, slot);
            let row = pair / x_div;
            let (xt, st) = (&xq[row * cols..][..cols], &xs[row * cols / 32..][..cols / 32]);
            q8_gemm_i8(qs, ss, rows, cols, xt, st)
        })
        .collect()
}

/// Expert Q8_0 GEMV on Q8_0-quantised inputs ([`Kernels::expert_q8_gemv_i8`], which quantises as it reads):
/// [`expert_q8_gemm_i8`] of `x` quantised by [`quantize_q8`], what llama.cpp's CPU backend computes for
/// Q8_0 weights.
///
/// [`Kernels::expert_q8_gemv_i8`]: crate::Kernels::expert_q8_gemv_i8
pub fn expert_q8_gemv_i8(
    q: &[i8],
    scales: &[f16],
    rows: usize,
    cols: usize,
    slot_idx: &[u32],
    x: &[f32],
    x_div: usize,
) -> Vec<f32> {
    let (xq, xs) = quantize_q8(x);
    expert_q8_gemm_i8(q, scales, rows, cols, slot_idx, (&xq, &xs), x_div)
}

/// A chunk's pairs grouped by expert, as [`Kernels::expert_groups`] writes them: per expert in id order its
/// pairs (ascending here; the GPU places an expert's pairs in no set order) in runs of `size`, each group
/// `[table[base + expert], first, count, 0]`, then count-0 entries up to `len`. Ids of `experts` or more
/// are left out.
///
/// [`Kernels::expert_groups`]: crate::Kernels::expert_groups
pub fn expert_groups(
    ids: &[u32],
    table: &[u32],
    (base, experts): (u32, u32),
    size: usize,
    len: usize,
) -> (Vec<[u32; 4]>, Vec<u32>) {
    let mut groups = Vec::with_capacity(len);
    let mut order = Vec::with_capacity(ids.len());
    for e in 0..experts {
        let first = order.len();
        order.extend((0..ids.len() as u32).filter(|&i| ids[i as usize] == e));
        let slot = table[(base + e) as usize];
        for (j, run) in order[first..].chunks(size).enumerate() {
            groups.push([slot, (first + j * size) as u32, run.len() as u32, 0]);
        }
    }
    groups.resize(len.max(groups.len()), [0; 4]);
    (groups, order)
}

/// Dequantises Q4_0 planes: `q` holds 16 bytes per 32-value block in ggml order (the low nibble of byte
/// j is value j, the high nibble value j + 16), `scales` one f16 per block; value = `(nibble - 8) · scale`
/// (exact in f32).
pub fn dequant_q4_0(q: &[u8], scales: &[f16]) -> Vec<f32> {
    q.chunks(16)
        .zip(scales)
        .flat_map(|(block, &d)| {
            let d = d.to_f32();
            let lo = block.iter().map(move |&b| (i32::from(b & 0x0f) - 8) as f32 * d);
            let hi = block.iter().map(move |&b| (i32::from(b >> 4) - 8) as f32 * d);
            lo.chain(hi)
        })
        .collect()
}

/// Expert Q4_0 GEMV: `y[pair] = W[slot_idx[pair]] · x[pair / x_div]` with the pool planes
/// `[slots, rows, cols/32]` 16-byte blocks (see [`dequant_q4_0`]) and `[slots, rows, cols/32]` f16.
pub fn expert_q4_gemv(
    q: &[u8],
    scales: &[f16],
    rows: usize,
    cols: usize,
    slot_idx: &[u32],
    x: &[f32],
    x_div: usize,
) -> Vec<f32> {
    let (mq, ms) = (rows * cols / 2, rows * cols / 32);
    slot_idx
        .iter()
        .enumerate()
        .flat_map(|(pair, &slot)| {
            let s = slot as usize;
            let xt = &x[pair / x_div * cols..][..cols];
            let w = dequant_q4_0(&q[s * mq..][..mq], &scales[s * ms..][..ms]);
            f32_gemv(&w, rows, cols, xt)
        })
        .collect()
}

/// `out[r, i] = silu(gate[r, i]) · up[r, i]` for `gate_up [P, 2F]` (gate then up); silu(g) = g/(1+e^-g).
pub fn silu_mul(gate_up: &[f32], ffn: usize) -> Vec<f32> {
    gate_up
        .chunks(2 * ffn)
        .flat_map(|row| (0..ffn).map(move |i| (row[i] / (1.0 + (-row[i]).exp())) * row[ffn + i]))
        .collect()
}

/// `out[t] = (Σ_j weights[t, j] · experts[t, j]) + residual[t]`, summed in pick order in f32 as
/// llama.cpp does (scale each expert, add them one by one, then the residual).
pub fn moe_combine(experts: &[f32], weights: &[f32], residual: &[f32], hidden: usize, k: usize) -> Vec<f32> {
    residual
        .chunks(hidden)
        .enumerate()
        .flat_map(|(t, res)| {
            (0..hidden).map(move |i| {
                let mut sum = 0.0f32;
                for j in 0..k {
                    sum += experts[(t * k + j) * hidden + i] * weights[t * k + j];
                }
                sum + res[i]
            })
        })
        .collect()
}

/// [`moe_combine`] then [`rms_norm`] of its rows: returns `(out, normed)`.
pub fn moe_combine_norm(
    experts: &[f32],
    weights: &[f32],
    residual: &[f32],
    norm: &[f32],
    (hidden, k): (usize, usize),
    eps: f32,
) -> (Vec<f32>, Vec<f32>) {
    let out = moe_combine(experts, weights, residual, hidden, k);
    let normed = rms_norm(&out, norm, hidden, eps);
    (out, normed)
}

/// [`shared_expert_gate`] onto the residual, then [`moe_combine_norm`] (`moe_combine_shared_norm`): `u` is
/// the FFN's normed input, `shared` the shared expert's gate weights and output. Returns `(out, normed)`.
pub fn moe_combine_shared_norm(
    (experts, weights): (&[f32], &[f32]),
    residual: &[f32],
    norm: &[f32],
    (u, shared): (&[f32], (&[f32], &[f32])),
    (hidden, k): (usize, usize),
    eps: f32,
) -> (Vec<f32>, Vec<f32>) {
    let residual = shared_expert_gate(u, shared.0, shared.1, residual, hidden);
    moe_combine_norm(experts, weights, &residual, norm, (hidden, k), eps)
}

/// What `expert_q8_gemv_combine` computes for T tokens of k picks: the down projection of each pick
/// ([`expert_q8_gemv`], x_div 1; a pick whose slot is past the pool gives zeros), combined onto the residual
/// ([`moe_combine`]), and the next RMSNorm's inputs from the new residual: `residual · next_norm` and the
/// sums of its squares over blocks of 4 rows (`[T, rows.div_ceil(4)]`). Returns `(residual, scaled,
/// squares)`.
#[allow(clippy::too_many_arguments)]
pub fn expert_q8_gemv_combine(
    q: &[i8],
    scales: &[f16],
    (rows, cols, k): (usize, usize, usize),
    slot_idx: &[u32],
    x: &[f32],
    weights: &[f32],
    residual: &[f32],
    next_norm: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let slots = q.len() / (rows * cols);
    let gemv = |inside: &[u32]| expert_q8_gemv(q, scales, rows, cols, inside, x, 1);
    combine_picks(gemv, (rows, k, slots), slot_idx, weights, residual, next_norm)
}

/// What `expert_q8_gemv_combine_i8` computes: [`expert_q8_gemv_combine`] with each pick's input
/// Q8_0-quantised ([`expert_q8_gemv_i8`]).
#[allow(clippy::too_many_arguments)]
pub fn expert_q8_gemv_combine_i8(
    q: &[i8],
    scales: &[f16],
    (rows, cols, k): (usize, usize, usize),
    slot_idx: &[u32],
    x: &[f32],
    weights: &[f32],
    residual: &[f32],
    next_norm: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let slots = q.len() / (rows * cols);
    let gemv = |inside: &[u32]| expert_q8_gemv_i8(q, scales, rows, cols, inside, x, 1);
    combine_picks(gemv, (rows, k, slots), slot_idx, weights, residual, next_norm)
}

/// What `expert_q4_gemv_combine` computes: [`expert_q8_gemv_combine`] over Q4_0 planes ([`expert_q4_gemv`]).
#[allow(clippy::too_many_arguments)]
pub fn expert_q4_gemv_combine(
    q: &[u8],
    scales: &[f16],
    (rows, cols, k): (usize, usize, usize),
    slot_idx: &[u32],
    x: &[f32],
    weights: &[f32],
    residual: &[f32],
    next_norm: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let slots = 2 * q.len() / (rows * cols);
    let gemv = |inside: &[u32]| expert_q4_gemv(q, scales, rows, cols, inside, x, 1);
    combine_picks(gemv, (rows, k, slots), slot_idx, weights, residual, next_norm)
}

/// What `Kernels::residual_join` computes: `residual + sum` and the next norm's inputs from it (as
/// [`expert_q8_gemv_combine`] writes them). Returns `(residual, scaled, squares)`.
pub fn residual_join(residual: &[f32], sum: &[f32], next_norm: &[f32]) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let rows = next_norm.len();
    let out: Vec<f32> = residual.iter().zip(sum).map(|(a, b)| a + b).collect();
    norm_inputs(out, next_norm, rows)
}

/// The combine of the expert GEMV-combine references: `gemv` of the picks (those past the pool's `slots`
/// computed at slot 0, then zeroed), [`moe_combine`] onto the residual, and the next norm's inputs.
fn combine_picks(
    gemv: impl Fn(&[u32]) -> Vec<f32>,
    (rows, k, slots): (usize, usize, usize),
    slot_idx: &[u32],
    weights: &[f32],
    residual: &[f32],
    next_norm: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let inside: Vec<u32> = slot_idx.iter().map(|&s| if (s as usize) < slots { s } else { 0 }).collect();
    let mut experts = gemv(&inside);
    for (pair, &s) in slot_idx.iter().enumerate() {
        if s as usize >= slots {
            experts[pair * rows..][..rows].fill(0.0);
        }
    }
    norm_inputs(moe_combine(&experts, weights, residual, rows, k), next_norm, rows)
}

/// The new residual `out` with the next norm's inputs: `out · next_norm` and the sums of squares of 4 rows.
fn norm_inputs(out: Vec<f32>, next_norm: &[f32], rows: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let scaled = out.iter().enumerate().map(|(i, v)| v * next_norm[i % rows]).collect();
    let squares = out
        .chunks(rows)
        .flat_map(|row| row.chunks(4).map(|b| b.iter().map(|v| v * v).sum::<f32>()))
        .collect();
    (out, scaled, squares)
}

/// Pool slots of picks from a resident table: `table[base + id]`, `u32::MAX` past the table.
pub fn expert_slots(ids: &[u32], table: &[u32], base: u32) -> Vec<u32> {
    ids.iter().map(|&id| table.get((base + id) as usize).copied().unwrap_or(u32::MAX)).collect()
}

/// Index of the largest value of each row of length `n`, ties to the lower index.
pub fn argmax(logits: &[f32], n: usize) -> Vec<u32> {
    logits
        .chunks(n)
        .map(|row| {
            let mut best = 0;
            for (i, &v) in row.iter().enumerate() {
                if v > row[best] {
                    best = i;
                }
            }
            best as u32
        })
        .collect()
}

/// What [`sample_top_k`] draws from: the candidates left after `step`'s filters as `(id, weight)`, best
/// first (the highest logit, ties to the lower id, NaN never a candidate), each weighing
/// `exp((logit - best) / temperature)` (the best exactly 1): top-k (k clamped to 1..=[`SAMPLE_MAX_K`](crate::SAMPLE_MAX_K)), then top-p's shortest prefix whose weight reaches `top_p` of
/// the total (all if none does), then those weighing at least `min_p`. Empty when no logit is a number; the
/// best alone when it is the only candidate or infinite. In f32, in the kernel's order.
pub fn sample_candidates(logits: &[f32], step: &crate::SampleStep) -> Vec<(u32, f32)> {
    let mut top: Vec<(u32, f32)> =
        logits.iter().enumerate().filter(|(_, l)| !l.is_nan()).map(|(i, &l)| (i as u32, l)).collect();
    top.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    // The kernel's range of k.
    top.truncate(step.k.clamp(1, crate::SAMPLE_MAX_K) as usize);
    let Some(&(best_id, best)) = top.first() else { return top };
    if top.len() == 1 || best.is_infinite() {
        return vec![(best_id, 1.0)];
    }
    let mut w: Vec<(u32, f32)> = top
        .iter()
        .map(|&(id, l)| {
            (id, if l == f32::NEG_INFINITY { 0.0 } else { ((l - best) / step.temperature).exp() })
        })
        .collect();
    if step.top_p < 1.0 {
        let target = step.top_p * w.iter().map(|c| c.1).sum::<f32>();
        let mut mass = 0.0;
        if let Some(keep) = w.iter().position(|c| {
            mass += c.1;
            mass >= target
        }) {
            w.truncate(keep + 1);
        }
    }
    if step.min_p > 0.0 {
        // The best weighs 1, so it stays for any min_p up to 1 (and above, as the kernel keeps it).
        let keep = w.iter().take_while(|c| c.1 >= step.min_p).count();
        w.truncate(keep.max(1));
    }
    w
}

/// The token `sample_top_k` draws: the first of [`sample_candidates`] whose running weight passes
/// `u` × their total (the last with any weight when rounding leaves none), 0 with no candidate.
pub fn sample_top_k(logits: &[f32], step: &crate::SampleStep) -> u32 {
    let c = sample_candidates(logits, step);
    let x = step.u * c.iter().map(|c| c.1).sum::<f32>();
    let mut mass = 0.0;
    for &(id, w) in &c {
        mass += w;
        if x < mass {
            return id;
        }
    }
    c.iter().rev().find(|c| c.1 > 0.0).or(c.first()).map_or(0, |c| c.0)
}

/// Repetition, presence and frequency penalties in place (`apply_penalties`, as llama.cpp's
/// `llama_sampler_penalties_apply`): each distinct token of `window` below the vocabulary has its logit
/// divided by `repetition` when positive, multiplied when not, then `presence` subtracted, and `frequency`
/// once for each time it occurs in `window`.
pub fn apply_penalties(logits: &mut [f32], window: &[u32], repetition: f32, presence: f32, frequency: f32) {
    let mut seen: Vec<u32> = window.to_vec();
    seen.sort_unstable();
    for run in seen.chunk_by(|a, b| a == b) {
        if let Some(l) = logits.get_mut(run[0] as usize) {
            let scaled = if *l <= 0.0 { *l * repetition } else { *l / repetition };
            *l = scaled - presence - run.len() as f32 * frequency;
        }
    }
}

/// DeltaNet's causal conv and SiLU over the tokens of `x [T, C]` (`delta_net_conv.wgsl`): per channel,
/// `silu(Σ_{i<K-1} state[i, c]·w[c, i] + x[t, c]·w[c, K-1])` summed in f64 in that order, then the state
/// (`[K-1, C]`, oldest first) drops its oldest input and takes `x[t]`.
pub fn delta_net_conv(x: &[f32], w: &[f32], state: &mut [f32], channels: usize, taps: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for xt in x.chunks(channels) {
        for (c, &xc) in xt.iter().enumerate() {
            let taps_of = &w[c * taps..(c + 1) * taps];
            let saved = (0..taps - 1).map(|i| f64::from(state[i * channels + c]) * f64::from(taps_of[i]));
            let acc = (saved.sum::<f64>() + f64::from(xc) * f64::from(taps_of[taps - 1])) as f32;
            out.push(acc / (1.0 + (-acc).exp()));
        }
        if taps > 1 {
            state.copy_within(channels.., 0);
            state[(taps - 2) * channels..].copy_from_slice(xt);
        }
    }
    out
}

/// The gated delta rule over the tokens of `u [T, 2·H_k·S + H_v·S]` (q ‖ k ‖ v after the conv;
/// `delta_net_rule.wgsl`): per token and v head h (q/k head h mod H_k), q and k L2-normalised
/// (`x / sqrt(Σx² + eps)`), β = σ(`ba[t, h]`), γ = `a[h]`·softplus(`ba[t, H_v + h]` + `dt_bias[h]`) (x past
/// 20 as it is); the head's state `M [S, S]` in `state [H_v, S, S]` decays by e^γ, takes
/// `δ = β (v − M k̂)` along k̂, and gives `o = M q̂ / √S`. Dot products in f64, the state in f32.
pub fn delta_net_rule(
    u: &[f32],
    ba: &[f32],
    dt_bias: &[f32],
    a: &[f32],
    state: &mut [f32],
    shape: crate::DeltaNetShape,
    eps: f32,
) -> Vec<f32> {
    let (s, hk, hv) = (shape.state as usize, shape.k_heads as usize, shape.v_heads as usize);
    let key_dim = hk * s;
    let dot = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(x, y)| f64::from(*x) * f64::from(*y)).sum::<f64>();
    let l2 = |x: &[f32]| {
        let n = ((dot(x, x) as f32) + eps).sqrt();
        x.iter().map(|v| v / n).collect::<Vec<f32>>()
    };
    let mut out = Vec::with_capacity(u.len() / shape.channels() as usize * hv * s);
    for (ut, bat) in u.chunks(shape.channels() as usize).zip(ba.chunks(2 * hv)) {
        let q: Vec<Vec<f32>> = (0..hk).map(|j| l2(&ut[j * s..(j + 1) * s])).collect();
        let k: Vec<Vec<f32>> = (0..hk).map(|j| l2(&ut[key_dim + j * s..key_dim + (j + 1) * s])).collect();
        for h in 0..hv {
            let (qj, kj) = (&q[h % hk], &k[h % hk]);
            let v = &ut[2 * key_dim + h * s..2 * key_dim + (h + 1) * s];
            let beta = 1.0 / (1.0 + (-bat[h]).exp());
            let alpha = bat[hv + h] + dt_bias[h];
            let softplus = if alpha > 20.0 { alpha } else { alpha.exp().ln_1p() };
            let decay = (a[h] * softplus).exp();
            let m = &mut state[h * s * s..(h + 1) * s * s];
            for (vi, row) in m.chunks_mut(s).enumerate() {
                row.iter_mut().for_each(|x| *x *= decay);
                let delta = beta * (v[vi] - dot(row, kj) as f32);
                row.iter_mut().zip(kj).for_each(|(m, k)| *m += delta * k);
                out.push(dot(row, qj) as f32 / (s as f32).sqrt());
            }
        }
    }
    out
}

/// What `qk_norm_rope_partial_store` does, from [`qk_norm_rope_partial`] and [`kv_store`]: returns the query
/// heads of `queries_in [T, heads, q_stride]` normed with `norms.0` and turned, `[T, heads, d]`, and stores
/// the key heads of `keys_in [T, kv_heads, d]` normed with `norms.1` and turned into `key_cache [ctx,
/// kv_heads, d]` at `positions`.
pub fn qk_norm_rope_partial_store(
    (queries_in, keys_in): (&[f32], &[f32]),
    norms: (&[f32], &[f32]),
    rope: &[[f32; 2]],
    positions: &[u32],
    (heads, kv_heads, head_dim, rope_dims, q_stride): (usize, usize, usize, usize, usize),
    eps: f32,
    key_cache: &mut [f16],
) -> Vec<f32> {
    let keys = qk_norm_rope_partial(keys_in, norms.1, rope, kv_heads, head_dim, rope_dims, head_dim, eps);
    kv_store(&keys, positions, kv_heads * head_dim, key_cache);
    qk_norm_rope_partial(queries_in, norms.0, rope, heads, head_dim, rope_dims, q_stride, eps)
}

/// DeltaNet's output norm per row of `n` (`gated_rms_norm.wgsl`): [`rms_norm`] of `o` times SiLU of `z`.
pub fn gated_rms_norm(o: &[f32], z: &[f32], w: &[f32], n: usize, eps: f32) -> Vec<f32> {
    rms_norm(o, w, n, eps).into_iter().zip(z).map(|(y, &g)| y * (g / (1.0 + (-g).exp()))).collect()
}

/// qwen35moe's query and key heads (`qk_norm_rope_partial.wgsl`): per head, [`rms_norm`] over its `d` values
/// (read `in_stride` apart, head after head), then NeoX RoPE of the first `rope_dims` with `rope [T, r/2]`
/// (pairs `i, i + r/2`); the other dims as normed. Output `[T, heads, d]`.
#[allow(clippy::too_many_arguments)]
pub fn qk_norm_rope_partial(
    x: &[f32],
    w: &[f32],
    rope: &[[f32; 2]],
    heads: usize,
    head_dim: usize,
    rope_dims: usize,
    in_stride: usize,
    eps: f32,
) -> Vec<f32> {
    let (d, half) = (head_dim, rope_dims / 2);
    if x.len() < d {
        return Vec::new();
    }
    let n_heads = (x.len() - d) / in_stride + 1;
    let mut out = Vec::with_capacity(n_heads * d);
    for i in 0..n_heads {
        let t = i / heads;
        let h = rms_norm(&x[i * in_stride..i * in_stride + d], w, d, eps);
        for e in 0..d {
            out.push(if e < half {
                let [c, s] = rope[t * half + e];
                h[e] * c - h[e + half] * s
            } else if e < rope_dims {
                let [c, s] = rope[t * half + e - half];
                h[e - half] * s + h[e] * c
            } else {
                h[e]
            });
        }
    }
    out
}

/// qwen35moe's attention output gate (`attention_gate.wgsl`): `o[t, h, i] · σ(qg[t, h, d + i])`.
pub fn attention_gate(qg: &[f32], o: &[f32], head_dim: usize) -> Vec<f32> {
    o.chunks(head_dim)
        .zip(qg.chunks(2 * head_dim))
        .flat_map(|(o, qg)| o.iter().zip(&qg[head_dim..]).map(|(o, g)| o / (1.0 + (-g).exp())))
        .collect()
}

/// qwen35moe's shared expert joined (`shared_expert_gate.wgsl`): `out[t] + σ(w · u[t]) · s[t]`, the dot
/// product in f64.
pub fn shared_expert_gate(u: &[f32], w: &[f32], s: &[f32], out: &[f32], hidden: usize) -> Vec<f32> {
    u.chunks(hidden)
        .zip(s.chunks(hidden))
        .zip(out.chunks(hidden))
        .flat_map(|((u, s), out)| {
            let g = u.iter().zip(w).map(|(u, w)| f64::from(*u) * f64::from(*w)).sum::<f64>() as f32;
            let gate = 1.0 / (1.0 + (-g).exp());
            out.iter().zip(s).map(move |(o, s)| o + gate * s)
        })
        .collect()
}
