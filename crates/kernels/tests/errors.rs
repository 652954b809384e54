//! Protects the launchers' validation: bad shapes, short or misaligned buffers and bindings over the
//! limit are refused with the matching error variant before anything is recorded.

mod common;

use common::{poisoned, upload};
use diskformer_kernels::{AttentionShape, Error, ExpertPlanes, Kernels, Q8Matrix, View};

#[test]
fn launchers_refuse_bad_input() {
    let g = gpu_or_skip!();
    let k = &g.kernels;
    let q = upload(g, &vec![1i8; 64 * 2048]);
    let s = upload(g, &vec![half::f16::ONE; 64 * 64]);
    let x = upload(g, &vec![0.5f32; 2048]);
    let y = poisoned(g, 4 * 64);
    let w = Q8Matrix { q: (&q).into(), scales: (&s).into(), rows: 64, cols: 2048 };

    // cols not a multiple of 32.
    let bad = Q8Matrix { cols: 2047, ..w };
    assert!(matches!(k.q8_gemv(bad, (&x).into(), (&y).into(), 1), Err(Error::Shape { .. })));
    // y too small for 2 tokens; x too small for 2 tokens.
    assert!(matches!(
        k.q8_gemv(w, (&x).into(), (&y).into(), 2),
        Err(Error::BufferTooSmall { name: "x", .. })
    ));
    let big_x = upload(g, &vec![0.5f32; 2 * 2048]);
    assert!(matches!(
        k.q8_gemv(w, (&big_x).into(), (&y).into(), 2),
        Err(Error::BufferTooSmall { name: "y", .. })
    ));
    // An offset off the storage alignment.
    let off = View::at(&big_x, 4);
    assert!(matches!(k.q8_gemv(w, off, (&y).into(), 1), Err(Error::Misaligned { name: "x", .. })));
    // Zero tokens.
    assert!(matches!(k.q8_gemv(w, (&x).into(), (&y).into(), 0), Err(Error::Shape { .. })));
    // A binding the kernel cannot split (the router) over the limit.
    let small = Kernels::new(&g.ctx).with_max_binding(4096);
    assert!(matches!(
        small.f32_gemv((&x).into(), 16, 128, (&x).into(), (&y).into(), 1),
        Err(Error::BindingTooLarge { name: "w", .. })
    ));
    // A pool whose one slot does not fit a binding.
    let planes =
        ExpertPlanes { q: (&q).into(), scales: (&s).into(), slots: 2, first_slot: 0, rows: 32, cols: 2048 };
    assert!(matches!(
        small.expert_q8_gemv(planes, (&x).into(), (&x).into(), (&y).into(), 1, 1),
        Err(Error::BindingTooLarge { .. })
    ));
    // x_div not dividing the pairs.
    assert!(matches!(
        k.expert_q8_gemv(planes, (&x).into(), (&x).into(), (&y).into(), 3, 2),
        Err(Error::Shape { .. })
    ));
    // GQA heads must divide; head_dim limit; router limits.
    let shape = AttentionShape { heads: 6, kv_heads: 4, head_dim: 128, tokens: 1, ctx: 4 };
    let a = (&x).into();
    assert!(matches!(k.attention(a, a, a, a, (&y).into(), shape), Err(Error::Shape { .. })));
    let shape = AttentionShape { heads: 4, kv_heads: 4, head_dim: 512, tokens: 1, ctx: 1 };
    assert!(matches!(k.attention(a, a, a, a, (&y).into(), shape), Err(Error::Shape { .. })));
    assert!(matches!(k.router_topk(a, (&y).into(), (&y).into(), 300, 8, 1), Err(Error::Shape { .. })));
    assert!(matches!(k.router_topk(a, (&y).into(), (&y).into(), 4, 8, 1), Err(Error::Shape { .. })));
    // A layer whose table entries run past the table.
    let (yv, n) = ((&y).into(), 2 * 128);
    assert!(matches!(
        k.router_topk_slots(a, a, yv, yv, yv, 128, 8, 1, (n - 64, n)),
        Err(Error::Shape { .. })
    ));
    // Rows read as vec4: a hidden size off a multiple of 4.
    let p = diskformer_kernels::MoeCombineNormParams { hidden: 13, k: 1, tokens: 1, eps: 1e-6 };
    assert!(matches!(
        k.moe_combine_norm(a, a, a, a, (&y).into(), (&y).into(), None, p),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        k.add_rms_norm(a, a, a, (&y).into(), (&y).into(), 13, 1, 1e-6),
        Err(Error::Shape { .. })
    ));
    // The tiled attention needs head_dim a multiple of 16 (attention itself falls back).
    let shape = AttentionShape { heads: 2, kv_heads: 1, head_dim: 8, tokens: 1, ctx: 4 };
    assert!(matches!(k.attention_tiled(a, a, a, a, (&y).into(), shape), Err(Error::Shape { .. })));
    assert!(k.attention(a, a, a, a, (&y).into(), shape).is_ok());
    // qkv_rope_store: sums of squares without their count (or a count without them).
    let p = diskformer_kernels::QkvRopeStoreParams {
        heads: 1,
        kv_heads: 1,
        head_dim: 4,
        tokens: 1,
        eps: 1e-6,
        ctx: 4,
        in_squares: 0,
        hidden: 0,
    };
    let cache = diskformer_kernels::KvCacheViews { k: yv, v: yv };
    assert!(matches!(k.qkv_rope_store(a, a, a, a, a, yv, cache, Some(a), p), Err(Error::Shape { .. })));
    let p = diskformer_kernels::QkvRopeStoreParams { in_squares: 4, hidden: 16, ..p };
    assert!(matches!(k.qkv_rope_store(a, a, a, a, a, yv, cache, None, p), Err(Error::Shape { .. })));
    assert!(k.qkv_rope_store(a, a, a, a, a, yv, cache, Some(a), p).is_ok());
    // quantize_q8: blocks of 32 values; the int8 GEMM's input is quantised rows (9/32 of the f32 row), so
    // an x sized for 2 of them is too small for 3 tokens.
    assert!(matches!(k.quantize_q8(a, (&y).into(), 1, 48), Err(Error::Shape { .. })));
    // 64 values quantise to 72 bytes: y's 256 hold 3 rows, not 4.
    assert!(matches!(k.quantize_q8(a, (&y).into(), 4, 64), Err(Error::BufferTooSmall { name: "out", .. })));
    let xq = upload(g, &vec![0u8; 2 * diskformer_kernels::q8_row_bytes(2048) as usize]);
    let y3 = poisoned(g, 4 * 3 * 64);
    assert!(k.q8_gemm_i8(w, (&xq).into(), (&y3).into(), 2).is_ok());
    assert!(matches!(
        k.q8_gemm_i8(w, (&xq).into(), (&y3).into(), 3),
        Err(Error::BufferTooSmall { name: "x", .. })
    ));
    // expert_groups: at most 256 experts a layer; len must hold every group the pairs can make.
    let p = diskformer_kernels::ExpertGroupsParams {
        pairs: 16,
        experts: 300,
        size: 32,
        len: 316,
        base: 0,
        entries: 300,
        _pad: [0; 2],
    };
    assert!(matches!(k.expert_groups(a, a, yv, yv, p), Err(Error::Shape { .. })));
    let p = diskformer_kernels::ExpertGroupsParams { experts: 8, entries: 8, len: 7, ..p };
    assert!(matches!(k.expert_groups(a, a, yv, yv, p), Err(Error::Shape { .. })));
}
