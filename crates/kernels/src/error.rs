//! The crate's one error type.

/// Everything that can go wrong creating the GPU context or binding a kernel.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No adapter was found (or none matched `DISKFORMER_ADAPTER`).
    #[error(
        "no GPU adapter found{detail}; install a Vulkan driver (lavapipe: mesa-vulkan-drivers) or unset DISKFORMER_ADAPTER"
    )]
    NoAdapter {
        /// What was looked for, and what was seen.
        detail: String,
    },
    /// The adapter lacks a feature the kernels need.
    #[error(
        "adapter {adapter:?} lacks the {feature} feature, which the kernels require; pick another adapter with DISKFORMER_ADAPTER"
    )]
    MissingFeature {
        /// The adapter's name.
        adapter: String,
        /// The missing feature.
        feature: &'static str,
    },
    /// The device request failed.
    #[error("requesting a device from adapter {adapter:?} failed: {source}")]
    RequestDevice {
        /// The adapter's name.
        adapter: String,
        /// wgpu's error.
        source: wgpu::RequestDeviceError,
    },
    /// The device cannot run this kernel (a launcher that has a fallback uses it instead).
    #[error("{kernel} needs {needed} bytes of workgroup memory; this device offers {offered}")]
    Unavailable {
        /// The kernel.
        kernel: &'static str,
        /// Workgroup memory it needs.
        needed: u32,
        /// What the device offers.
        offered: u32,
    },
    /// The device has no cooperative matrices for this kernel (see `Kernel::needs_cooperative_matrix`).
    #[error(
        "{kernel} runs on cooperative matrices (16x16x16 f16 products into f32, 32-lane subgroups), which this device does not offer (or DISKFORMER_NO_COOP=1); use the f32 or int8 GEMMs"
    )]
    NoCooperativeMatrix {
        /// The kernel.
        kernel: &'static str,
    },
    /// Shapes passed to a launcher do not fit together or break a kernel's limits.
    #[error("{kernel}: {what}")]
    Shape {
        /// The kernel.
        kernel: &'static str,
        /// What is wrong, with the numbers.
        what: String,
    },
    /// A buffer is smaller than the shapes need.
    #[error(
        "{kernel}: buffer {name} needs {needed} bytes from offset {offset} but has {size}; allocate it for the shapes given"
    )]
    BufferTooSmall {
        /// The kernel.
        kernel: &'static str,
        /// The binding's name.
        name: &'static str,
        /// Bytes needed from `offset`.
        needed: u64,
        /// Offset into the buffer.
        offset: u64,
        /// The buffer's size.
        size: u64,
    },
    /// A binding offset breaks the device's storage offset alignment.
    #[error(
        "{kernel}: buffer {name} offset {offset} (or a split point) is not a multiple of {alignment}; align regions to {alignment} bytes"
    )]
    Misaligned {
        /// The kernel.
        kernel: &'static str,
        /// The binding's name.
        name: &'static str,
        /// The offending offset.
        offset: u64,
        /// The required alignment.
        alignment: u64,
    },
    /// A binding is larger than the device's max storage binding and this kernel cannot split it.
    #[error(
        "{kernel}: buffer {name} binds {bytes} bytes, over the device's max storage binding of {max}; split it into smaller buffers"
    )]
    BindingTooLarge {
        /// The kernel.
        kernel: &'static str,
        /// The binding's name.
        name: &'static str,
        /// The binding size asked for.
        bytes: u64,
        /// The device limit.
        max: u64,
    },
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
