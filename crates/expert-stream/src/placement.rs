//! Split residency: every record within the expert kernels' reach, the hottest in the device's slots and the
//! rest in the pool's arena in host memory, which the kernels read over the bus (`GpuPool::with_arena`).
//! Nothing waits for a load: a pick the device lacks is read where it lies, and the step driver stays the
//! resident one (routing on the GPU, no readback between layers).
//!
//! [`Placement`] keeps which record each device slot holds and the slot table the kernels look picks up
//! in, counts each pick's heat, and now and then chooses [`Move`]s: the hottest records outside the device
//! into the slots of the coldest inside, a few at a time, each only where it is hotter by a margin (so that
//! two records of equal heat do not trade places back and forth). The caller copies each move's record
//! from the arena into its device slot and writes the new table, both ordered after the work already
//! submitted (which reads the old ones) and before the work after.

use crate::Slot;

/// How [`Placement`] keeps heat and moves records.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlacementConfig {
    /// Each [`Placement::rebalance`] multiplies every record's heat by this (0 < decay ≤ 1).
    pub decay: f32,
    /// A record moves onto the device only where its heat exceeds the evicted one's by this much.
    pub margin: f32,
    /// The most records one [`Placement::rebalance`] moves (a chunk's rebalance may move more:
    /// [`Placement::rebalance_up_to`]).
    pub max_moves: usize,
}

impl Default for PlacementConfig {
    /// A half-life of ~64 rebalances' heat, a margin of one pick, and 16 moves a rebalance (~46 MB of
    /// Qwen3-30B-A3B Q4_K_M records, ~1 ms of the bus at the rate the GPU reads host memory).
    fn default() -> Self {
        PlacementConfig { decay: 0.989, margin: 1.0, max_moves: 16 }
    }
}

/// A record brought onto the device by [`Placement::rebalance`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Move {
    /// The record (`layer · experts + expert`).
    pub record: u32,
    /// Its arena slot, copied from.
    pub from: Slot,
    /// The device slot it takes, copied to.
    pub to: Slot,
    /// The record that slot held, which the kernels read from the arena again after the move.
    pub evicted: u32,
}

/// Which record each device slot holds, and the slot of every record (see the module docs).
#[derive(Clone, Debug)]
pub struct Placement {
    config: PlacementConfig,
    /// The arena's first slot: record `r` lies at `arena_first + r` there.
    arena_first: u32,
    /// The record each device slot holds.
    owner: Vec<u32>,
    /// The slot each record is read from (its device slot, or its arena slot).
    table: Vec<u32>,
    heat: Vec<f32>,
}

impl Placement {
    /// A placement of `records` records over `device_slots` device slots (fewer than the records, at least
    /// one) and an arena from slot `arena_first` on (at least `device_slots`). The device starts with the
    /// records `layers` apart, `0, layers, 2 · layers, …` then `1, layers + 1, …` in record order
    /// (`layer · experts + expert`), so that every layer starts with a share of the device, until heat says
    /// otherwise.
    ///
    /// # Panics
    /// On a shape that breaks these bounds.
    pub fn new(
        layers: u32,
        experts: u32,
        device_slots: usize,
        arena_first: u32,
        config: PlacementConfig,
    ) -> Self {
        let records = layers as usize * experts as usize;
        assert!(
            (1..records).contains(&device_slots) && arena_first as usize >= device_slots,
            "{device_slots} device slots for {records} records, the arena from {arena_first}"
        );
        assert!(config.decay > 0.0 && config.decay <= 1.0 && config.margin >= 0.0, "{config:?}");
        let owner: Vec<u32> = (0..device_slots as u32).map(|s| (s % layers) * experts + s / layers).collect();
        let mut table: Vec<u32> = (0..records as u32).map(|r| arena_first + r).collect();
        for (s, &r) in owner.iter().enumerate() {
            table[r as usize] = s as u32;
        }
        Placement { config, arena_first, owner, table, heat: vec![0.0; records] }
    }

    /// The slot of every record, in record order: what the kernels look picks up in.
    pub fn table(&self) -> &[u32] {
        &self.table
    }

    /// The record each device slot holds.
    pub fn owners(&self) -> &[u32] {
        &self.owner
    }

    /// Device slots.
    pub fn device_slots(&self) -> usize {
        self.owner.len()
    }

    /// Counts the heat of picks that the kernels read from `slots` (as the table gave them), returning how
    /// many were device slots. A slot past the arena is ignored.
    pub fn note_picks(&mut self, slots: &[u32]) -> usize {
        slots.iter().filter(|&&slot| self.note(slot, 1)).count()
    }

    /// Counts `picks` picks read from `slot` (a chunk's group of pairs); returns whether it is a device
    /// slot. A slot past the arena is ignored.
    pub fn note(&mut self, slot: u32, picks: u32) -> bool {
        let on_device = (slot as usize) < self.owner.len();
        let record = if on_device { self.owner[slot as usize] } else { slot.wrapping_sub(self.arena_first) };
        if let Some(h) = self.heat.get_mut(record as usize) {
            *h += picks as f32;
        }
        on_device
    }

    /// [`Placement::rebalance_up_to`] the configured `max_moves`.
    pub fn rebalance(&mut self) -> Vec<Move> {
        self.rebalance_up_to(self.config.max_moves)
    }

