//! Which SIMD instructions the dot products use, chosen at run time.

use std::fmt;

/// An instruction set the dot products have a path for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Isa {
    /// Plain Rust: every CPU, and the reference the others are tested against.
    Scalar,
    /// x86-64 AVX2 with FMA and F16C (Haswell, Zen 1 and later).
    Avx2,
    /// x86-64 AVX-512 (F, BW, VL) with VNNI's int8 dot product (Ice Lake, Sapphire Rapids, Zen 4 and later).
    Avx512Vnni,
}

impl Isa {
    /// Every path, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512Vnni];

    /// The fastest path this CPU runs. `DISKFORMER_CPU_ISA=scalar|avx2|avx512vnni` caps it (for tests and
    /// for measuring one path against another); a cap the CPU lacks falls back to the best it has below it.
    pub fn detect() -> Isa {
        let cap = std::env::var("DISKFORMER_CPU_ISA").ok().and_then(|v| Isa::from_name(&v));
        Isa::ALL
            .into_iter()
            .rev()
            .filter(|isa| cap.is_none_or(|c| *isa as u8 <= c as u8))
            .find(|isa| isa.available())
            .unwrap_or(Isa::Scalar)
    }

    /// Whether this CPU runs the path.
    pub fn available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2")
                    && is_x86_feature_detected!("fma")
                    && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => {
                Isa::Avx2.available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512vnni")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The path named `scalar`, `avx2` or `avx512vnni`.
    pub fn from_name(name: &str) -> Option<Isa> {
        Isa::ALL.into_iter().find(|isa| isa.name() == name.trim().to_ascii_lowercase())
    }

    /// Its short name, as `DISKFORMER_CPU_ISA` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512Vnni => "avx512vnni",
        }
    }
}

impl fmt::Display for Isa {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
