//! The wgpu instance, adapter, device and queue, with the features and limits the kernels rely on.

use std::sync::OnceLock;

use crate::error::{Error, Result};

/// The process's one wgpu instance (Vulkan, Metal, DX12: the GL backend has no shader-f16, so it could
/// only produce an error). Contexts share it rather than each creating and dropping its own: every drop
/// unloads the Vulkan loader and driver, and on the H200 (NVIDIA 580) the 30th load in a process failed
/// ("vulkan drivers/libraries could not be loaded"), so a process that opened engines one after another
/// could not open more. Adapters and devices stay each context's own, and go with it.
fn instance() -> &'static wgpu::Instance {
    static INSTANCE: OnceLock<wgpu::Instance> = OnceLock::new();
    INSTANCE.get_or_init(|| {
        let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
        desc.backends = wgpu::Backends::PRIMARY;
        wgpu::Instance::new(desc)
    })
}

/// Environment variable: pick the adapter whose name contains this text (case-insensitive).
pub const ADAPTER_ENV: &str = "DISKFORMER_ADAPTER";

/// Environment variable: set to `1` to ignore the adapter's subgroup support and use the plain kernels.
pub const NO_SUBGROUPS_ENV: &str = "DISKFORMER_NO_SUBGROUPS";

/// Environment variable: set to `1` to leave cooperative matrices (tensor cores) off; the GEMMs that use
/// them are then not built.
pub const NO_COOP_ENV: &str = "DISKFORMER_NO_COOP";

/// A GPU device ready for the kernels: shader-f16 enabled, subgroups enabled when the adapter offers them
/// (with sizes the kernels can use), and the adapter's limits requested in full.
#[derive(Debug)]
pub struct Context {
    /// The adapter the device came from.
    pub adapter: wgpu::Adapter,
    /// The device.
    pub device: wgpu::Device,
    /// Its queue.
    pub queue: wgpu::Queue,
    /// The adapter's description (name, backend, driver, subgroup sizes).
    pub info: wgpu::AdapterInfo,
    /// The limits the device was created with (the adapter's own).
    pub limits: wgpu::Limits,
    /// Whether the subgroup kernel variants are used.
    pub subgroups: bool,
    /// Whether the device runs the cooperative-matrix GEMMs ([`Kernel::needs_cooperative_matrix`]): the
    /// adapter offers 16 × 16 × 16 f16 products into f32 in 32-lane subgroups (wgpu's experimental
    /// feature), and [`NO_COOP_ENV`] is not `1`.
    ///
    /// [`Kernel::needs_cooperative_matrix`]: crate::Kernel::needs_cooperative_matrix
    pub cooperative_matrix: bool,
    /// Whether the device can make buffers in host memory that its kernels read over the bus
    /// ([`Context::host_storage_usage`]: wgpu's mappable-primary-buffers feature, requested where offered,
    /// which lets a `MAP_READ` buffer be a storage binding; wgpu then allocates it in host-cached system
    /// memory).
    pub host_storage: bool,
}

impl Context {
    /// Creates a context on the first adapter wgpu offers (high performance preferred), or on the adapter
    /// whose name contains [`ADAPTER_ENV`] when that variable is set.
    ///
    /// # Errors
    /// [`Error::NoAdapter`] without a (matching) adapter, [`Error::MissingFeature`] when it lacks shader-f16,
    /// [`Error::RequestDevice`] when the device request fails.
    pub fn new() -> Result<Self> {
        pollster::block_on(Self::new_async())
    }

    /// The async form of [`Context::new`].
    ///
    /// # Errors
    /// As [`Context::new`].
    pub async fn new_async() -> Result<Self> {
        let instance = instance();
        let adapter = match std::env::var(ADAPTER_ENV) {
            Ok(want) if !want.is_empty() => {
                let want_lc = want.to_lowercase();
                let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
                let names: Vec<String> = adapters.iter().map(|a| a.get_info().name).collect();
                let mut matching: Vec<wgpu::Adapter> = adapters
                    .into_iter()
                    .filter(|a| a.get_info().name.to_lowercase().contains(&want_lc))
                    .collect();
                // Among several matches (one device on two backends), prefer one the kernels can use.
                let usable = matching.iter().position(|a| a.features().contains(wgpu::Features::SHADER_F16));
                let pick = usable.unwrap_or(0);
                (pick < matching.len()).then(|| matching.swap_remove(pick)).ok_or_else(|| {
                    Error::NoAdapter {
                        detail: format!(" matching {ADAPTER_ENV}={want:?} (adapters: {names:?})"),
                    }
                })?
            }
            _ => instance
                .request_adapter(&wgpu::RequestAdapterOptions {
                    power_preference: wgpu::PowerPreference::HighPerformance,
                    ..Default::default()
                })
                .await
                .map_err(|e| Error::NoAdapter { detail: format!(" ({e})") })?,
        };
        Self::from_adapter(adapter).await
    }

