//! Protects the block GEMVs and GEMMs (every [`BlockQuant`]: Q2_K … Q6_K, the legacy types, IQ4_NL, IQ4_XS,
//! F16, BF16 and F32 on GGUF blocks as they lie in the file, one or four rows a lane group) against their CPU
//! reference on a real device, with both row-sum variants, `y +=`, row counts that do not fill a workgroup,
//! and rows whose blocks start mid-word (Q3_K's 110 bytes, Q6_K's 210, the legacy types' 18 to 34); and the
//! reference's dequantisation against the gguf crate's, which matches ggml's bit for bit.

mod common;

use common::{Gpu, Rng, RoutedOutputs, assert_close, poisoned, read_n, run, squares_scale, upload};
use diskformer_kernels::{
    BlockMatrix, BlockQuant, EXPERT_BLOCK_GEMM_GROUP, Kernels, cpu, expert_gemm_group_bound,
    expert_gemm_groups,
};
use half::f16;

/// `n` random blocks of `quant` with finite scales of a realistic size (the rest of each block random).
fn blocks(rng: &mut Rng, quant: BlockQuant, n: usize) -> Vec<u8> {
    let size = quant.block_bytes() as usize;
    let mut out: Vec<u8> = (0..n * size).map(|_| rng.next_u64() as u8).collect();
    for b in out.chunks_exact_mut(size) {
        let mut scale = |at: usize, rng: &mut Rng| {
            b[at..at + 2].copy_from_slice(&f16::from_f32(rng.f32(1e-3, 2e-2)).to_le_bytes());
        };
        match quant {
            BlockQuant::Q4K | BlockQuant::Q5K => {
                scale(0, rng);
                scale(2, rng);
            }
            BlockQuant::Q6K => scale(208, rng),
            BlockQuant::Q3K => scale(108, rng),
            BlockQuant::Q2K => {
                scale(80, rng);
                scale(82, rng);
            }
            BlockQuant::Q4_0 | BlockQuant::IQ4NL => (0..8).for_each(|i| scale(18 * i, rng)),
            BlockQuant::Q5_0 => (0..8).for_each(|i| scale(22 * i, rng)),
            BlockQuant::Q8_0 => (0..8).for_each(|i| scale(34 * i, rng)),
            BlockQuant::Q4_1 | BlockQuant::Q5_1 => {
                let size = (quant.block_bytes() / 8) as usize;
                (0..8).for_each(|i| {
                    scale(size * i, rng);
                    scale(size * i + 2, rng);
                })
            }
            BlockQuant::IQ4XS => scale(0, rng),
            BlockQuant::F16 => (0..256).for_each(|i| scale(2 * i, rng)),
            BlockQuant::BF16 => (0..256).for_each(|i| {
                let v = half::bf16::from_f32(rng.f32(-2e-2, 2e-2));
                b[2 * i..2 * i + 2].copy_from_slice(&v.to_le_bytes());
            }),
            BlockQuant::F32 => (0..256)
                .for_each(|i| b[4 * i..4 * i + 4].copy_from_slice(&rng.f32(-2e-2, 2e-2).to_le_bytes())),
        }
    }
    // Padded to whole words, as a buffer holding blocks must be.
    out.resize(out.len().next_multiple_of(4), 0);
    out
}

/// Σ|w·x| per output: the scale of f32 rounding in the GPU's sums.
fn magnitudes(quant: BlockQuant, w: &[u8], rows: usize, cols: usize, x: &[f32]) -> Vec<f32> {
    let size = quant.block_bytes() as usize;
    let abs: Vec<f32> = x.iter().map(|v| v.abs()).collect();
    (0..x.len() / cols)
        .flat_map(|t| {
            let abs = &abs[t * cols..][..cols];
            (0..rows).map(move |r| {
                (0..cols)
                    .map(|c| {
                        let block = &w[(r * cols / 256 + c / 256) * size..][..size];
                        (cpu::kquant_value(quant, block, c % 256) * abs[c]).abs()
                    })
                    .sum()
            })
        })
        .collect()
}