    /// The moves that bring the hottest records outside the device onto it, into the slots of the coldest
    /// inside, while a record is hotter than the one it evicts by the margin (at most `max_moves`); the table
    /// changes as they say. Every heat then decays.
    pub fn rebalance_up_to(&mut self, max_moves: usize) -> Vec<Move> {
        let device = self.owner.len();
        let mut outside: Vec<u32> =
            (0..self.heat.len() as u32).filter(|&r| self.table[r as usize] as usize >= device).collect();
        let mut inside: Vec<u32> = (0..device as u32).collect();
        let n = max_moves.min(outside.len()).min(device);
        let heat = &self.heat;
        let hotter = |a: &u32, b: &u32| heat[*b as usize].total_cmp(&heat[*a as usize]).then(a.cmp(b));
        let colder = |a: &u32, b: &u32| {
            let (ra, rb) = (self.owner[*a as usize], self.owner[*b as usize]);
            heat[ra as usize].total_cmp(&heat[rb as usize]).then(a.cmp(b))
        };
        if n > 0 {
            outside.select_nth_unstable_by(n - 1, hotter);
            outside[..n].sort_unstable_by(hotter);
            inside.select_nth_unstable_by(n - 1, colder);
            inside[..n].sort_unstable_by(colder);
        }
        let mut moves = Vec::new();
        for (&record, &slot) in outside[..n].iter().zip(&inside[..n]) {
            let evicted = self.owner[slot as usize];
            if heat[record as usize] <= heat[evicted as usize] + self.config.margin {
                break;
            }
            moves.push(Move { record, from: Slot(self.arena_first + record), to: Slot(slot), evicted });
        }
        for m in &moves {
            self.owner[m.to.index()] = m.record;
            self.table[m.record as usize] = m.to.0;
            self.table[m.evicted as usize] = self.arena_first + m.evicted;
        }
        for h in &mut self.heat {
            *h *= self.config.decay;
        }
        moves
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// The table and the owners agree: each device slot's record maps to it, every other record to its
    /// arena slot, and no record is on the device twice.
    fn check(p: &Placement) {
        let mut seen = vec![false; p.table.len()];
        for (s, &r) in p.owner.iter().enumerate() {
            assert!(!std::mem::replace(&mut seen[r as usize], true), "record {r} twice on the device");
            assert_eq!(p.table[r as usize], s as u32);
        }
        for (r, &slot) in p.table.iter().enumerate() {
            if !seen[r] {
                assert_eq!(slot, p.arena_first + r as u32, "record {r}");
            }
        }
    }

    #[test]
    fn the_device_starts_with_a_share_of_every_layer() {
        let p = Placement::new(3, 4, 7, 7, PlacementConfig::default());
        check(&p);
        // Records 0, 4, 8 (expert 0 of layers 0, 1, 2), then 1, 5, 9, then 2.
        assert_eq!(p.owners(), &[0, 4, 8, 1, 5, 9, 2]);
    }

    #[test]
    fn a_hot_record_moves_in_for_the_coldest_and_back_out_when_it_cools() {
        let config = PlacementConfig { decay: 0.5, margin: 1.0, max_moves: 4 };
        let mut p = Placement::new(2, 4, 2, 10, config);
        assert_eq!(p.owners(), &[0, 4]);
        // Record 6 (layer 1, expert 2) picked three times from the arena, record 0 once from slot 0.
        assert_eq!(p.note_picks(&[16, 16, 16, 0]), 1);
        let moves = p.rebalance();
        assert_eq!(moves, vec![Move { record: 6, from: Slot(16), to: Slot(1), evicted: 4 }]);
        assert_eq!((p.table()[6], p.table()[4]), (1, 14));
        check(&p);
        // Heat within the margin moves nothing; a hotter record then takes the coldest slot (record 0's).
        p.note_picks(&[17]);
        assert!(p.rebalance().is_empty());
        p.note_picks(&[17, 17, 17]);
        let moves = p.rebalance();
        assert_eq!(moves.len(), 1);
        assert_eq!((moves[0].record, moves[0].evicted), (7, 0));
        check(&p);
    }

    proptest! {
        /// Through any picks and rebalances the table stays consistent, a rebalance moves at most
        /// `max_moves` records, each hotter than the one it evicts; and a record picked at every step ends
        /// on the device.
        #[test]
        fn the_table_stays_consistent_and_a_steady_pick_ends_on_the_device(
            layers in 1u32..4,
            experts in 2u32..9,
            device in 1usize..8,
            max_moves in 1usize..5,
            steps in prop::collection::vec(prop::collection::vec(0u32..36, 0..6), 1..40),
            steady in 0u32..36,
        ) {
            let records = layers * experts;
            prop_assume!(device < records as usize);
            let steady = steady % records;
            let config = PlacementConfig { decay: 0.9, margin: 1.0, max_moves };
            let arena_first = device as u32 + 3;
            let mut p = Placement::new(layers, experts, device, arena_first, config);
            for picks in steps.iter().chain(std::iter::repeat_n(&vec![], 30)) {
                let mut slots: Vec<u32> = picks.iter().map(|&r| p.table()[(r % records) as usize]).collect();
                slots.push(p.table()[steady as usize]);
                let on_device = p.note_picks(&slots);
                prop_assert_eq!(on_device, slots.iter().filter(|&&s| (s as usize) < device).count());
                let noted = p.heat.clone();
                let moves = p.rebalance();
                prop_assert!(moves.len() <= max_moves);
                for m in &moves {
                    prop_assert!(noted[m.record as usize] > noted[m.evicted as usize] + config.margin);
                    prop_assert_eq!(m.from.0, arena_first + m.record);
                }
                check(&p);
            }
            prop_assert!((p.table()[steady as usize] as usize) < device, "{} on {}", steady, p.table()[steady as usize]);
        }
    }
}
