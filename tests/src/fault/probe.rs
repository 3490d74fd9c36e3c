//! An evaluation probe: a dedicated thread evaluating known flags in a
//! loop while a scenario breaks things, timing every call and counting
//! every answer that was the caller's default.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use flagstream::{Client, Context};
use hdrhistogram::Histogram;

/// What the probe saw.
#[derive(Debug, Clone)]
pub struct EvalReport {
    /// Evaluations made.
    pub evaluations: u64,
    /// Evaluations of a known flag that returned the caller's default.
    pub defaults: u64,
    /// Median latency of one evaluation (ns, timer overhead included).
    pub p50_ns: u64,
    /// 99th percentile (ns).
    pub p99_ns: u64,
    /// 99.99th percentile (ns).
    pub p9999_ns: u64,
    /// Slowest (ns).
    pub max_ns: u64,
}

/// A running probe.
#[derive(Debug)]
pub struct EvalProbe {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<(Histogram<u64>, u64)>,
}

impl EvalProbe {
    /// Starts evaluating `flags` (boolean flags that are on for everyone)
    /// on `client`, round robin, with the default `false`.
    pub fn start(client: Client, flags: Vec<String>) -> EvalProbe {
        assert!(!flags.is_empty(), "the probe needs flags");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let ctx = Context::new("probe-user");
            let mut h = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds");
            let mut defaults = 0u64;
            let mut i = 0usize;
            while !flag.load(Ordering::Relaxed) {
                let key = &flags[i % flags.len()];
                i += 1;
                let t = Instant::now();
                let on = client.bool(key, &ctx, false);
                let ns = t.elapsed().as_nanos() as u64;
                h.saturating_record(ns.max(1));
                defaults += u64::from(!on);
                // Let the SDK's own tasks have the other core's share.
                if i.is_multiple_of(4096) {
                    std::thread::yield_now();
                }
            }
            (h, defaults)
        });
        EvalProbe { stop, thread }
    }

    /// Stops the probe and reports.
    pub fn finish(self) -> EvalReport {
        self.stop.store(true, Ordering::Relaxed);
        let (h, defaults) = self.thread.join().expect("probe thread");
        EvalReport {
            evaluations: h.len(),
            defaults,
            p50_ns: h.value_at_quantile(0.5),
            p99_ns: h.value_at_quantile(0.99),
            p9999_ns: h.value_at_quantile(0.9999),
            max_ns: h.max(),
        }
    }
}