fn check(g: &Gpu, k: &Kernels, quant: BlockQuant, (rows, cols, tokens): (usize, usize, usize), seed: u64) {
    let mut rng = Rng::new(seed);
    let w = blocks(&mut rng, quant, rows * cols / 256);
    let x = rng.vec_f32(tokens * cols, -1.0, 1.0);
    let (wb, xb) = (upload(g, &w), upload(g, &x));
    let want = cpu::kquant_gemv(quant, &w, rows, cols, &x);
    let scale = magnitudes(quant, &w, rows, cols, &x);
    let m = BlockMatrix { data: (&wb).into(), quant, rows: rows as u32, cols: cols as u32 };
    let what = format!("{} gemv {rows}x{cols}, {tokens} tokens", quant.name());

    for rows4 in [false, true] {
        let y = poisoned(g, 4 * tokens * rows);
        let d = if rows4 {
            k.kquant_gemv_rows4(m, (&xb).into(), (&y).into(), tokens as u32)
        } else {
            k.kquant_gemv(m, (&xb).into(), (&y).into(), tokens as u32)
        };
        run(g, &[&d.unwrap()]);
        let what = format!("{what}{}", if rows4 { ", 4 rows a lane group" } else { "" });
        assert_close(&what, &read_n::<f32>(g, &y, tokens * rows), &want, &scale, 1e-6, 1e-5);
    }

    // Into columns 2.. of wider rows (one of several stacked matrices): the columns around stay untouched.
    let stride = rows + 5;
    let y = upload(g, &vec![0f32; tokens * stride]);
    run(g, &[&k.kquant_gemv_into(m, (&xb).into(), ((&y).into(), stride as u32, 2), tokens as u32).unwrap()]);
    let got = read_n::<f32>(g, &y, tokens * stride);
    for t in 0..tokens {
        let row = &got[t * stride..][..stride];
        assert!(row[..2].iter().chain(&row[2 + rows..]).all(|&v| v == 0.0), "{what}: columns outside");
        let (want, scale) = (&want[t * rows..][..rows], &scale[t * rows..][..rows]);
        assert_close(&format!("{what}, into columns"), &row[2..2 + rows], want, scale, 1e-6, 1e-5);
    }

    // y += W x onto a known y.
    let base = rng.vec_f32(tokens * rows, -1.0, 1.0);
    let y = upload(g, &base);
    run(g, &[&k.kquant_gemv_add(m, (&xb).into(), (&y).into(), tokens as u32).unwrap()]);
    let want_add: Vec<f32> = base.iter().zip(&want).map(|(a, b)| a + b).collect();
    let scale_add: Vec<f32> = base.iter().zip(&scale).map(|(a, s)| a.abs() + s).collect();
    assert_close(
        &format!("{what}, y +="),
        &read_n::<f32>(g, &y, tokens * rows),
        &want_add,
        &scale_add,
        1e-6,
        1e-5,
    );
}

#[test]
fn kquant_gemvs_match_the_cpu_reference() {
    let g = gpu_or_skip!();
    for quant in BlockQuant::ALL {
        // One block a row (Q6_K rows then start 2 bytes into a word every other row), a Qwen3 row of 8,
        // a row of 3 (lanes past the blocks), several tokens.
        for (i, shape) in [(37, 256, 1), (20, 2048, 1), (9, 768, 3), (64, 512, 2)].into_iter().enumerate() {
            check(g, &g.kernels, quant, shape, 10 + i as u64);
            check(g, &g.plain, quant, shape, 20 + i as u64);
        }
    }
}

#[test]
fn a_kquant_gemv_refuses_a_row_that_is_not_whole_blocks() {
    let g = gpu_or_skip!();
    let w = upload(g, &[0u8; 1024]);
    let x = upload(g, &[0f32; 128]);
    let y = poisoned(g, 64);
    let m = BlockMatrix { data: (&w).into(), quant: BlockQuant::Q4K, rows: 1, cols: 128 };
    let e = g.kernels.kquant_gemv(m, (&x).into(), (&y).into(), 1).unwrap_err().to_string();
    assert!(e.contains("multiple of 256") && e.contains("cols 128"), "{e}");
}

/// The reference's values are ggml's: the gguf crate's dequantiser (bit-exact against PyPI gguf's) on the
/// same random blocks, every value bit for bit.
#[test]
fn the_reference_dequantises_as_ggml() {
    let mut rng = Rng::new(7);
    for quant in BlockQuant::ALL {
        let ty = diskformer_gguf::TensorType::from_name(quant.name()).unwrap();
        let size = quant.block_bytes() as usize;
        let w = blocks(&mut rng, quant, 16);
        let mut want = vec![0f32; 16 * 256];
        diskformer_gguf::dequantize(ty, &w[..16 * size], &mut want).unwrap();
        let got: Vec<f32> = w[..16 * size]
            .chunks_exact(size)
            .flat_map(|b| (0..256).map(|v| cpu::kquant_value(quant, b, v)))
            .collect();
        assert_eq!(got.len(), want.len());
        for (i, (a, b)) in got.iter().zip(&want).enumerate() {
            assert_eq!(a.to_bits(), b.to_bits(), "{}: value {i}: {a} against gguf's {b}", quant.name());
        }
    }
}

