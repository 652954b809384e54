//! A one-token step's layer units, recorded ahead on a thread of their own: route-ahead's, and the CPU
//! tier's.
//!
//! A one-token step with route-ahead submits each layer as its own unit, and when a layer lacked an expert
//! runs it again and queues the layers after it once more: on the H200 at 4 GB about 25 times a token,
//! each queueing up to the window's 8 layers, at 60-70 µs of recording a layer, in series with the host's
//! checks and the reads. With the CPU tier the stepping thread recorded each layer's GPU commands while the
//! host computed its experts, which bounded that window once the host's kernels got faster (an H100's
//! host: 14 of a calibrated token's 19 ms in the tier). A unit depends on its layer alone (the slots come
//! from the GPU's route table or from buffers written before the submit, as do the token and position),
//! so a thread keeps a few of each recorded and the host only submits them. The host records a unit
//! itself when the stock has none.

use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;

use crate::graph::{Graph, Scratch, record};

/// What a route-ahead layer unit copies between: a step's scratch buffers, shared with the stock's thread.
#[derive(Clone, Debug)]
pub(crate) struct UnitBuffers {
    x: wgpu::Buffer,
    routed_x: wgpu::Buffer,
    pick_ids: wgpu::Buffer,
    slot_idx: Vec<wgpu::Buffer>,
    route_readback: Vec<wgpu::Buffer>,
    /// Bytes of one residual-stream row.
    x_bytes: u64,
    /// Picks a token.
    k: u64,
}

impl UnitBuffers {
    pub fn new(s: &Scratch, hidden: u32, k: u32) -> Self {
        UnitBuffers {
            x: s.x.clone(),
            routed_x: s.routed_x.clone(),
            pick_ids: s.pick_ids.clone(),
            slot_idx: s.slot_idx.clone(),
            route_readback: s.route_readback.clone(),
            x_bytes: 4 * u64::from(hidden),
            k: u64::from(k),
        }
    }

    /// A `kind` unit of layer `l`, recorded.
    pub fn commands(
        &self,
        device: &wgpu::Device,
        graph: &Graph,
        kind: UnitKind,
        l: usize,
    ) -> wgpu::CommandBuffer {
        let mut enc = device.create_command_encoder(&Default::default());
        match kind {
            UnitKind::Layer => self.record_layer(&mut enc, graph, l),
            UnitKind::Rerun => self.record_rerun(&mut enc, graph, l),
            UnitKind::TierHits | UnitKind::TierJoin => unreachable!("the CPU tier's units are the engine's"),
        }
        enc.finish()
    }

    /// Records layer `l` again from its router on the residual stream its first run saved, then its
    /// experts.
    fn record_rerun(&self, enc: &mut wgpu::CommandEncoder, graph: &Graph, l: usize) {
        let lg = &graph.layers[l];
        let from = lg.router_from.expect("route-ahead runs the fused decode layer");
        enc.copy_buffer_to_buffer(&self.routed_x, l as u64 * self.x_bytes, &self.x, 0, self.x_bytes);
        record(enc, &lg.attention[from..]);
        record(enc, &lg.guesses);
        record(enc, &lg.experts);
    }

    /// Records layer `l` whole, saving the residual stream its router reads and copying its picks and
    /// slots out for the host.
    fn record_layer(&self, enc: &mut wgpu::CommandEncoder, graph: &Graph, l: usize) {
        let lg = &graph.layers[l];
        let (rb, k) = (&self.route_readback[l], self.k);
        record(enc, &lg.attention);
        record(enc, &lg.guesses);
        enc.copy_buffer_to_buffer(&self.x, 0, &self.routed_x, l as u64 * self.x_bytes, self.x_bytes);
        enc.copy_buffer_to_buffer(&self.pick_ids, 0, rb, 0, 4 * k);
        enc.copy_buffer_to_buffer(&self.slot_idx[l], 0, rb, 4 * k, 4 * k);
        record(enc, &lg.experts);
    }
}

