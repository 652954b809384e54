//! Record buffers give their memory back when they drop, whatever the allocator did before: the host tier
//! makes thousands of them on one thread and frees them on others, between other allocations that live on.
//! (From glibc's malloc, once a block it had mapped was freed, buffers this size came out of its arenas and
//! stayed resident after an engine closed.) Its own process (an integration test), so that no other test's
//! memory moves the count.
#![cfg(target_os = "linux")]

use diskformer_store::RecordBuf;

/// Resident memory of this process, bytes.
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|v| v.parse().ok()).expect("resident pages");
    pages * 4096
}

#[test]
fn dropped_record_buffers_leave_no_resident_memory_behind() {
    const RECORD: usize = 2_600_000; // a Q4_K_M Qwen3-30B-A3B record
    const COUNT: usize = 100;
    // A freed mapped block larger than a record: glibc now serves record-sized requests from its arenas.
    drop(std::hint::black_box(vec![1u8; 16 << 20]));
    let before = resident_bytes();
    let (tx, rx) = std::sync::mpsc::sync_channel(16);
    let maker = std::thread::spawn(move || {
        // Small allocations that outlive the buffers, made between them, as an engine's are.
        let mut pinned = Vec::new();
        for _ in 0..COUNT {
            pinned.push(std::hint::black_box(Box::new([7u8; 256])));
            tx.send(RecordBuf::new(RECORD)).expect("receiver alive");
        }
        pinned
    });
    let buffers: Vec<RecordBuf> = rx.iter().collect();
    let pinned = maker.join().expect("maker thread");
    assert!(buffers.iter().all(|b| b.as_slice().iter().step_by(4096).all(|&x| x == 0)), "zeroed buffers");
    let holding = resident_bytes();
    assert!(holding >= before + (COUNT * RECORD) as u64 / 2, "buffers resident: {before} -> {holding} bytes");
    drop(buffers);
    let after = resident_bytes();
    assert!(
        after < before + (32 << 20),
        "{} MB still resident after {COUNT} record buffers ({} MB) dropped",
        (after.saturating_sub(before)) >> 20,
        (COUNT * RECORD) >> 20
    );
    drop(pinned);
}