/// A pool of records of blocks: `slots` slots of `slot_bytes`, each holding one matrix of `quant` at byte
/// `offset` and random bytes around it (another part of the record).
fn block_pool(
    rng: &mut Rng,
    quant: BlockQuant,
    (rows, cols): (usize, usize),
    slots: usize,
) -> (Vec<u8>, usize, usize) {
    let matrix = rows * cols / 256 * quant.block_bytes() as usize;
    let offset = 256;
    let slot_bytes = (offset + matrix + 100).next_multiple_of(256);
    let mut pool = Vec::with_capacity(slots * slot_bytes);
    for _ in 0..slots {
        let mut slot: Vec<u8> = (0..slot_bytes).map(|_| rng.next_u64() as u8).collect();
        slot[offset..offset + matrix].copy_from_slice(&blocks(rng, quant, rows * cols / 256)[..matrix]);
        pool.extend(slot);
    }
    (pool, slot_bytes, offset)
}

/// The matrix at byte `offset` of each of `slots` slots of `data`, as the expert block kernels bind it.
fn expert_blocks(
    data: &wgpu::Buffer,
    quant: BlockQuant,
    (slot_bytes, offset, slots): (usize, usize, usize),
    (rows, cols): (usize, usize),
) -> diskformer_kernels::ExpertBlocks<'_> {
    diskformer_kernels::ExpertBlocks {
        data: data.into(),
        quant,
        slot_bytes: slot_bytes as u64,
        offset: offset as u64,
        slots: slots as u32,
        first_slot: 0,
        rows: rows as u32,
        cols: cols as u32,
        host: false,
    }
}

/// The pairs grouped by slot as a chunk groups them: `(slot, first, count, 0)` runs of `order` (at most
/// [`EXPERT_BLOCK_GEMM_GROUP`] pairs a group), padded with an empty group.
fn groups_of(slot_idx: &[u32]) -> (Vec<u32>, Vec<u32>, u32) {
    let mut order: Vec<u32> = (0..slot_idx.len() as u32).collect();
    order.sort_by_key(|&p| slot_idx[p as usize]);
    let mut groups = Vec::new();
    let mut first = 0;
    while first < order.len() {
        let slot = slot_idx[order[first] as usize];
        let count = order[first..]
            .iter()
            .take(EXPERT_BLOCK_GEMM_GROUP)
            .take_while(|&&p| slot_idx[p as usize] == slot)
            .count();
        groups.extend([slot, first as u32, count as u32, 0]);
        first += count;
    }
    groups.extend([0, 0, 0, 0]);
    let len = groups.len() as u32 / 4;
    (groups, order, len)
}