/// Which recording of a layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum UnitKind {
    /// Route-ahead: the layer whole ([`UnitBuffers::record_layer`]).
    Layer,
    /// Route-ahead: the layer again from its router ([`UnitBuffers::record_rerun`]).
    Rerun,
    /// The CPU tier: the GPU's picks up to where the host's sum joins (`experts[..at]`).
    TierHits,
    /// The CPU tier: the join, the rest of the layer's experts, and the next layer's attention and router
    /// with the copies the host reads back (the last layer: no next).
    TierJoin,
}

/// Route-ahead's units and how many of each a stock keeps: 3 of each layer whole, 1 of each run again (a
/// layer runs again at most once a token; a layer whole is queued again after each miss in the window
/// before it, often twice within a layer's loads).
pub(crate) const ROUTE_AHEAD_UNITS: &[(UnitKind, usize)] = &[(UnitKind::Layer, 3), (UnitKind::Rerun, 1)];

/// The CPU tier's units, 2 of each (a layer takes one of each a token).
pub(crate) const TIER_UNITS: &[(UnitKind, usize)] = &[(UnitKind::TierHits, 2), (UnitKind::TierJoin, 2)];

/// Layer units kept recorded by a thread, of the kinds and depths it was started with. `U`: a recorded
/// unit (the engine's are command buffers).
pub(crate) struct UnitStock<U: Send + 'static> {
    shared: Arc<Shared<U>>,
    thread: Option<JoinHandle<()>>,
}

struct Shared<U> {
    state: Mutex<State<U>>,
    /// Signalled to refill, or to stop.
    taken: Condvar,
}

struct State<U> {
    /// The kinds kept and their depths, in the order a layer's are recorded.
    kinds: &'static [(UnitKind, usize)],
    /// Per kind (in `kinds`' order), per layer, the units recorded.
    units: Vec<Vec<Vec<U>>>,
    /// The layer last taken: refills start there, where the host is.
    near: usize,
    stop: bool,
}

impl<U> State<U> {
    fn new(layers: usize, kinds: &'static [(UnitKind, usize)]) -> Self {
        let units = kinds.iter().map(|_| (0..layers).map(|_| Vec::new()).collect()).collect();
        State { kinds, units, near: 0, stop: false }
    }

    /// The next unit to record: the first short one from `near` on, round the layers (a layer's kinds in
    /// the order given).
    fn next_short(&self) -> Option<(UnitKind, usize)> {
        let layers = self.units.first().map_or(0, Vec::len);
        (0..layers).map(|i| (self.near + i) % layers).find_map(|l| {
            (self.kinds.iter().zip(&self.units))
                .find(|((_, depth), units)| units[l].len() < *depth)
                .map(|((kind, _), _)| (*kind, l))
        })
    }

    /// The units of `kind` by layer. The stock keeps every kind it is asked for (see [`UnitStock::start`]).
    fn units(&mut self, kind: UnitKind) -> &mut Vec<Vec<U>> {
        let i = self.kinds.iter().position(|(k, _)| *k == kind).expect("a kind this stock keeps");
        &mut self.units[i]
    }
}

impl<U: Send + 'static> UnitStock<U> {
    /// Starts the thread that keeps the stock of `layers` layers' units of `kinds` (each with how many of
    /// it to keep), made by `record`.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(
        layers: usize,
        kinds: &'static [(UnitKind, usize)],
        mut record: impl FnMut(UnitKind, usize) -> U + Send + 'static,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { state: Mutex::new(State::new(layers, kinds)), taken: Condvar::new() });
        let thread = std::thread::Builder::new().name("layer units".into()).spawn({
            let shared = shared.clone();
            move || {
                let mut state = lock(&shared.state);
                while !state.stop {
                    match state.next_short() {
                        Some((kind, l)) => {
                            drop(state);
                            let unit = record(kind, l);
                            state = lock(&shared.state);
                            state.units(kind)[l].push(unit);
                        }
                        None => state = shared.taken.wait(state).unwrap_or_else(PoisonError::into_inner),
                    }
                }
            }
        })?;
        Ok(UnitStock { shared, thread: Some(thread) })
    }

    /// A recorded `kind` unit of layer `l`, if the stock has one (`kind` one it keeps). The thread records
    /// its replacement at the next [`UnitStock::refill`].
    pub fn take(&self, kind: UnitKind, l: usize) -> Option<U> {
        let mut state = lock(&self.shared.state);
        state.near = l;
        state.units(kind)[l].pop()
    }

    /// Lets the thread record what was taken: the host calls it before it waits (for the GPU or the
    /// disk), so that the recording does not compete with its submits.
    pub fn refill(&self) {
        self.shared.taken.notify_one();
    }
}

