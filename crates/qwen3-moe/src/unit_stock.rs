//! Route-ahead's layer units, recorded ahead on a thread of their own.
//!
//! A one-token step with route-ahead submits each layer as its own unit, and when a layer lacked an expert
//! runs it again and queues the layers after it once more: on the H200 at 4 GB about 25 times a token,
//! each queueing up to the window's 8 layers, at 60-70 µs of recording a layer, in series with the host's
//! checks and the reads. A unit depends on its layer alone (the slots come from the GPU's route table, the
//! token and position from buffers written before the submit), so a thread keeps a few of each recorded
//! and the host only submits them. The host records a unit itself when the stock has none.

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
    /// The layer whole ([`UnitBuffers::record_layer`]).
    Layer,
    /// The layer again from its router ([`UnitBuffers::record_rerun`]).
    Rerun,
}

/// Layer units kept recorded by a thread: [`LAYER_DEPTH`] of each layer whole, [`RERUN_DEPTH`] of each
/// run again (a layer runs again at most once a token; a layer whole is queued again after each miss in
/// the window before it, often twice within a layer's loads). `U`: a recorded unit (the engine's are
/// command buffers).
pub(crate) struct UnitStock<U: Send + 'static> {
    shared: Arc<Shared<U>>,
    thread: Option<JoinHandle<()>>,
}

const LAYER_DEPTH: usize = 3;
const RERUN_DEPTH: usize = 1;

struct Shared<U> {
    state: Mutex<State<U>>,
    /// Signalled to refill, or to stop.
    taken: Condvar,
}

struct State<U> {
    layer: Vec<Vec<U>>,
    rerun: Vec<Vec<U>>,
    /// The layer last taken: refills start there, where the host is.
    near: usize,
    stop: bool,
}

impl<U> State<U> {
    fn new(layers: usize) -> Self {
        State {
            layer: (0..layers).map(|_| Vec::new()).collect(),
            rerun: (0..layers).map(|_| Vec::new()).collect(),
            near: 0,
            stop: false,
        }
    }

    /// The next unit to record: the first short one from `near` on, round the layers (a layer whole
    /// before its run again).
    fn next_short(&self) -> Option<(UnitKind, usize)> {
        let layers = self.layer.len();
        (0..layers).map(|i| (self.near + i) % layers).find_map(|l| {
            if self.layer[l].len() < LAYER_DEPTH {
                Some((UnitKind::Layer, l))
            } else if self.rerun[l].len() < RERUN_DEPTH {
                Some((UnitKind::Rerun, l))
            } else {
                None
            }
        })
    }

    fn units(&mut self, kind: UnitKind) -> &mut Vec<Vec<U>> {
        match kind {
            UnitKind::Layer => &mut self.layer,
            UnitKind::Rerun => &mut self.rerun,
        }
    }
}

impl<U: Send + 'static> UnitStock<U> {
    /// Starts the thread that keeps the stock of `layers` layers' units, made by `record`.
    ///
    /// # Errors
    /// The thread could not be spawned.
    pub fn start(
        layers: usize,
        mut record: impl FnMut(UnitKind, usize) -> U + Send + 'static,
    ) -> std::io::Result<Self> {
        let shared = Arc::new(Shared { state: Mutex::new(State::new(layers)), taken: Condvar::new() });
        let thread = std::thread::Builder::new().name("route-ahead units".into()).spawn({
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

    /// A recorded `kind` unit of layer `l`, if the stock has one. The thread records its replacement at
    /// the next [`UnitStock::refill`].
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
        let mut st: State<u32> = State::new(4);
        assert_eq!(st.next_short(), Some((UnitKind::Layer, 0)));
        st.near = 2;
        assert_eq!(st.next_short(), Some((UnitKind::Layer, 2)));
        st.layer[2] = vec![0; LAYER_DEPTH];
        assert_eq!(st.next_short(), Some((UnitKind::Rerun, 2)));
        st.rerun[2] = vec![0; RERUN_DEPTH];
        st.layer[3] = vec![0; LAYER_DEPTH];
        st.rerun[3] = vec![0; RERUN_DEPTH];
        assert_eq!(st.next_short(), Some((UnitKind::Layer, 0)), "past the last layer: the first");
        for l in 0..4 {
            st.layer[l] = vec![0; LAYER_DEPTH];
            st.rerun[l] = vec![0; RERUN_DEPTH];
        }
        assert_eq!(st.next_short(), None);
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
        let stock = UnitStock::start(5, move |kind, l| {
            made += 1;
            (kind, l, made)
        })
        .unwrap();
        // Each unit taken is the one asked for, and more than the stock holds can be taken: it refills.
        let mut seen = std::collections::HashSet::new();
        for _ in 0..LAYER_DEPTH + 2 {
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
