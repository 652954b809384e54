//! The route-ahead step driver, for one-token steps while experts stream: layers queued past the last one
//! the host checked, each routed through a GPU table of what the pool holds, and run again where `ensure`
//! had to load.

use std::time::{Duration, Instant};

use diskformer_expert_stream::{ExpertKey, SlotView, SpeculativeReads};

use super::{Engine, Output, Want, read_output, readback, record_head, timed};
use crate::Result;
use crate::graph::Scratch;
use crate::unit_stock::{UnitBuffers, UnitKind, UnitStock};
use diskformer_runtime::tiers::ABSENT_SLOT;

impl Engine {
    /// A one-token step while experts stream, with up to [`StreamOptions::route_ahead`](crate::StreamOptions::route_ahead) layers queued past
    /// the last one the host has checked. Each layer is its own submission: its attention and router (the
    /// picks turned into slots through the route table), a copy of the residual stream the router read,
    /// its picks and slots copied out, then its experts. The host checks the layers in order: a layer whose
    /// slots are those `ensure` pins stands, and one more is queued; otherwise `ensure` loaded what it
    /// lacked, and the layer runs again from its router on its saved residual stream through the updated
    /// table, at the head of the next layer's submission, with the layers after it queued again (what ran
    /// of them read a wrong state; every write they made is made again, the keys and values at this
    /// position included).
    pub(super) fn route_ahead_step(&mut self, want: Want) -> Result<Output> {
        let layers = self.graphs[&1].layers.len();
        let k = self.config.expert_used_count as usize;
        let window = self.route_ahead as usize;
        if self.route_units.is_none() {
            let hidden = self.config.embedding_length;
            let buffers = UnitBuffers::new(&self.scratch, hidden, k as u32);
            let (graph, device, b) = (self.graphs[&1].clone(), self.ctx.device.clone(), buffers.clone());
            let stock = UnitStock::start(layers, move |kind, l| b.commands(&device, &graph, kind, l));
            self.route_units = Some((buffers, stock.ok()));
        }
        self.sync_route_table();
        let mut units = RoutedUnits::new(layers);
        let mut next = self.queue_routed(0, window, want, None, &mut units);
        for l in 0..layers {
            // The next unit to queue is made ready (from the stock, or recorded) while the GPU runs what is
            // queued.
            self.prepare_routed(next, want, &mut units);
            // The stock records what was taken while the host waits for this layer's picks and loads.
            if let Some((_, Some(stock))) = &self.route_units {
                stock.refill();
            }
            let rb = &self.scratch.route_readback[l];
            let copied = units.copied[l].clone();
            let read = readback(
                &self.ctx.device,
                rb,
                8 * k as u64,
                copied,
                Duration::ZERO,
                &mut self.stats.gpu_wait,
            )?;
            let (picks, found) = read.split_at(k);
            let started = Instant::now();
            let (device, s) = (&self.ctx.device, &self.scratch);
            let (copied, lacked) = (&units.copied[..layers], &mut units.lacked[..]);
            let mut guessed = Ok(());
            let pinned = match self.tiers.pool.backend().speculation() {
                // While this layer's loads run, the disk may as well read what the layers queued after it lack.
                Some(spec) => {
                    let (units, next) = (l + 1..(l + 1 + window).min(layers), l + 1);
                    let mut guesses = MissGuesses { device, s, copied, lacked, units, next, k, spec };
                    self.tiers.pool.ensure_meanwhile(l as u32, picks, || {
                        guesses.step().unwrap_or_else(|e| {
                            guessed = Err(e);
                            false
                        })
                    })
                }
                None => self.tiers.pool.ensure(l as u32, picks),
            };
            self.stats.ensure_time += started.elapsed();
            let pinned = pinned?;
            guessed?;
            let mut rerun = None;
            if pinned.slots().iter().map(|s| s.0).eq(found.iter().copied()) {
                self.stats.layers_routed_ahead += 1;
            } else {
                self.sync_route_table();
                // The run again finds its slots in the table; nothing reads them back.
                debug_assert!(self.route_table.as_ref().is_some_and(|(_, table)| {
                    let base = l * self.config.expert_count as usize;
                    picks.iter().zip(pinned.slots()).all(|(&id, slot)| table[base + id as usize] == slot.0)
                }));
                self.stats.layers_rerun += 1;
                (rerun, next) = (Some(l), l + 1);
            }
            next = self.queue_routed(next, l + 1 + window, want, rerun, &mut units);
            // Whatever reads these slots is submitted; loads into them are ordered after it.
            self.tiers.pool.release(pinned);
        }
        let (device, s, shape) = (&self.ctx.device, &self.scratch, self.head_shape(1));
        read_output(device, s, want, shape, 0, units.copied[layers].clone(), &mut self.stats.gpu_wait)
    }

    /// Takes route-ahead unit `unit` (plain, no run again) ahead of a later [`Engine::queue_routed`],
    /// unless it is past the head or taken already: recorded while the GPU runs what is queued.
    fn prepare_routed(&mut self, unit: usize, want: Want, units: &mut RoutedUnits) {
        if units.prepared.get(unit).is_some_and(Option::is_none) {
            units.prepared[unit] = Some(self.routed_unit(UnitKind::Layer, unit, want));
        }
    }

