//! Where a graph's GPU time goes, kernel by kernel: the one source of such figures for the graphs the
//! engines run ([`Engine::kernel_times`](crate::Engine::kernel_times),
//! [`Model::kernel_times`](crate::qwen35moe::Model::kernel_times)).

use std::time::Instant;

use diskformer_kernels::{Context, Dispatch, Kernel};

use crate::{Error, Result};

/// One row of a graph's kernel times.
#[derive(Clone, Debug)]
pub struct KernelTime {
    /// The kernel's name, or the whole graph's (the first row).
    pub kernel: String,
    /// Its dispatches in the graph.
    pub dispatches: usize,
    /// Seconds they took, one submission.
    pub seconds: f64,
}

/// Times `graph` whole (the first row, named `whole`), then each kernel's dispatches of it alone (in graph
/// order, one pass), each submitted `repeats` times and timed from the host to the end of the work (so
/// each row carries one submission's latency). The dispatches run on whatever their buffers hold.
pub(crate) fn time_graph(
    ctx: &Context,
    graph: &[&Dispatch],
    whole: &str,
    repeats: u32,
) -> Result<Vec<KernelTime>> {
    let mut kinds: Vec<Kernel> = Vec::new();
    for d in graph {
        if !kinds.contains(&d.kernel()) {
            kinds.push(d.kernel());
        }
    }
    let wait = || ctx.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| Error::Gpu(e.to_string()));
    let time = |dispatches: &[&Dispatch]| -> Result<f64> {
        wait()?;
        let started = Instant::now();
        for _ in 0..repeats.max(1) {
            let mut enc = ctx.device.create_command_encoder(&Default::default());
            {
                let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                dispatches.iter().for_each(|d| d.record(&mut pass));
            }
            ctx.queue.submit([enc.finish()]);
            wait()?;
        }
        Ok(started.elapsed().as_secs_f64() / f64::from(repeats.max(1)))
    };
    let mut out = vec![KernelTime { kernel: whole.into(), dispatches: graph.len(), seconds: time(graph)? }];
    for kind in kinds {
        let of_kind: Vec<&Dispatch> = graph.iter().copied().filter(|d| d.kernel() == kind).collect();
        let seconds = time(&of_kind)?;
        out.push(KernelTime { kernel: kind.name().into(), dispatches: of_kind.len(), seconds });
    }
    Ok(out)
}