    /// Creates the device on a given adapter.
    ///
    /// # Errors
    /// As [`Context::new`].
    pub async fn from_adapter(adapter: wgpu::Adapter) -> Result<Self> {
        let info = adapter.get_info();
        let offered = adapter.features();
        if !offered.contains(wgpu::Features::SHADER_F16) {
            return Err(Error::MissingFeature { adapter: info.name, feature: "shader-f16" });
        }
        let mut features = wgpu::Features::SHADER_F16;
        // The subgroup kernels reduce one 32-lane row group per subgroup or several subgroups per group,
        // so they need subgroups of at most 32 lanes (a power of two, as all are).
        let no_sg = std::env::var(NO_SUBGROUPS_ENV).is_ok_and(|v| v == "1");
        let subgroups = !no_sg
            && offered.contains(wgpu::Features::SUBGROUP)
            && info.subgroup_min_size >= 4
            && info.subgroup_max_size <= 32;
        if offered.contains(wgpu::Features::SUBGROUP) {
            features |= wgpu::Features::SUBGROUP;
        }
        // The cooperative-matrix tiles take a subgroup as 32 consecutive lanes of the workgroup.
        let no_coop = std::env::var(NO_COOP_ENV).is_ok_and(|v| v == "1");
        let coop = wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
        let cooperative_matrix = !no_coop
            && offered.contains(coop | wgpu::Features::SUBGROUP)
            && info.subgroup_min_size == 32
            && info.subgroup_max_size == 32
            && adapter.cooperative_matrix_properties().iter().any(|c| {
                (c.m_size, c.n_size, c.k_size) == (16, 16, 16)
                    && c.ab_type == wgpu::CooperativeScalarType::F16
                    && c.cr_type == wgpu::CooperativeScalarType::F32
            });
        if cooperative_matrix {
            features |= coop;
        }
        let host_storage = offered.contains(wgpu::Features::MAPPABLE_PRIMARY_BUFFERS);
        if host_storage {
            features |= wgpu::Features::MAPPABLE_PRIMARY_BUFFERS;
        }
        let limits = adapter.limits();
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("diskformer"),
                required_features: features,
                required_limits: limits.clone(),
                memory_hints: wgpu::MemoryHints::Performance,
                // SAFETY: the only experimental feature requested is cooperative matrices, used by the
                // two `*_coop` GEMMs alone: whole 16 x 16 tiles loaded from and stored to workgroup arrays
                // that hold them, from uniform control flow. Their tests compare them with a CPU
                // reference on such a device.
                experimental_features: if cooperative_matrix {
                    unsafe { wgpu::ExperimentalFeatures::enabled() }
                } else {
                    wgpu::ExperimentalFeatures::disabled()
                },
                ..Default::default()
            })
            .await
            .map_err(|source| Error::RequestDevice { adapter: info.name.clone(), source })?;
        Ok(Self { adapter, device, queue, info, limits, subgroups, cooperative_matrix, host_storage })
    }

    /// The usage that, added to a storage buffer's, puts it in host memory that the kernels read over the
    /// bus (`MAP_READ`, which wgpu allocates host-cached); `None` without [`Context::host_storage`]. The
    /// host never maps such a buffer here: it is filled by copies.
    pub fn host_storage_usage(&self) -> Option<wgpu::BufferUsages> {
        self.host_storage.then_some(wgpu::BufferUsages::MAP_READ)
    }

    /// The largest storage binding the device allows, in bytes.
    pub fn max_binding(&self) -> u64 {
        self.limits.max_storage_buffer_binding_size
    }

    /// Whether the adapter is a software renderer on the CPU (lavapipe, llvmpipe, SwiftShader, WARP): it
    /// runs every kernel, at a CPU's speed.
    pub fn is_software(&self) -> bool {
        self.info.device_type == wgpu::DeviceType::Cpu
    }

    /// Bytes of the adapter's largest device-local memory heap (its VRAM on a discrete GPU), where the
    /// backend tells (Vulkan); `None` elsewhere.
    pub fn device_memory(&self) -> Option<u64> {
        #[cfg(any(target_os = "linux", target_os = "windows", target_os = "android"))]
        {
            // SAFETY: the adapter outlives the guard, which is dropped at the end of this block; the query
            // reads the physical device's properties and changes nothing.
            let hal = unsafe { self.adapter.as_hal::<wgpu::hal::api::Vulkan>() }?;
            let instance = hal.shared_instance().raw_instance();
            // SAFETY: the physical device is the adapter's own, of this instance.
            let props = unsafe { instance.get_physical_device_memory_properties(hal.raw_physical_device()) };
            let heaps =
                &props.memory_heaps[..(props.memory_heap_count as usize).min(props.memory_heaps.len())];
            heaps
                .iter()
                .filter(|h| h.flags.contains(ash::vk::MemoryHeapFlags::DEVICE_LOCAL))
                .map(|h| h.size)
                .max()
        }
        #[cfg(not(any(target_os = "linux", target_os = "windows", target_os = "android")))]
        None
    }

    /// A one-line description: adapter name, backend, driver, subgroup use and binding limit.
    pub fn describe(&self) -> String {
        format!(
            "{} ({:?}, {} {}), subgroups {} ({}..{}), cooperative matrices {}, max storage binding {} MiB",
            self.info.name,
            self.info.backend,
            self.info.driver,
            self.info.driver_info,
            if self.subgroups { "on" } else { "off" },
            self.info.subgroup_min_size,
            self.info.subgroup_max_size,
            if self.cooperative_matrix { "on" } else { "off" },
            self.max_binding() >> 20
        )
    }
}