impl<U: Send + 'static> Drop for UnitStock<U> {
    fn drop(&mut self) {
        lock(&self.shared.state).stop = true;
        self.shared.taken.notify_one();
        if let Some(thread) = self.thread.take() {
            // A panic there (a wgpu validation error) has already been reported; nothing is left to undo.
            let _ = thread.join();
        }
    }
}

/// The stock's lock; a poisoned one still holds whole units (each is pushed or popped in one step).
fn lock<U>(state: &Mutex<State<U>>) -> MutexGuard<'_, State<U>> {
    state.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;

    #[test]
    fn refills_start_where_the_host_took_last_and_wrap() {
        let mut st: State<u32> = State::new(4, ROUTE_AHEAD_UNITS);
        let (layer_depth, rerun_depth) = (ROUTE_AHEAD_UNITS[0].1, ROUTE_AHEAD_UNITS[1].1);
        assert_eq!(st.next_short(), Some((UnitKind::Layer, 0)));
        st.near = 2;
        assert_eq!(st.next_short(), Some((UnitKind::Layer, 2)));
        st.units(UnitKind::Layer)[2] = vec![0; layer_depth];
        assert_eq!(st.next_short(), Some((UnitKind::Rerun, 2)));
        st.units(UnitKind::Rerun)[2] = vec![0; rerun_depth];
        st.units(UnitKind::Layer)[3] = vec![0; layer_depth];
        st.units(UnitKind::Rerun)[3] = vec![0; rerun_depth];
        assert_eq!(st.next_short(), Some((UnitKind::Layer, 0)), "past the last layer: the first");
        for l in 0..4 {
            st.units(UnitKind::Layer)[l] = vec![0; layer_depth];
            st.units(UnitKind::Rerun)[l] = vec![0; rerun_depth];
        }
        assert_eq!(st.next_short(), None);
        // The CPU tier's kinds, in their order.
        let mut tier: State<u32> = State::new(2, TIER_UNITS);
        assert_eq!(tier.next_short(), Some((UnitKind::TierHits, 0)));
        tier.units(UnitKind::TierHits)[0] = vec![0; TIER_UNITS[0].1];
        assert_eq!(tier.next_short(), Some((UnitKind::TierJoin, 0)));
    }

    /// Takes `kind` of layer `l`, waiting for the thread to record it (failing past a deadline rather than
    /// hanging).
    fn take_when_ready(
        stock: &UnitStock<(UnitKind, usize, u32)>,
        kind: UnitKind,
        l: usize,
    ) -> (UnitKind, usize, u32) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(unit) = stock.take(kind, l) {
                return unit;
            }
            stock.refill();
            assert!(Instant::now() < deadline, "the stock never recorded {kind:?} {l}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    #[test]
    fn the_thread_records_each_layers_units_and_refills_what_is_taken() {
        let mut made = 0;
        let stock = UnitStock::start(5, ROUTE_AHEAD_UNITS, move |kind, l| {
            made += 1;
            (kind, l, made)
        })
        .unwrap();
        // Each unit taken is the one asked for, and more than the stock holds can be taken: it refills.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..ROUTE_AHEAD_UNITS[0].1 + 2 {
            let (kind, l, n) = take_when_ready(&stock, UnitKind::Layer, 3);
            assert_eq!((kind, l), (UnitKind::Layer, 3));
            assert!(seen.insert(n), "unit {n} taken twice");
        }
        let (kind, l, _) = take_when_ready(&stock, UnitKind::Rerun, 4);
        assert_eq!((kind, l), (UnitKind::Rerun, 4));
        // Dropping stops and joins the thread, waiting or not.
        drop(stock);
    }
}