/// The expert K-quant GEMV (per pair and per group of pairs) against its CPU reference: a matrix inside
/// each slot at an offset, gate‖up-style output columns, slots past the pool, a pool split over bindings.
#[test]
fn expert_kquant_gemvs_match_the_cpu_reference() {
    use diskformer_kernels::ExpertOut;
    let g = gpu_or_skip!();
    let mut rng = Rng::new(31);
    for quant in BlockQuant::ALL {
        for (rows, cols, slots) in [(37, 256, 5), (64, 512, 3), (40, 2304, 3)] {
            let (pool, slot_bytes, offset) = block_pool(&mut rng, quant, (rows, cols), slots);
            let (k, tokens) = (2, 4);
            let pairs = k * tokens;
            // Slot `slots` is past the pool: that pair's output stays as it was.
            let slot_idx: Vec<u32> = (0..pairs).map(|p| [0, 2, slots, 1, 2, 0, 2, 2][p] as u32).collect();
            let x = rng.vec_f32(tokens * cols, -1.0, 1.0);
            let want =
                cpu::expert_kquant_gemv(quant, &pool, (slot_bytes, offset), (rows, cols), &slot_idx, &x, k);
            // Σ|w·x| of each pair's slot and input row (zeros for a slot past the pool).
            let scale = pair_magnitudes(quant, &pool, (slot_bytes, offset), (rows, cols), &slot_idx, &x, k);
            let (pb, xb, sb) = (upload(g, &pool), upload(g, &x), upload(g, &slot_idx));
            let (groups, order, len) = groups_of(&slot_idx);
            let (gb, ob) = (upload(g, &groups), upload(g, &order));
            // Two slots a binding splits the pool over bindings.
            let split = Kernels::new(&g.ctx).with_max_binding((2 * slot_bytes) as u64);
            for (kernels, split_name) in
                [(&g.kernels, ""), (&g.plain, ", plain row sums"), (&split, ", split")]
            {
                for grouped in [false, true] {
                    let stride = rows + 3;
                    let y = upload(g, &vec![0f32; pairs * stride]);
                    let w = expert_blocks(&pb, quant, (slot_bytes, offset, slots), (rows, cols));
                    let out = ExpertOut { y: (&y).into(), stride: stride as u32, offset: 3 };
                    let d = if grouped {
                        kernels.expert_kquant_gemm(
                            w,
                            (&xb).into(),
                            (&gb).into(),
                            (&ob).into(),
                            out,
                            (pairs as u32, len),
                            k as u32,
                        )
                    } else {
                        kernels.expert_kquant_gemv(w, (&xb).into(), (&sb).into(), out, pairs as u32, k as u32)
                    };
                    run(g, &[&d.unwrap()]);
                    let got = read_n::<f32>(g, &y, pairs * stride);
                    for p in 0..pairs {
                        let row = &got[p * stride..][..stride];
                        assert_eq!(&row[..3], &[0.0; 3], "columns before the offset stay untouched");
                        let what = format!(
                            "{} expert {rows}x{cols} pair {p}{split_name}, grouped {grouped}",
                            quant.name()
                        );
                        let (want, scale) = (&want[p * rows..][..rows], &scale[p * rows..][..rows]);
                        assert_close(&what, &row[3..], want, scale, 1e-6, 1e-5);
                    }
                }
            }
        }
    }
}

/// The grouped expert K-quant GEMM with groups as full as a prefill chunk's: a slot with more pairs than a
/// group holds (a full group of 64, then a short one), one with a group past 32 pairs (both halves of the
/// workgroup's pairs), one under 32 (the upper half idle), grouped as the engine groups them.
#[test]
fn expert_kquant_gemm_takes_groups_of_up_to_64_pairs() {
    use diskformer_kernels::{ExpertBlocks, ExpertOut};
    let g = gpu_or_skip!();
    let mut rng = Rng::new(47);
    let (rows, cols, slots, k) = (150, 512, 3, 2);
    let mut slot_idx: Vec<u32> =
        [(0, 70), (1, 40), (2, 30)].into_iter().flat_map(|(slot, n)| std::iter::repeat_n(slot, n)).collect();
    // Pairs of the slots interleaved as a chunk's picks are.
    for i in (1..slot_idx.len()).rev() {
        slot_idx.swap(i, rng.next_u64() as usize % (i + 1));
    }
    let pairs = slot_idx.len();
    let len = expert_gemm_group_bound(pairs, slots, EXPERT_BLOCK_GEMM_GROUP);
    let (groups, order) = expert_gemm_groups(&slot_idx, EXPERT_BLOCK_GEMM_GROUP, len);
    assert!(groups.iter().any(|g| g[2] as usize == EXPERT_BLOCK_GEMM_GROUP), "a full group");
    assert!(groups.iter().any(|g| (33..64).contains(&g[2])), "a group past 32 pairs");
    for quant in [BlockQuant::Q4K, BlockQuant::Q6K] {
        let (pool, slot_bytes, offset) = block_pool(&mut rng, quant, (rows, cols), slots);
        let x = rng.vec_f32(pairs / k * cols, -1.0, 1.0);
        let want =
            cpu::expert_kquant_gemv(quant, &pool, (slot_bytes, offset), (rows, cols), &slot_idx, &x, k);
        let scale = pair_magnitudes(quant, &pool, (slot_bytes, offset), (rows, cols), &slot_idx, &x, k);
        let (pb, xb) = (upload(g, &pool), upload(g, &x));
        let (gb, ob) = (upload(g, groups.as_flattened()), upload(g, &order));
        // As a device part and as an arena part (whose tiles read each run whole first): the same results.
        for host in [false, true] {
            let y = upload(g, &vec![0f32; pairs * rows]);
            let w =
                ExpertBlocks { host, ..expert_blocks(&pb, quant, (slot_bytes, offset, slots), (rows, cols)) };
            let out = ExpertOut { y: (&y).into(), stride: rows as u32, offset: 0 };
            let sizes = (pairs as u32, len as u32);
            let (xv, gv, ov) = ((&xb).into(), (&gb).into(), (&ob).into());
            let d = g.kernels.expert_kquant_gemm(w, xv, gv, ov, out, sizes, k as u32);
            run(g, &[&d.unwrap()]);
            let got = read_n::<f32>(g, &y, pairs * rows);
            for (p, slot) in slot_idx.iter().enumerate() {
                let what = format!("{} pair {p} (slot {slot}, host {host})", quant.name());
                let range = p * rows..(p + 1) * rows;
                assert_close(&what, &got[range.clone()], &want[range.clone()], &scale[range], 1e-6, 1e-5);
            }
        }
    }
}

