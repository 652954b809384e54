//! ggml tensor types: ids, block sizes and bytes per block.

use std::fmt;

/// A ggml tensor type this crate knows (the `ggml_type` ids of ggml.h).
///
/// Block sizes and block byte sizes follow ggml's `type_traits` table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum TensorType {
    /// 32-bit float.
    F32,
    /// IEEE half.
    F16,
    /// bfloat16.
    BF16,
    /// 32 values: f16 scale, 16 bytes of 4-bit values (offset 8).
    Q4_0,
    /// 32 values: f16 scale and min, 16 bytes of 4-bit values.
    Q4_1,
    /// 32 values: f16 scale, 4 bytes of high bits, 16 bytes of low nibbles.
    Q5_0,
    /// 32 values: f16 scale and min, 4 bytes of high bits, 16 bytes of low nibbles.
    Q5_1,
    /// 32 values: f16 scale, 32 signed bytes.
    Q8_0,
    /// 256-value super-block, 2-bit.
    Q2K,
    /// 256-value super-block, 3-bit.
    Q3K,
    /// 256-value super-block, 4-bit with 6-bit scales and mins.
    Q4K,
    /// 256-value super-block, 5-bit.
    Q5K,
    /// 256-value super-block, 6-bit.
    Q6K,
    /// 256-value super-block, 8-bit with f32 scale (used for activations).
    Q8K,
    /// 32 values: f16 scale, 16 bytes of 4-bit indices into a non-linear codebook.
    IQ4NL,
    /// 256-value super-block of IQ4_NL's codebook, 6-bit sub-block scales.
    IQ4XS,
    /// 256-value i-quant, 2.06 bits a weight (read and sized; not dequantised).
    IQ2XXS,
    /// 256-value i-quant, 2.31 bits a weight (read and sized; not dequantised).
    IQ2XS,
    /// 256-value i-quant, 2.5 bits a weight (read and sized; not dequantised).
    IQ2S,
    /// 256-value i-quant, 3.06 bits a weight (read and sized; not dequantised).
    IQ3XXS,
    /// 256-value i-quant, 3.44 bits a weight (read and sized; not dequantised).
    IQ3S,
    /// 256-value i-quant, 1.56 bits a weight (read and sized; not dequantised).
    IQ1S,
    /// 256-value i-quant, 1.75 bits a weight (read and sized; not dequantised).
    IQ1M,
    /// 256-value ternary, 1.69 bits a weight (read and sized; not dequantised).
    TQ1_0,
    /// 256-value ternary, 2.06 bits a weight (read and sized; not dequantised).
    TQ2_0,
    /// 32 FP4 (E2M1) values and a shared E8M0 exponent (read and sized; not dequantised).
    MXFP4,
    /// 8-bit integers (read and sized; not dequantised).
    I8,
    /// 16-bit integers (read and sized; not dequantised).
    I16,
    /// 32-bit integers (read and sized; not dequantised).
    I32,
    /// 64-bit integers (read and sized; not dequantised).
    I64,
    /// 64-bit floats (read and sized; not dequantised).
    F64,
}

impl TensorType {
    /// Every known type.
    pub const ALL: [TensorType; 31] = [
        TensorType::F32,
        TensorType::F16,
        TensorType::BF16,
        TensorType::Q4_0,
        TensorType::Q4_1,
        TensorType::Q5_0,
        TensorType::Q5_1,
        TensorType::Q8_0,
        TensorType::Q2K,
        TensorType::Q3K,
        TensorType::Q4K,
        TensorType::Q5K,
        TensorType::Q6K,
        TensorType::Q8K,
        TensorType::IQ4NL,
        TensorType::IQ4XS,
        TensorType::IQ2XXS,
        TensorType::IQ2XS,
        TensorType::IQ2S,
        TensorType::IQ3XXS,
        TensorType::IQ3S,
        TensorType::IQ1S,
        TensorType::IQ1M,
        TensorType::TQ1_0,
        TensorType::TQ2_0,
        TensorType::MXFP4,
        TensorType::I8,
        TensorType::I16,
        TensorType::I32,
        TensorType::I64,
        TensorType::F64,
    ];

