//! Protects the WGSL sources without a GPU: every kernel (plain and subgroup variants) parses and
//! validates with naga, its uniform `Params` has the size of the Rust params struct, its bindings follow
//! the house order (0 = params uniform, inputs read-only, outputs read_write and last), and every
//! `override` without a default gets a value from `Kernel::constants`.

use diskformer_kernels::Kernel;
use naga::valid::{Capabilities, ValidationFlags, Validator};

fn check(kernel: Kernel, subgroups: bool) {
    let name = kernel.name();
    let src = kernel.source(subgroups);
    let module = naga::front::wgsl::parse_str(&src)
        .unwrap_or_else(|e| panic!("{name} (subgroups {subgroups}): {}", e.emit_to_string(&src)));
    // SHADER_FLOAT16_IN_FLOAT32 (unpack2x16float): wgpu grants it on Vulkan, Metal and DX12 (downlevel
    // SHADER_F16_IN_F32), everything but some GL ES.
    let mut caps = Capabilities::SHADER_FLOAT16 | Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if subgroups {
        caps |= Capabilities::SUBGROUP;
    }
    if kernel.needs_cooperative_matrix() {
        caps |= Capabilities::COOPERATIVE_MATRIX;
    }
    Validator::new(ValidationFlags::all(), caps)
        .validate(&module)
        .unwrap_or_else(|e| panic!("{name} (subgroups {subgroups}): {}", e.emit_to_string(&src)));

    assert!(
        module.entry_points.iter().any(|e| e.name == name && e.stage == naga::ShaderStage::Compute),
        "{name}: entry point must be named after the kernel"
    );

    // An `override` without a default must get its value from `Kernel::constants` when the pipeline is built.
    for (_, o) in module.overrides.iter() {
        let Some(o_name) = &o.name else { continue };
        if o.init.is_none() {
            assert!(
                kernel.constants().iter().any(|(c, _)| c == o_name),
                "{name}: override {o_name} has no default and no value in Kernel::constants"
            );
        }
    }

    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx()).expect("layout");
    let mut bindings: Vec<(u32, naga::AddressSpace, naga::Handle<naga::Type>)> = module
        .global_variables
        .iter()
        .filter_map(|(_, g)| g.binding.as_ref().map(|b| (b.group, b.binding, g.space, g.ty)))
        .map(|(group, binding, space, ty)| {
            assert_eq!(group, 0, "{name}: everything lives in group 0");
            (binding, space, ty)
        })
        .collect();
    bindings.sort_by_key(|b| b.0);
    for (i, b) in bindings.iter().enumerate() {
        assert_eq!(b.0 as usize, i, "{name}: bindings must be 0..n without gaps");
    }
    let (_, space, ty) = bindings[0];
    assert_eq!(space, naga::AddressSpace::Uniform, "{name}: binding 0 must be the params uniform");
    assert_eq!(
        layouter[ty].size as usize,
        kernel.params_size(),
        "{name}: WGSL Params and the Rust params struct differ in size"
    );
    // The sampler's per-step struct, read by two kernels, mirrors SampleStep in both.
    if matches!(kernel, Kernel::SampleTopK | Kernel::ApplyPenalties) {
        assert_eq!(
            layouter[bindings[1].2].size as usize,
            size_of::<diskformer_kernels::SampleStep>(),
            "{name}: WGSL Step and SampleStep differ in size"
        );
    }
    let writable: Vec<bool> = bindings[1..]
        .iter()
        .map(|(b, space, _)| match space {
            naga::AddressSpace::Storage { access } => access.contains(naga::StorageAccess::STORE),
            other => panic!("{name}: binding {b} is {other:?}, expected storage"),
        })
        .collect();
    let first_out = writable.iter().position(|&w| w).unwrap_or_else(|| panic!("{name}: no output binding"));
    assert!(writable[first_out..].iter().all(|&w| w), "{name}: outputs must come after every input");
}

#[test]
fn every_shader_validates_and_params_match() {
    for kernel in Kernel::ALL {
        check(kernel, false);
        if kernel.has_subgroup_variant() {
            check(kernel, true);
        }
    }
}