/// The tiled K-quant GEMM (prefill) against the GEMV's reference: token counts across 32-token tiles, rows
/// across 128-row tiles, output columns inside wider rows, a matrix split over bindings.
#[test]
fn kquant_gemms_match_the_cpu_reference() {
    let g = gpu_or_skip!();
    let mut rng = Rng::new(41);
    for quant in BlockQuant::ALL {
        for (rows, cols, tokens) in
            [(150usize, 512usize, 37usize), (150, 512, 3), (37, 256, 3), (130, 768, 33)]
        {
            let w = blocks(&mut rng, quant, rows * cols / 256);
            let x = rng.vec_f32(tokens * cols, -1.0, 1.0);
            let (wb, xb) = (upload(g, &w), upload(g, &x));
            let want = cpu::kquant_gemv(quant, &w, rows, cols, &x);
            let scale = magnitudes(quant, &w, rows, cols, &x);
            let m = BlockMatrix { data: (&wb).into(), quant, rows: rows as u32, cols: cols as u32 };
            let row_bytes = (cols / 256) as u64 * quant.block_bytes();
            // 128 rows a binding: a matrix past that is split.
            let split = Kernels::new(&g.ctx).with_max_binding((128 * row_bytes).next_multiple_of(256));
            for (k, name) in [(&g.kernels, ""), (&split, ", split")] {
                let stride = rows + 3;
                if name == ", split" && tokens * cols.max(stride) * 4 > 128 * row_bytes as usize {
                    continue; // the inputs or outputs would not fit the small binding
                }
                let y = upload(g, &vec![0f32; tokens * stride]);
                let d = k.kquant_gemm_into(m, (&xb).into(), ((&y).into(), stride as u32, 1), tokens as u32);
                run(g, &[&d.unwrap()]);
                let got = read_n::<f32>(g, &y, tokens * stride);
                let what = format!("{} gemm {rows}x{cols}, {tokens} tokens{name}", quant.name());
                for t in 0..tokens {
                    let row = &got[t * stride..][..stride];
                    assert!(
                        row[0] == 0.0 && row[1 + rows..].iter().all(|&v| v == 0.0),
                        "{what}: columns outside"
                    );
                    let (want, scale) = (&want[t * rows..][..rows], &scale[t * rows..][..rows]);
                    assert_close(&what, &row[1..1 + rows], want, scale, 1e-6, 1e-5);
                }
            }
        }
    }
}

/// Σ|w·x| of each pair's rows of the matrix at byte `offset` of its slot (zeros for a slot past the pool).
#[allow(clippy::too_many_arguments)]
fn pair_magnitudes(
    quant: BlockQuant,
    pool: &[u8],
    (slot_bytes, offset): (usize, usize),
    (rows, cols): (usize, usize),
    slot_idx: &[u32],
    x: &[f32],
    x_div: usize,
) -> Vec<f32> {
    let matrix = rows * cols / 256 * quant.block_bytes() as usize;
    (0..slot_idx.len())
        .flat_map(|p| {
            let at = slot_idx[p] as usize * slot_bytes + offset;
            match pool.get(at..at + matrix) {
                Some(w) => magnitudes(quant, w, rows, cols, &x[p / x_div * cols..][..cols]),
                None => vec![0.0; rows],
            }
        })
        .collect()
}

