//! Protects the kernels working together: one Qwen3-MoE decode step at the real shapes (embed, a full
//! layer with attention over a partly filled f16 cache and 8 routed experts, the head and argmax),
//! recorded as the engine will (many dispatches in one pass, picks read back between the two halves),
//! against the same chain of CPU references.

mod common;

use common::{Gpu, Rng, Scales, assert_close, poisoned, read_n, run, upload};
use diskformer_kernels::{
    AttentionShape, ExpertPlanes, MoeCombineParams, Q8Matrix, QkNormRopeParams, argmax_partial_len, cpu,
};
use half::f16;

const H: usize = 2048;
const HEADS: usize = 32;
const KV: usize = 4;
const HD: usize = 128;
const E: usize = 128;
const K: usize = 8;
const F: usize = 768;
const VOCAB: usize = 1000;
const CTX: usize = 64;
const EPS: f32 = 1e-6;

struct Q8 {
    q: Vec<i8>,
    s: Vec<f16>,
    rows: usize,
    cols: usize,
    qb: wgpu::Buffer,
    sb: wgpu::Buffer,
}

impl Q8 {
    fn new(g: &Gpu, rng: &mut Rng, rows: usize, cols: usize) -> Self {
        let q = rng.vec_i8(rows * cols);
        let s = rng.vec_scales(rows * cols / 32);
        let (qb, sb) = (upload(g, &q), upload(g, &s));
        Self { q, s, rows, cols, qb, sb }
    }
    fn m(&self) -> Q8Matrix<'_> {
        Q8Matrix {
            q: (&self.qb).into(),
            scales: (&self.sb).into(),
            rows: self.rows as u32,
            cols: self.cols as u32,
        }
    }
    fn gemv(&self, x: &[f32]) -> Vec<f32> {
        cpu::q8_gemv(&self.q, &self.s, self.rows, self.cols, x)
    }
}

/// Expert `e`'s planes (gate‖up int8, scales, down int8, scales), the same on every call.
fn expert(e: u32) -> (Vec<i8>, Vec<f16>, Vec<i8>, Vec<f16>) {
    let mut rng = Rng::new(10_000 + u64::from(e));
    (rng.vec_i8(2 * F * H), rng.vec_scales(2 * F * H / 32), rng.vec_i8(H * F), rng.vec_scales(H * F / 32))
}