    /// Submits route-ahead units `from..upto` (at most through unit `layers`, the head), each on its own
    /// (as [`Engine::prepare_routed`] took it, else [`Engine::routed_unit`]; `rerun`, a layer to run again
    /// from its router, goes in the first's submission), noting the submission each one copies out by.
    /// Returns where it stopped.
    fn queue_routed(
        &mut self,
        from: usize,
        upto: usize,
        want: Want,
        mut rerun: Option<usize>,
        units: &mut RoutedUnits,
    ) -> usize {
        let end = upto.min(units.copied.len()).max(from + usize::from(rerun.is_some()));
        for unit in from..end {
            let again = rerun.take().map(|l| self.routed_unit(UnitKind::Rerun, l, want));
            let commands = match units.prepared[unit].take() {
                Some(commands) => commands,
                None => self.routed_unit(UnitKind::Layer, unit, want),
            };
            let submit = || self.ctx.queue.submit(again.into_iter().chain([commands]));
            units.copied[unit] = Some(timed(&mut self.stats.submit_time, submit));
        }
        end
    }

    /// Route-ahead unit `unit`'s commands (see [`Engine::route_ahead_step`]): a layer's, whole or run again,
    /// from the stock when it holds one, else recorded here; the head's (unit `layers`, `kind` ignored),
    /// recorded here for `want`.
    fn routed_unit(&mut self, kind: UnitKind, unit: usize, want: Want) -> wgpu::CommandBuffer {
        let shape = self.head_shape(1);
        let (device, graph, s) = (&self.ctx.device, &self.graphs[&1], &self.scratch);
        let (buffers, stock) = self.route_units.as_ref().expect("route_ahead_step starts the stock");
        if unit == graph.layers.len() {
            return timed(&mut self.stats.record_time, || {
                let mut enc = device.create_command_encoder(&Default::default());
                record_head(&mut enc, graph, s, want, shape, 0);
                enc.finish()
            });
        }
        if let Some(commands) = stock.as_ref().and_then(|stock| stock.take(kind, unit)) {
            self.stats.units_recorded_ahead += 1;
            return commands;
        }
        timed(&mut self.stats.record_time, || buffers.commands(device, graph, kind, unit))
    }

    /// Writes the route table again where the pool changed since it was last written.
    fn sync_route_table(&mut self) {
        let Some((buffer, written)) = &mut self.route_table else { return };
        let experts = self.config.expert_count;
        let len = (self.config.block_count * experts) as usize;
        let table = self.tiers.pool.inspect(|core| {
            let mut table = vec![ABSENT_SLOT; len];
            for (slot, view) in core.snapshot().0.iter().enumerate() {
                if let SlotView::Ready { key, .. } = view {
                    table[(key.layer * experts + key.expert) as usize] = slot as u32;
                }
            }
            table
        });
        if table != *written {
            self.ctx.queue.write_buffer(buffer, 0, bytemuck::cast_slice(&table));
            *written = table;
        }
    }
}

/// A route-ahead step's units (its layers, then the head at index `layers`).
struct RoutedUnits {
    /// The submission that last copied each unit's picks out (the head's: its output).
    copied: Vec<Option<wgpu::SubmissionIndex>>,
    /// Units recorded ahead of their submission ([`Engine::prepare_routed`]).
    prepared: Vec<Option<wgpu::CommandBuffer>>,
    /// The experts each unit last read back picked and the route table lacked ([`MissGuesses`]).
    lacked: Vec<Vec<ExpertKey>>,
}

impl RoutedUnits {
    fn new(layers: usize) -> Self {
        RoutedUnits {
            copied: vec![None; layers + 1],
            prepared: (0..=layers).map(|_| None).collect(),
            lacked: vec![Vec::new(); layers],
        }
    }
}

/// Hands a [`SpeculativeReads`] the experts that route-ahead units (those queued already, nearest first)
/// picked and the route table lacked, one unit's readback a step while a layer's loads run. They ran on a
/// state without the missing experts of the layer before, so most of their picks stand once it runs again.
/// Each step hands every unit's latest known misses at once (a unit not read back yet this layer keeps
/// those of its last readback), so the nearest reads start while the farther units still run, and a
/// step cut short by the loads drops no guess still likely.
struct MissGuesses<'a> {
    device: &'a wgpu::Device,
    s: &'a Scratch,
    copied: &'a [Option<wgpu::SubmissionIndex>],
    lacked: &'a mut [Vec<ExpertKey>],
    /// The units to guess for (layers only, not the head); `next` the next to read back.
    units: std::ops::Range<usize>,
    next: usize,
    k: usize,
    spec: &'a SpeculativeReads,
}

impl MissGuesses<'_> {
    /// Reads the next queued unit's picks back (waiting for the GPU to run it; the wait overlaps the
    /// loads) and hands the guesses. Returns whether a unit is left.
    fn step(&mut self) -> Result<bool> {
        let queued = self.units.contains(&self.next).then(|| self.copied[self.next].clone()).flatten();
        if let Some(submission) = queued {
            let mut overlapped = Duration::ZERO;
            let rb = &self.s.route_readback[self.next];
            let k = self.k;
            let read =
                readback(self.device, rb, 8 * k as u64, Some(submission), Duration::ZERO, &mut overlapped)?;
            let (picks, found) = read.split_at(k);
            let lacked = picks.iter().zip(found).filter(|&(_, &slot)| slot == ABSENT_SLOT);
            let unit = self.next as u32;
            self.lacked[self.next] = lacked.map(|(&expert, _)| ExpertKey::new(unit, expert)).collect();
            self.next += 1;
        } else {
            self.next = self.units.end;
        }
        self.spec.guess(&self.lacked[self.units.clone()].concat());
        Ok(self.next < self.units.end)
    }
}