/// A pool of records holding gate and up of `quant`: `slots` slots of random bytes with gate at byte 256, up
/// after it and some bytes of another part. Returns the pool, the bytes of a slot and gate's and up's offsets.
fn gate_up_pool(
    rng: &mut Rng,
    quant: BlockQuant,
    (rows, cols): (usize, usize),
    slots: usize,
) -> (Vec<u8>, usize, usize, usize) {
    let matrix = rows * cols / 256 * quant.block_bytes() as usize;
    let (gate, up) = (256, (256 + matrix + 40).next_multiple_of(4));
    let slot_bytes = (up + matrix + 100).next_multiple_of(256);
    let mut pool = Vec::with_capacity(slots * slot_bytes);
    for _ in 0..slots {
        let mut slot: Vec<u8> = (0..slot_bytes).map(|_| rng.next_u64() as u8).collect();
        slot[gate..gate + matrix].copy_from_slice(&blocks(rng, quant, rows * cols / 256)[..matrix]);
        slot[up..up + matrix].copy_from_slice(&blocks(rng, quant, rows * cols / 256)[..matrix]);
        pool.extend(slot);
    }
    (pool, slot_bytes, gate, up)
}

/// Gate‖up with SwiGLU on its output (`expert_kquant_gemv_swiglu`) against the CPU's two GEMVs and
/// `silu_mul`: gate and up of every type at offsets of their own in each slot, rows that do not fill a
/// workgroup's 16, output columns inside wider rows, a slot past the pool, a pool split over bindings.
#[test]
fn expert_kquant_swiglu_matches_the_cpu_reference() {
    use diskformer_kernels::ExpertOut;
    let g = gpu_or_skip!();
    let mut rng = Rng::new(41);
    for quant in BlockQuant::ALL {
        for (rows, cols, slots) in [(37, 256, 4), (48, 512, 3)] {
            let (pool, slot_bytes, gate, up) = gate_up_pool(&mut rng, quant, (rows, cols), slots);
            let (k, tokens) = (3, 2);
            let pairs = k * tokens;
            let slot_idx: Vec<u32> = [2, 0, slots as u32, 1, 2, 2].to_vec();
            // Inputs of a realistic size: SiLU of large logits would hide errors in the gate.
            let x = rng.vec_f32(tokens * cols, -0.5, 0.5);
            let want = cpu::expert_kquant_gemv_swiglu(
                quant,
                &pool,
                (slot_bytes, gate, up),
                (rows, cols),
                &slot_idx,
                &x,
                k,
            );
            let g_out =
                cpu::expert_kquant_gemv(quant, &pool, (slot_bytes, gate), (rows, cols), &slot_idx, &x, k);
            let u_out =
                cpu::expert_kquant_gemv(quant, &pool, (slot_bytes, up), (rows, cols), &slot_idx, &x, k);
            let g_mag = pair_magnitudes(quant, &pool, (slot_bytes, gate), (rows, cols), &slot_idx, &x, k);
            let u_mag = pair_magnitudes(quant, &pool, (slot_bytes, up), (rows, cols), &slot_idx, &x, k);
            // d(silu(g)·u) = silu'(g)·u·dg + silu(g)·du, |silu'| < 1.1 and |silu(g)| <= |g| + 0.3.
            let scale: Vec<f32> = (0..pairs * rows)
                .map(|i| 1.1 * u_out[i].abs() * g_mag[i] + (g_out[i].abs() + 0.3) * u_mag[i])
                .collect();
            let (pb, xb, sb) = (upload(g, &pool), upload(g, &x), upload(g, &slot_idx));
            let split = Kernels::new(&g.ctx).with_max_binding((2 * slot_bytes) as u64);
            for (kernels, split_name) in
                [(&g.kernels, ""), (&g.plain, ", plain row sums"), (&split, ", split")]
            {
                let stride = rows + 3;
                let y = upload(g, &vec![0f32; pairs * stride]);
                let w = expert_blocks(&pb, quant, (slot_bytes, gate, slots), (rows, cols));
                let out = ExpertOut { y: (&y).into(), stride: stride as u32, offset: 2 };
                let pk = (pairs as u32, k as u32);
                let d = kernels.expert_kquant_gemv_swiglu(w, up as u64, (&xb).into(), (&sb).into(), out, pk);
                run(g, &[&d.unwrap()]);
                let got = read_n::<f32>(g, &y, pairs * stride);
                for p in 0..pairs {
                    let row = &got[p * stride..][..stride];
                    assert_eq!(&row[..2], &[0.0; 2], "columns before the offset stay untouched");
                    assert_eq!(row[2 + rows], 0.0, "columns after the rows stay untouched");
                    let what = format!("{} swiglu {rows}x{cols} pair {p}{split_name}", quant.name());
                    let (want, scale) = (&want[p * rows..][..rows], &scale[p * rows..][..rows]);
                    assert_close(&what, &row[2..2 + rows], want, scale, 1e-6, 1e-5);
                }
            }
        }
    }
}

