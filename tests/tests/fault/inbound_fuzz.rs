//! Scenario 8 of docs/RESILIENCE.md, in process: the fuzz targets'
//! bodies (`flagstream_tests::inbound`, also built by `tests/fuzz/` for
//! libFuzzer) run on arbitrary bytes and on mutations of valid inputs
//! (every flag set of the evaluation suite, encoded as each target reads
//! it). No input may panic, and none may make a target hold more than
//! 64 MiB at once (a guard on this thread's live heap bytes).
#![allow(unsafe_code)] // the heap-watching allocator below, nothing else

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use flagstream_tests::inbound::{TARGETS, seeds};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

thread_local! {
    /// Heap bytes this thread holds now and at its peak since `watch` began.
    static LIVE: Cell<i64> = const { Cell::new(0) };
    static PEAK: Cell<i64> = const { Cell::new(0) };
}

fn grew(by: i64) {
    LIVE.with(|l| {
        let now = l.get() + by;
        l.set(now);
        PEAK.with(|p| p.set(p.get().max(now)));
    });
}

struct Watching;

// SAFETY: forwards every call unchanged to the system allocator; the only
// addition is arithmetic on const-initialised thread-locals, which cannot
// allocate or fail.
unsafe impl GlobalAlloc for Watching {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as i64);
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        grew(-(layout.size() as i64));
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as i64 - layout.size() as i64);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Watching = Watching;

/// Most heap bytes a target may hold at once for an input of a few KiB.
const HEAP_BOUND: i64 = 64 << 20;

/// Runs `f`, returning the most heap bytes it held at once.
fn peak_heap(f: impl FnOnce()) -> i64 {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    f();
    PEAK.with(Cell::get) - start
}

fn check(name: &str, target: fn(&[u8]) -> bool, input: &[u8]) -> Result<(), TestCaseError> {
    let held = peak_heap(|| {
        std::hint::black_box(target(input));
    });
    prop_assert!(held < HEAP_BOUND, "{name}: {held} heap bytes held for a {}-byte input", input.len());
    Ok(())
}

/// A valid input changed at a few places: bytes flipped, a cut, a splice.
fn mutated(seeds: Vec<Vec<u8>>) -> impl Strategy<Value = Vec<u8>> {
    let n = seeds.len();
    (0..n, prop::collection::vec((any::<prop::sample::Index>(), any::<u8>(), 0u8..4), 1..8)).prop_map(
        move |(i, edits)| {
            let mut b = seeds[i].clone();
            for (at, byte, how) in edits {
                if b.is_empty() {
                    b.push(byte);
                    continue;
                }
                let at = at.index(b.len());
                match how {
                    0 => b[at] ^= byte | 1,
                    1 => b.truncate(at),
                    2 => b.insert(at, byte),
                    _ => {
                        // A length-like varint where a byte was: big sizes.
                        b.splice(at..at, [0xff, 0xff, 0xff, 0x7f]);
                    }
                }
            }
            b
        },
    )
}

/// Every target accepts its own seeds (so the mutations start from inputs
/// that reach deep), then survives arbitrary bytes and mutated seeds.
#[test]
fn every_inbound_target_survives_arbitrary_and_mutated_input() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    for &(name, target) in TARGETS {
        let seeds = seeds(name);
        assert!(!seeds.is_empty(), "{name}: no seeds");
        for s in &seeds {
            assert!(target(s), "{name}: a valid seed was refused");
        }
        let mut runner =
            TestRunner::new(Config { cases: 256, failure_persistence: None, ..Config::default() });
        runner
            .run(&prop::collection::vec(any::<u8>(), 0..4096), |input| check(name, target, &input))
            .unwrap_or_else(|e| panic!("{name}, arbitrary bytes: {e}"));
        let mut runner =
            TestRunner::new(Config { cases: 512, failure_persistence: None, ..Config::default() });
        runner
            .run(&mutated(seeds), |input| check(name, target, &input))
            .unwrap_or_else(|e| panic!("{name}, mutated seeds: {e}"));
    }
}

/// The heap guard sees what a target holds (so the bound above can fail).
#[test]
fn the_heap_guard_sees_a_large_allocation() {
    // Alone in this binary: see `flagstream_tests::serial`.
    let _serial = flagstream_tests::serial();
    let held = peak_heap(|| {
        let v = vec![1u8; 80 << 20];
        std::hint::black_box(&v);
    });
    assert!(held >= HEAP_BOUND, "{held}");
}
