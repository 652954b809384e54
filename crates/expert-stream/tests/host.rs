//! The host tier over a real store: every record it hands out is the store's, through misses, evictions and
//! parallel reads; a record that cannot be read is reported by name and read again on the next call.

mod common;

use std::sync::Arc;

use common::gpu::{TempDir, store};
use diskformer_expert_stream::{Error, ExpertKey, HostRecords};
use diskformer_store::{RecordBuf, RecordReader};

fn record(reader: &RecordReader, key: ExpertKey) -> Vec<u8> {
    let mut buf = RecordBuf::new(reader.layout().record_bytes as usize);
    reader.read(key, &mut buf).unwrap();
    buf.as_slice()[..reader.layout().record_bytes as usize].to_vec()
}

#[test]
fn records_are_the_stores_through_misses_and_evictions() {
    let dir = TempDir::new("host");
    let store = store(dir.path(), 2, 8, 64, 32, 11);
    let check = store.record_reader(false).unwrap();
    let record_bytes = check.layout().record_bytes;
    for readers in [1, 3] {
        let reader = Arc::new(store.record_reader(true).unwrap());
        // Five records' room for calls of up to four.
        let mut host = HostRecords::new(reader, 5 * record_bytes + 100, 4, readers).unwrap();
        assert_eq!(host.capacity(), 5);
        let calls: [&[(u32, u32)]; 5] =
            [&[(0, 1), (0, 5), (0, 2)], &[(1, 7), (1, 1)], &[(0, 5), (0, 6)], &[(1, 0), (0, 1)], &[(0, 5)]];
        let mut asked = 0;
        for call in calls {
            let keys: Vec<ExpertKey> = call.iter().map(|&(l, e)| ExpertKey::new(l, e)).collect();
            let slots = host.ensure(&keys).unwrap();
            for (key, slot) in keys.iter().zip(slots) {
                assert_eq!(host.record(slot), record(&check, *key), "{key}, {readers} readers");
            }
            asked += keys.len() as u64;
        }
        let stats = host.stats();
        // Misses: 3, 2, 1 (0.6), 2 (1.0 and 0.1, evicted by then), 0 (0.5 was used at the third call).
        assert_eq!((stats.reads, stats.hits), (8, asked - 8), "{readers} readers");
        assert_eq!(stats.bytes, 8 * record_bytes);
    }
}

#[test]
fn a_record_that_cannot_be_read_is_named_and_read_again_next_time() {
    let dir = TempDir::new("host-short");
    let store = store(dir.path(), 2, 8, 64, 32, 12);
    let reader = Arc::new(store.record_reader(false).unwrap());
    let record_bytes = reader.layout().record_bytes;
    let mut host = HostRecords::new(Arc::clone(&reader), 4 * record_bytes, 2, 2).unwrap();
    // The file loses its last layer after the tier opened.
    let experts = store.experts_path();
    std::fs::OpenOptions::new().write(true).open(&experts).unwrap().set_len(8 * record_bytes).unwrap();
    let (good, lost) = (ExpertKey::new(0, 3), ExpertKey::new(1, 4));
    for _ in 0..2 {
        match host.ensure(&[good, lost]) {
            Err(Error::Read { key, .. }) => assert_eq!(key, lost),
            other => panic!("expected a read error naming {lost}, got {other:?}"),
        }
    }
    let slots = host.ensure(&[good]).unwrap();
    assert_eq!(host.record(slots[0]), record(&reader, good));
    // The good record was read by the first call and held since.
    assert_eq!(host.stats().hits, 2);
}

#[test]
fn a_budget_under_a_layers_picks_is_refused_with_the_numbers() {
    let dir = TempDir::new("host-budget");
    let store = store(dir.path(), 1, 8, 64, 32, 13);
    let reader = Arc::new(store.record_reader(false).unwrap());
    let record_bytes = reader.layout().record_bytes;
    let err = HostRecords::new(reader, 3 * record_bytes, 4, 1).unwrap_err();
    assert!(matches!(err, Error::HostBudget { .. }), "{err:?}");
    assert!(err.to_string().contains("holds 3 records"), "{err}");
}

/// A slot whose buffer was handed off is read into a new buffer: the handed bytes stay the record they were.
#[test]
fn a_handed_off_buffer_keeps_its_record_when_the_slot_is_reused() {
    let dir = TempDir::new("host-shared");
    let store = store(dir.path(), 1, 8, 64, 32, 14);
    let reader = Arc::new(store.record_reader(false).unwrap());
    let record_bytes = reader.layout().record_bytes;
    let mut host = HostRecords::new(Arc::clone(&reader), record_bytes, 1, 1).unwrap();
    let (a, b) = (ExpertKey::new(0, 1), ExpertKey::new(0, 2));
    let slot = host.ensure(&[a]).unwrap()[0];
    let handed = Arc::clone(host.shared(slot));
    assert_eq!(host.ensure(&[b]).unwrap(), vec![slot], "one slot, reused");
    assert_eq!(host.record(slot), record(&reader, b));
    assert_eq!(&handed.as_slice()[..record_bytes as usize], record(&reader, a));
}