/// The routed gate‖up on records of blocks (`expert_kquant_gemv_swiglu_routed`) against
/// `router_topk_slots` then the slot-indexed gate‖up it replaces (`expert_kquant_gemv_swiglu`, which the test
/// above holds to the CPU): the same picks, weights and slots bit for bit (the same top-k operations), and
/// the same activations bit for bit (the same rows from the same slots, the same walk). Every type, E = 128
/// and 60, one and two tokens, rows that do not fill a workgroup's 16, a pool split over bindings (every
/// part's first row block writes the picks); and the refusal of a layer past the table.
#[test]
fn routed_kquant_gate_up_matches_router_then_gemv() {
    use diskformer_kernels::{ExpertOut, View};
    let g = gpu_or_skip!();
    let mut rng = Rng::new(43);
    let slots = 6;
    for quant in BlockQuant::ALL {
        for (rows, cols, experts, top_k, t) in [(48, 512, 128, 8, 1), (37, 256, 60, 4, 2)] {
            let (pool, slot_bytes, gate, up) = gate_up_pool(&mut rng, quant, (rows, cols), slots);
            let mut logits = rng.vec_f32(t * experts, -4.0, 4.0);
            for row in logits.chunks_mut(experts) {
                // A tie at the top: the lower index wins.
                let n = row.len();
                (row[1], row[n - 1]) = (9.0, 9.0);
            }
            // Three layers of `experts` entries into the pool's slots; this is the middle one.
            let table: Vec<u32> = (0..3 * experts as u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) % slots as u32)
                .collect();
            let (base, entries) = (experts as u32, table.len() as u32);
            let x = rng.vec_f32(t * cols, -0.5, 0.5);
            let (pb, xb, lb, tb) = (upload(g, &pool), upload(g, &x), upload(g, &logits), upload(g, &table));
            let pairs = t * top_k;
            let split = Kernels::new(&g.ctx).with_max_binding((2 * slot_bytes) as u64);
            for (kernels, min_parts) in [(&g.kernels, 1), (&g.plain, 1), (&split, 3)] {
                let v = View::from;
                let out = RoutedOutputs::new(g, pairs, pairs * rows);
                let (e, kk, tt) = (experts as u32, top_k as u32, t as u32);
                let router = out.router(kernels, (&lb, &tb), (e, kk, tt), (base, entries));
                let w = expert_blocks(&pb, quant, (slot_bytes, gate, slots), (rows, cols));
                let (want_slots, want_act) = (&out.want[2], &out.want[3]);
                let y = ExpertOut { y: v(want_act), stride: rows as u32, offset: 0 };
                let gemv = kernels
                    .expert_kquant_gemv_swiglu(w, up as u64, v(&xb), v(want_slots), y, (kk * tt, kk))
                    .unwrap();
                let route = out.route((&lb, &tb), e, (base, entries));
                let routed = kernels
                    .expert_kquant_gemv_swiglu_routed(w, up as u64, v(&xb), route, v(&out.got[3]), (tt, kk))
                    .unwrap();
                assert!(
                    routed.parts() >= min_parts,
                    "expected >= {min_parts} pool parts, got {}",
                    routed.parts()
                );
                run(g, &[&router, &gemv, &routed]);
                let what = format!(
                    "{} {rows}x{cols} E={experts} k={top_k} T={t} sg {} parts {}",
                    routed.kernel().name(),
                    kernels.subgroups(),
                    routed.parts()
                );
                out.assert_same(g, &what);
                let picks = read_n::<u32>(g, &out.got[0], pairs);
                assert_eq!(picks, cpu::router_topk(&logits, experts, top_k).0, "{what}: picks");
            }
            // Refusal: the layer's entries past the table.
            let out = RoutedOutputs::new(g, pairs, pairs * rows);
            let route = out.route((&lb, &tb), experts as u32, (2 * experts as u32 + 1, entries));
            let w = expert_blocks(&pb, quant, (slot_bytes, gate, slots), (rows, cols));
            let (x, act, tk) = (View::from(&xb), View::from(&out.got[3]), (t as u32, top_k as u32));
            let err =
                g.kernels.expert_kquant_gemv_swiglu_routed(w, up as u64, x, route, act, tk).unwrap_err();
            assert!(err.to_string().contains("run past the table"), "{err}");
        }
    }
}