    /// The type for a ggml type id, if known.
    pub fn from_id(id: u32) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.id() == id)
    }

    /// The ggml type id.
    pub fn id(self) -> u32 {
        match self {
            TensorType::F32 => 0,
            TensorType::F16 => 1,
            TensorType::Q4_0 => 2,
            TensorType::Q4_1 => 3,
            TensorType::Q5_0 => 6,
            TensorType::Q5_1 => 7,
            TensorType::Q8_0 => 8,
            TensorType::Q2K => 10,
            TensorType::Q3K => 11,
            TensorType::Q4K => 12,
            TensorType::Q5K => 13,
            TensorType::Q6K => 14,
            TensorType::Q8K => 15,
            TensorType::IQ2XXS => 16,
            TensorType::IQ2XS => 17,
            TensorType::IQ3XXS => 18,
            TensorType::IQ1S => 19,
            TensorType::IQ4NL => 20,
            TensorType::IQ3S => 21,
            TensorType::IQ2S => 22,
            TensorType::IQ4XS => 23,
            TensorType::I8 => 24,
            TensorType::I16 => 25,
            TensorType::I32 => 26,
            TensorType::I64 => 27,
            TensorType::F64 => 28,
            TensorType::IQ1M => 29,
            TensorType::BF16 => 30,
            TensorType::TQ1_0 => 34,
            TensorType::TQ2_0 => 35,
            TensorType::MXFP4 => 39,
        }
    }

    /// Values per block.
    pub fn block_size(self) -> u64 {
        match self {
            TensorType::F32
            | TensorType::F16
            | TensorType::BF16
            | TensorType::I8
            | TensorType::I16
            | TensorType::I32
            | TensorType::I64
            | TensorType::F64 => 1,
            TensorType::Q4_0
            | TensorType::Q4_1
            | TensorType::Q5_0
            | TensorType::Q5_1
            | TensorType::Q8_0
            | TensorType::IQ4NL
            | TensorType::MXFP4 => 32,
            TensorType::Q2K
            | TensorType::Q3K
            | TensorType::Q4K
            | TensorType::Q5K
            | TensorType::Q6K
            | TensorType::Q8K
            | TensorType::IQ4XS
            | TensorType::IQ2XXS
            | TensorType::IQ2XS
            | TensorType::IQ2S
            | TensorType::IQ3XXS
            | TensorType::IQ3S
            | TensorType::IQ1S
            | TensorType::IQ1M
            | TensorType::TQ1_0
            | TensorType::TQ2_0 => 256,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> u64 {
        match self {
            TensorType::F32 => 4,
            TensorType::F16 | TensorType::BF16 => 2,
            TensorType::Q4_0 => 18,
            TensorType::Q4_1 => 20,
            TensorType::Q5_0 => 22,
            TensorType::Q5_1 => 24,
            TensorType::Q8_0 => 34,
            TensorType::Q2K => 84,
            TensorType::Q3K => 110,
            TensorType::Q4K => 144,
            TensorType::Q5K => 176,
            TensorType::Q6K => 210,
            TensorType::Q8K => 292,
            TensorType::IQ4NL => 18,
            TensorType::IQ4XS => 136,
            TensorType::IQ2XXS => 66,
            TensorType::IQ2XS => 74,
            TensorType::IQ2S => 82,
            TensorType::IQ3XXS => 98,
            TensorType::IQ3S => 110,
            TensorType::IQ1S => 50,
            TensorType::IQ1M => 56,
            TensorType::TQ1_0 => 54,
            TensorType::TQ2_0 => 66,
            TensorType::MXFP4 => 17,
            TensorType::I8 => 1,
            TensorType::I16 => 2,
            TensorType::I32 => 4,
            TensorType::I64 | TensorType::F64 => 8,
        }
    }

    /// The type named `name` ([`TensorType::name`]).
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|t| t.name() == name)
    }

    /// ggml's name for the type (`"q8_0"`, `"q4_K"`, …).
    pub fn name(self) -> &'static str {
        match self {
            TensorType::F32 => "f32",
            TensorType::F16 => "f16",
            TensorType::BF16 => "bf16",
            TensorType::Q4_0 => "q4_0",
            TensorType::Q4_1 => "q4_1",
            TensorType::Q5_0 => "q5_0",
            TensorType::Q5_1 => "q5_1",
            TensorType::Q8_0 => "q8_0",
            TensorType::Q2K => "q2_K",
            TensorType::Q3K => "q3_K",
            TensorType::Q4K => "q4_K",
            TensorType::Q5K => "q5_K",
            TensorType::Q6K => "q6_K",
            TensorType::Q8K => "q8_K",
            TensorType::IQ4NL => "iq4_nl",
            TensorType::IQ4XS => "iq4_xs",
            TensorType::IQ2XXS => "iq2_xxs",
            TensorType::IQ2XS => "iq2_xs",
            TensorType::IQ2S => "iq2_s",
            TensorType::IQ3XXS => "iq3_xxs",
            TensorType::IQ3S => "iq3_s",
            TensorType::IQ1S => "iq1_s",
            TensorType::IQ1M => "iq1_m",
            TensorType::TQ1_0 => "tq1_0",
            TensorType::TQ2_0 => "tq2_0",
            TensorType::MXFP4 => "mxfp4",
            TensorType::I8 => "i8",
            TensorType::I16 => "i16",
            TensorType::I32 => "i32",
            TensorType::I64 => "i64",
            TensorType::F64 => "f64",
        }
    }

    /// Whether [`crate::dequantize`] reads it: every type but the activation format Q8_K, the i-quants
    /// other than IQ4, the ternary and FP4 ones, and the integer and f64 types.
    pub fn dequantizable(self) -> bool {
        matches!(
            self,
            TensorType::F32
                | TensorType::F16
                | TensorType::BF16
                | TensorType::Q4_0
                | TensorType::Q4_1
                | TensorType::Q5_0
                | TensorType::Q5_1
                | TensorType::Q8_0
                | TensorType::Q2K
                | TensorType::Q3K
                | TensorType::Q4K
                | TensorType::Q5K
                | TensorType::Q6K
                | TensorType::IQ4NL
                | TensorType::IQ4XS
        )
    }

    /// Bytes for `n_elements` values, or `None` when `n_elements` is not a whole number of blocks or the
    /// size overflows.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        if !n_elements.is_multiple_of(self.block_size()) {
            return None;
        }
        (n_elements / self.block_size()).checked_mul(self.block_bytes())
    }
}

