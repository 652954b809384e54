use crate::error::Result;
use crate::kernels::{Kernel, Kernels, View};
use crate::{Dispatch, ops::*};

/// Params of `delta_net_conv.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DeltaNetConvParams {
    /// Channels C (q ‖ k ‖ v).
    pub channels: u32,
    /// Taps K.
    pub taps: u32,
    /// Tokens T.
    pub tokens: u32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<DeltaNetConvParams>() == 16);

/// Params of `delta_net_rule.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct DeltaNetRuleParams {
    /// Head size S.
    pub state: u32,
    /// q/k heads H_k.
    pub k_heads: u32,
    /// v heads H_v.
    pub v_heads: u32,
    /// Tokens T.
    pub tokens: u32,
    /// ε of the q/k L2 norms.
    pub eps: f32,
    /// Padding.
    pub _pad: [u32; 3],
}
const _: () = assert!(size_of::<DeltaNetRuleParams>() == 32);

/// Params of `gated_rms_norm.wgsl`.
#[repr(C)]
#[derive(Clone, Copy, Debug, bytemuck::Pod, bytemuck::Zeroable)]
pub struct GatedRmsNormParams {
    /// Row length.
    pub n: u32,
    /// Rows.
    pub rows: u32,
    /// Epsilon added to the mean square.
    pub eps: f32,
    /// Padding.
    pub _pad: u32,
}
const _: () = assert!(size_of::<GatedRmsNormParams>() == 16);

/// The largest DeltaNet head size S [`Kernels::delta_net_rule`] takes (a lane keeps a state row of S).
pub const DELTA_NET_MAX_STATE: u32 = 128;

/// DeltaNet's sizes: head size S, q/k heads H_k, v heads H_v (a multiple of H_k).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaNetShape {
    /// Head size S.
    pub state: u32,
    /// q/k heads H_k.
    pub k_heads: u32,
    /// v heads H_v.
    pub v_heads: u32,
}

impl DeltaNetShape {
    /// Channels of the conv and the rule's input: q ‖ k ‖ v, `2·H_k·S + H_v·S`.
    pub fn channels(&self) -> u32 {
        (2 * self.k_heads + self.v_heads) * self.state
    }
}

impl Kernels {
    /// DeltaNet's causal conv and SiLU over `tokens` tokens with its saved inputs (updated in place):
    /// `out[t, c] = silu(Σ_{i<K-1} state[i, c]·w[c, i] + x[t, c]·w[c, K-1])`, then the state shifts in
    /// `x[t]`. Shapes: `x [T, C]`, `w [C, K]`, `state [K-1, C]` (oldest first), `out [T, C]`, all f32.
    ///
    /// # Errors
    /// Shape errors for zero sizes or fewer than 2 taps; buffer errors as usual.
    #[allow(clippy::too_many_arguments)]
    pub fn delta_net_conv(
        &self,
        x: View<'_>,
        w: View<'_>,
        state: View<'_>,
        out: View<'_>,
        channels: u32,
        taps: u32,
        tokens: u32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::DeltaNetConv);
        let (c, k, t) = (u64::from(channels), u64::from(taps), u64::from(tokens));
        b.ensure(taps >= 2, || format!("{taps} taps; the conv needs at least 2"))?;
        b.ensure(tokens > 0, || "tokens must be > 0".into())?;
        let dims = [b.groups("channels / 64", c.div_ceil(64))?, 1, 1];
        let bound = vec![
            b.storage("x", x, 0, f32s(t * c))?,
            b.storage("w", w, 0, f32s(c * k))?,
            b.storage("state", state, 0, f32s((k - 1) * c))?,
            b.storage("out", out, 0, f32s(t * c))?,
        ];
        Ok(b.finish(vec![(DeltaNetConvParams { channels, taps, tokens, _pad: 0 }, bound, dims)]))
    }

    /// The gated delta rule over `tokens` tokens, one workgroup a block of 32 rows of a v head's state
    /// (`delta_net_rule.wgsl`): `u` the
    /// conv's output (q ‖ k ‖ v), `ba` each token's β logits then α (`[T, 2·H_v]`), `dt_bias` and `a`
    /// (`[H_v]`), the state `[H_v, S, S]` updated in place, `out [T, H_v·S]`.
    ///
    /// # Errors
    /// Shape errors for zero sizes, S past [`DELTA_NET_MAX_STATE`], or H_k not dividing H_v; buffer errors as
    /// usual.
    #[allow(clippy::too_many_arguments)]
    pub fn delta_net_rule(
        &self,
        u: View<'_>,
        ba: View<'_>,
        dt_bias: View<'_>,
        a: View<'_>,
        state: View<'_>,
        out: View<'_>,
        shape: DeltaNetShape,
        tokens: u32,
        eps: f32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::DeltaNetRule);
        let DeltaNetShape { state: s, k_heads, v_heads } = shape;
        b.ensure((1..=DELTA_NET_MAX_STATE).contains(&s), || {
            format!("head size {s}; allowed 1..={DELTA_NET_MAX_STATE}")
        })?;
        b.ensure(k_heads > 0 && v_heads.is_multiple_of(k_heads), || {
            format!("{k_heads} q/k heads must divide {v_heads} v heads")
        })?;
        b.ensure(tokens > 0, || "tokens must be > 0".into())?;
        let (ss, hv, t) = (u64::from(s), u64::from(v_heads), u64::from(tokens));
        // A workgroup a block of 32 rows of a head's state.
        let dims = [b.groups("v heads", hv)?, b.groups("row blocks", ss.div_ceil(32))?, 1];
        let bound = vec![
            b.storage("u", u, 0, f32s(t * u64::from(shape.channels())))?,
            b.storage("ba", ba, 0, f32s(t * 2 * hv))?,
            b.storage("dt_bias", dt_bias, 0, f32s(hv))?,
            b.storage("a", a, 0, f32s(hv))?,
            b.storage("state", state, 0, f32s(hv * ss * ss))?,
            b.storage("out", out, 0, f32s(t * hv * ss))?,
        ];
        let params = DeltaNetRuleParams { state: s, k_heads, v_heads, tokens, eps, _pad: [0; 3] };
        Ok(b.finish(vec![(params, bound, dims)]))
    }

    /// DeltaNet's output norm per row of `n`: `out = rms_norm(o; w, eps) · silu(z)`. Shapes: `o`, `z`, `out`
    /// `[rows, n]`, `w [n]`, all f32.
    ///
    /// # Errors
    /// Shape errors for zero sizes; buffer errors as usual.
    #[allow(clippy::too_many_arguments)]
    pub fn gated_rms_norm(
        &self,
        o: View<'_>,
        z: View<'_>,
        w: View<'_>,
        out: View<'_>,
        n: u32,
        rows: u32,
        eps: f32,
    ) -> Result<Dispatch> {
        let b = self.binder(Kernel::GatedRmsNorm);
        let (nn, r) = (u64::from(n), u64::from(rows));
        b.ensure(n > 0, || "n must be > 0".into())?;
        let dims = [b.groups("rows", r)?, 1, 1];
        let bound = vec![
            b.storage("o", o, 0, f32s(r * nn))?,
            b.storage("z", z, 0, f32s(r * nn))?,
            b.storage("w", w, 0, f32s(nn))?,
            b.storage("out", out, 0, f32s(r * nn))?,
        ];
        Ok(b.finish(vec![(GatedRmsNormParams { n, rows, eps, _pad: 0 }, bound, dims)]))
    }
}
