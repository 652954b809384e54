//! Errors of the CPU expert kernels.

use diskformer_gguf::TensorType;

/// What can go wrong handing weights or activations to the CPU kernels.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A weight type (or layout) these kernels do not multiply yet.
    #[error(
        "{what} is {ty}; the CPU expert kernels multiply Q8_0 and Q4_0 (as planes or a GGUF's blocks) and \
         the other types diskformer-gguf dequantises (as a GGUF's blocks); keep such experts on the GPU"
    )]
    UnsupportedType {
        /// Which matrix.
        what: &'static str,
        /// Its type.
        ty: TensorType,
    },
    /// Q8_0-quantised inputs ([`Math::Q8`](crate::Math::Q8)) for weights other than Q8_0 and Q4_0, which
    /// multiply f32.
    #[error(
        "{what} is {ty}, which multiplies f32 inputs; Math::Q8 is for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K weights"
    )]
    QuantisedInput {
        /// Which matrix.
        what: &'static str,
        /// Its type.
        ty: TensorType,
    },
    /// A row length that is not a whole number of quant blocks.
    #[error("{what} has rows of {cols} values, not a multiple of the block size {block}")]
    PartialBlock {
        /// Which matrix.
        what: &'static str,
        /// Values a row.
        cols: usize,
        /// Values a block.
        block: usize,
    },
    /// A buffer whose length does not match the shape it was given for.
    #[error("{what} holds {got} bytes or values where its shape needs {expected}")]
    BadLength {
        /// Which buffer.
        what: &'static str,
        /// Length the shape needs.
        expected: usize,
        /// Length given.
        got: usize,
    },
    /// Matrices of one expert, or an expert and its input, whose shapes do not chain.
    #[error("{what}: shapes do not chain ({detail})")]
    ShapeMismatch {
        /// Where.
        what: &'static str,
        /// The two shapes.
        detail: String,
    },
    /// A SIMD path this CPU cannot run.
    #[error("this CPU lacks {isa}; use Isa::detect() for the best path it has")]
    IsaUnavailable {
        /// The path asked for.
        isa: crate::Isa,
    },
    /// An assignment naming a token or an expert past the end of the lists given.
    #[error("assignment {index} names {what} {value}, but there are only {len}")]
    OutOfRange {
        /// The assignment's position.
        index: usize,
        /// `"token"` or `"expert"`.
        what: &'static str,
        /// The value it names.
        value: usize,
        /// How many there are.
        len: usize,
    },
}

/// This crate's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