/// ggml's name for type id `id` (ggml.h's `ggml_type`, and gguf-py's newer ones), known here or not; `None`
/// for ids neither uses.
pub(crate) fn ggml_type_name(id: u32) -> Option<&'static str> {
    if let Some(t) = TensorType::from_id(id) {
        return Some(t.name());
    }
    Some(match id {
        9 => "q8_1",
        40 => "nvfp4",
        41 => "q1_0",
        _ => return None,
    })
}

impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_round_trip_and_are_unique() {
        for t in TensorType::ALL {
            assert_eq!(TensorType::from_id(t.id()), Some(t));
        }
        let mut ids: Vec<u32> = TensorType::ALL.iter().map(|t| t.id()).collect();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), TensorType::ALL.len());
        assert_eq!(TensorType::from_id(4), None, "ids 4 and 5 were removed from ggml");
        assert_eq!(TensorType::from_id(9), None, "q8_1 is not stored in files");
    }

    #[test]
    fn a_type_not_read_is_named_in_the_error() {
        let e = crate::Error::UnknownTensorType { name: "blk.0.ffn_down_exps.weight".into(), type_id: 40 };
        let message = e.to_string();
        assert!(message.contains("is nvfp4 (ggml type 40)") && message.contains("IQ4_XS"), "{message}");
        let e = crate::Error::UnknownTensorType { name: "x".into(), type_id: 77 };
        assert!(e.to_string().contains("an unknown type (ggml type 77)"));
        assert_eq!(ggml_type_name(23), Some("iq4_xs"));
        assert_eq!(TensorType::from_id(16), Some(TensorType::IQ2XXS));
    }

    #[test]
    fn bytes_for_needs_whole_blocks() {
        assert_eq!(TensorType::Q8_0.bytes_for(64), Some(68));
        assert_eq!(TensorType::Q8_0.bytes_for(33), None);
        assert_eq!(TensorType::Q6K.bytes_for(512), Some(420));
        assert_eq!(TensorType::F32.bytes_for(u64::MAX), None);
    }
}