#[test]
fn decode_step_matches_cpu_chain() {
    let g = gpu_or_skip!();
    let k = &g.kernels;
    let mut rng = Rng::new(80);
    let buf = |n: usize| poisoned(g, 4 * n);

    // Weights.
    let embd = Q8::new(g, &mut rng, VOCAB, H);
    let wq = Q8::new(g, &mut rng, HEADS * HD, H);
    let wk = Q8::new(g, &mut rng, KV * HD, H);
    let wv = Q8::new(g, &mut rng, KV * HD, H);
    let wo = Q8::new(g, &mut rng, H, HEADS * HD);
    let lm = Q8::new(g, &mut rng, VOCAB, H);
    let attn_norm = rng.vec_f32(H, 0.5, 1.5);
    let ffn_norm = rng.vec_f32(H, 0.5, 1.5);
    let out_norm = rng.vec_f32(H, 0.5, 1.5);
    let q_norm = rng.vec_f32(HD, 0.5, 1.5);
    let k_norm = rng.vec_f32(HD, 0.5, 1.5);
    let router = rng.vec_f32(E * H, -0.05, 0.05);
    let (an, fnn, on, qn, kn, rt) = (
        upload(g, &attn_norm),
        upload(g, &ffn_norm),
        upload(g, &out_norm),
        upload(g, &q_norm),
        upload(g, &k_norm),
        upload(g, &router),
    );

    // Per-step inputs: token 417 at position 37, with positions 0..37 already in the cache.
    let (token, pos) = (417u32, 37u32);
    let rope = cpu::rope_cos_sin(&[pos], HD, 1_000_000.0);
    let mut kc: Vec<f16> = rng.vec_f32(CTX * KV * HD, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let mut vc: Vec<f16> = rng.vec_f32(CTX * KV * HD, -1.0, 1.0).into_iter().map(f16::from_f32).collect();
    let (idb, posb, ropeb) = (upload(g, &[token]), upload(g, &[pos]), upload(g, &rope));
    let (kcb, vcb) = (upload(g, &kc), upload(g, &vc));

    // Scratch.
    let (x, h, q, kk, v) = (buf(H), buf(H), buf(HEADS * HD), buf(KV * HD), buf(KV * HD));
    let (qr, kr, att, o, x2, h2) = (buf(HEADS * HD), buf(KV * HD), buf(HEADS * HD), buf(H), buf(H), buf(H));
    let (rl, ids, wts) = (buf(E), buf(K), buf(K));

    // First half: embed → attention block (the split-K attention beside it) → router, one pass.
    let shape = AttentionShape {
        heads: HEADS as u32,
        kv_heads: KV as u32,
        head_dim: HD as u32,
        tokens: 1,
        ctx: CTX as u32,
    };
    let (part, att2) = (buf(shape.partial_len() as usize), buf(HEADS * HD));
    let qp = QkNormRopeParams { heads: HEADS as u32, head_dim: HD as u32, tokens: 1, eps: EPS };
    let kp = QkNormRopeParams { heads: KV as u32, ..qp };
    let first = [
        k.embed_q8((&idb).into(), embd.m(), (&x).into(), 1).unwrap(),
        k.rms_norm((&x).into(), (&an).into(), (&h).into(), H as u32, 1, EPS).unwrap(),
        k.q8_gemv(wq.m(), (&h).into(), (&q).into(), 1).unwrap(),
        k.q8_gemv(wk.m(), (&h).into(), (&kk).into(), 1).unwrap(),
        k.q8_gemv(wv.m(), (&h).into(), (&v).into(), 1).unwrap(),
        k.qk_norm_rope((&q).into(), (&qn).into(), (&ropeb).into(), (&qr).into(), qp).unwrap(),
        k.qk_norm_rope((&kk).into(), (&kn).into(), (&ropeb).into(), (&kr).into(), kp).unwrap(),
        k.kv_store((&kr).into(), (&posb).into(), (&kcb).into(), (KV * HD) as u32, 1, CTX as u32).unwrap(),
        k.kv_store((&v).into(), (&posb).into(), (&vcb).into(), (KV * HD) as u32, 1, CTX as u32).unwrap(),
        k.attention((&qr).into(), (&kcb).into(), (&vcb).into(), (&posb).into(), (&att).into(), shape)
            .unwrap(),
        k.attention_split((&qr).into(), (&kcb).into(), (&vcb).into(), (&posb).into(), (&part).into(), shape)
            .unwrap(),
        k.attention_combine((&part).into(), (&posb).into(), (&att2).into(), shape).unwrap(),
        k.q8_gemv(wo.m(), (&att).into(), (&o).into(), 1).unwrap(),
        k.add((&x).into(), (&o).into(), (&x2).into(), H as u32).unwrap(),
        k.rms_norm((&x2).into(), (&fnn).into(), (&h2).into(), H as u32, 1, EPS).unwrap(),
        k.f32_gemv((&rt).into(), E as u32, H as u32, (&h2).into(), (&rl).into(), 1).unwrap(),
        k.router_topk((&rl).into(), (&ids).into(), (&wts).into(), E as u32, K as u32, 1).unwrap(),
    ];
    run(g, &first.iter().collect::<Vec<_>>());

    // CPU chain, first half.
    let cx = cpu::embed_q8(&embd.q, &embd.s, H, &[token]);
    let ch = cpu::rms_norm(&cx, &attn_norm, H, EPS);
    let (cq, ck, cv) = (wq.gemv(&ch), wk.gemv(&ch), wv.gemv(&ch));
    let cqr = cpu::qk_norm_rope(&cq, &q_norm, &rope, HEADS, HD, EPS);
    let ckr = cpu::qk_norm_rope(&ck, &k_norm, &rope, KV, HD, EPS);
    cpu::kv_store(&ckr, &[pos], KV * HD, &mut kc);
    cpu::kv_store(&cv, &[pos], KV * HD, &mut vc);
    let catt = cpu::attention(&cqr, &kc, &vc, &[pos], HEADS, KV, HD);
    let cx2 = cpu::add(&cx, &wo.gemv(&catt));
    let ch2 = cpu::rms_norm(&cx2, &ffn_norm, H, EPS);
    let crl = cpu::f32_gemv(&router, E, H, &ch2);
    let (cids, cw) = cpu::router_topk(&crl, E, K);

    // Tolerance for chained results: each stage adds ~1e-6 relative; 1e-4 of the vector's scale.
    let close = |what: &str, got: &[f32], want: &[f32]| {
        let m = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert_close(what, got, want, &vec![m; want.len()], 0.0, 1e-4);
    };
    close("attention", &read_n::<f32>(g, &att, HEADS * HD), &catt);
    close("attention (split-K)", &read_n::<f32>(g, &att2, HEADS * HD), &catt);
    close("x2 (after attention)", &read_n::<f32>(g, &x2, H), &cx2);
    close("router logits", &read_n::<f32>(g, &rl, E), &crl);
    let gids = read_n::<u32>(g, &ids, K);
    assert_eq!(gids, cids, "router picks (random logits have no near-ties at the 8th place)");
    close("router weights", &read_n::<f32>(g, &wts, K), &cw);

    // The engine's part: bring the picked experts into slots 0..8 (pick j in slot j).
    let mut pools = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for &e in &gids {
        let (a, b, c, d) = expert(e);
        pools.0.extend(a);
        pools.1.extend(b);
        pools.2.extend(c);
        pools.3.extend(d);
    }
    let (guq, gus, dq, ds) =
        (upload(g, &pools.0), upload(g, &pools.1), upload(g, &pools.2), upload(g, &pools.3));
    let slots: Vec<u32> = (0..K as u32).collect();
    let slotb = upload(g, &slots);
    let gate_up = ExpertPlanes {
        q: (&guq).into(),
        scales: (&gus).into(),
        slots: K as u32,
        first_slot: 0,
        rows: (2 * F) as u32,
        cols: H as u32,
    };
    let down = ExpertPlanes {
        q: (&dq).into(),
        scales: (&ds).into(),
        slots: K as u32,
        first_slot: 0,
        rows: H as u32,
        cols: F as u32,
    };
    let (gu, act, dn, x3, hf, lg, tok) =
        (buf(K * 2 * F), buf(K * F), buf(K * H), buf(H), buf(H), buf(VOCAB), buf(1));
    let part = buf(argmax_partial_len(VOCAB as u32, 1) as usize);

    // Second half: experts → combine → head → argmax, one pass.
    let cp = MoeCombineParams { hidden: H as u32, k: K as u32, tokens: 1, _pad: 0 };
    let second = [
        k.expert_q8_gemv(gate_up, (&h2).into(), (&slotb).into(), (&gu).into(), K as u32, K as u32).unwrap(),
        k.silu_mul((&gu).into(), (&act).into(), F as u32, K as u32).unwrap(),
        k.expert_q8_gemv(down, (&act).into(), (&slotb).into(), (&dn).into(), K as u32, 1).unwrap(),
        k.moe_combine((&dn).into(), (&wts).into(), (&x2).into(), (&x3).into(), cp).unwrap(),
        k.rms_norm((&x3).into(), (&on).into(), (&hf).into(), H as u32, 1, EPS).unwrap(),
        k.q8_gemv(lm.m(), (&hf).into(), (&lg).into(), 1).unwrap(),
        k.argmax((&lg).into(), (&part).into(), (&tok).into(), VOCAB as u32, 1).unwrap(),
    ];
    run(g, &second.iter().collect::<Vec<_>>());

    let cgu = cpu::expert_q8_gemv(&pools.0, &pools.1, 2 * F, H, &slots, &ch2, K);
    let cact = cpu::silu_mul(&cgu, F);
    let cdn = cpu::expert_q8_gemv(&pools.2, &pools.3, H, F, &slots, &cact, 1);
    let cx3 = cpu::moe_combine(&cdn, &cw, &cx2, H, K);
    let chf = cpu::rms_norm(&cx3, &out_norm, H, EPS);
    let clg = lm.gemv(&chf);
    close("x3 (after the experts)", &read_n::<f32>(g, &x3, H), &cx3);
    close("logits", &read_n::<f32>(g, &lg, VOCAB), &clg);
    let ctok = cpu::argmax(&clg, VOCAB)[0];
    let mut sorted = clg.clone();
    sorted.sort_by(|a, b| b.total_cmp(a));
    if sorted[0] - sorted[1] > 1e-3 {
        assert_eq!(read_n::<u32>(g, &tok, 1)[0], ctok, "greedy token");
    }
}