/// The down GEMV with the MoE combine on records of blocks (`expert_kquant_gemv_combine`) against the
/// CPU's: every type, picks onto the residual's old values, one pick past the pool adding nothing, more
/// picks than lane groups, rows that do not fill a block of 4, and a pool split over bindings whose parts
/// each add their own picks (only the last writing the next norm's inputs).
#[test]
fn expert_kquant_combine_adds_the_picks_onto_the_residual() {
    use diskformer_kernels::{CombineOut, combine_squares};
    let g = gpu_or_skip!();
    let mut rng = Rng::new(43);
    for quant in BlockQuant::ALL {
        for (rows, cols, slots, picks) in [(42, 512, 3, 3), (64, 256, 4, 10)] {
            let (pool, slot_bytes, offset) = block_pool(&mut rng, quant, (rows, cols), slots);
            let tokens = 2;
            let pairs = tokens * picks;
            let slot_idx: Vec<u32> =
                (0..pairs).map(|p| if p == 1 { u32::MAX } else { (p * 7 % slots) as u32 }).collect();
            let x = rng.vec_f32(pairs * cols, -1.0, 1.0);
            let weights = rng.vec_f32(pairs, 0.01, 0.3);
            let residual = rng.vec_f32(tokens * rows, -5.0, 5.0);
            let next_norm = rng.vec_f32(rows, 0.5, 1.5);
            let (want, want_scaled, want_squares) = cpu::expert_kquant_gemv_combine(
                quant,
                &pool,
                (slot_bytes, offset),
                (rows, cols, picks),
                &slot_idx,
                &x,
                &weights,
                &residual,
                &next_norm,
            );
            let mags = pair_magnitudes(quant, &pool, (slot_bytes, offset), (rows, cols), &slot_idx, &x, 1);
            let scale: Vec<f32> = (0..tokens * rows)
                .map(|i| {
                    let (t, r) = (i / rows, i % rows);
                    residual[i].abs()
                        + (0..picks)
                            .map(|j| weights[t * picks + j] * mags[(t * picks + j) * rows + r])
                            .sum::<f32>()
                })
                .collect();
            let (pb, xb, sb, wb) =
                (upload(g, &pool), upload(g, &x), upload(g, &slot_idx), upload(g, &weights));
            let nb = upload(g, &next_norm);
            let blocks_n = combine_squares(rows as u32) as usize;
            // Two slots a binding (or as many as the inputs' binding needs).
            let split = Kernels::new(&g.ctx).with_max_binding((2 * slot_bytes).max(4 * pairs * cols) as u64);
            for (kernels, split_name) in
                [(&g.kernels, ""), (&g.plain, ", plain row sums"), (&split, ", split")]
            {
                let y = upload(g, &residual);
                let (scaled, squares) = (poisoned(g, 4 * tokens * rows), poisoned(g, 4 * tokens * blocks_n));
                let v = diskformer_kernels::View::from;
                let w = expert_blocks(&pb, quant, (slot_bytes, offset, slots), (rows, cols));
                let out = CombineOut {
                    weights: v(&wb),
                    residual: v(&y),
                    next_norm: v(&nb),
                    scaled: v(&scaled),
                    squares: v(&squares),
                    finish: true,
                };
                let d =
                    kernels.expert_kquant_gemv_combine(w, v(&xb), v(&sb), out, (tokens as u32, picks as u32));
                let d = d.unwrap();
                if split_name == ", split" {
                    assert!(d.parts() >= 2, "{} parts", d.parts());
                }
                run(g, &[&d]);
                let what = format!("{} combine {rows}x{cols} k={picks}{split_name}", quant.name());
                let got = read_n::<f32>(g, &y, tokens * rows);
                assert_close(&what, &got, &want, &scale, 1e-6, 1e-5);
                let scaled_scale: Vec<f32> =
                    scale.iter().enumerate().map(|(i, s)| s * next_norm[i % rows]).collect();
                assert_close(
                    &what,
                    &read_n::<f32>(g, &scaled, tokens * rows),
                    &want_scaled,
                    &scaled_scale,
                    1e-6,
                    1e-5,
                );
                let squares_scale = squares_scale(&got, &scale, rows);
                let got_squares = read_n::<f32>(g, &squares, tokens * blocks_n);
                assert_close(&what, &got_squares, &want_squares, &squares_scale, 1e-6, 1e-5);
            }
        }
    }
}
