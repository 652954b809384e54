//! A whole matrix times one input row on the calling thread: what the tests and benches check paths with.

use crate::dot::dot;
use crate::{Error, Input, Isa, QuantMatrix, Result};

/// `out[r] = m[r] · x` for every row, with the `isa` path.
///
/// # Errors
/// [`Error::IsaUnavailable`] when this CPU lacks `isa`; [`Error::BadLength`] when `x` is not `m.cols()`
/// values or `out` not `m.rows()`; [`Error::QuantisedInput`] for a quantised `x` and weights other than Q8_0, Q4_0, Q4_K,
/// Q5_K and Q6_K.
pub fn gemv(isa: Isa, m: &QuantMatrix<'_>, x: Input<'_>, out: &mut [f32]) -> Result<()> {
    if !isa.available() {
        return Err(Error::IsaUnavailable { isa });
    }
    check_input("input", m.cols(), x)?;
    if !m.weight_type().takes_q8() && matches!(x, Input::Q8(_) | Input::Q16(_)) {
        return Err(Error::QuantisedInput { what: "matrix", ty: m.tensor_type() });
    }
    if out.len() != m.rows() {
        return Err(Error::BadLength { what: "output", expected: m.rows(), got: out.len() });
    }
    for (r, o) in out.iter_mut().enumerate() {
        *o = dot(isa, m.weight_type(), m.row(r), x);
    }
    Ok(())
}

/// Checks that `x` holds `cols` values (and, quantised, each half `cols / 32` scales and `cols / 16` sums).
pub(crate) fn check_input(what: &'static str, cols: usize, x: Input<'_>) -> Result<()> {
    if x.len() != cols {
        return Err(Error::BadLength { what, expected: cols, got: x.len() });
    }
    let half = |q: &crate::Q8Row| {
        if q.len() != cols {
            return Err(Error::BadLength { what, expected: cols, got: q.len() });
        }
        if q.scales.len() != cols / crate::BLOCK {
            return Err(Error::BadLength { what, expected: cols / crate::BLOCK, got: q.scales.len() });
        }
        if q.sums.len() != cols / 16 {
            return Err(Error::BadLength { what, expected: cols / 16, got: q.sums.len() });
        }
        Ok(())
    };
    match x {
        Input::F32(_) => Ok(()),
        Input::Q8(q) => half(q),
        Input::Q16(q) if q.totals.len() != cols / crate::BLOCK => {
            Err(Error::BadLength { what, expected: cols / crate::BLOCK, got: q.totals.len() })
        }
        Input::Q16(q) => half(&q.hi).and_then(|()| half(&q.lo)),
    }
}
