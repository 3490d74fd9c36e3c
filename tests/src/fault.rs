//! The fault and load scenarios of docs/RESILIENCE.md, shared by the
//! CI-size tests (`tests/tests/fault/fault_*.rs`, which assert the behaviour) and
//! the full-size command (`resilience`, which prints the figures). Every
//! scenario runs real relay processes on loopback, real SDK clients and the
//! fault proxy; each returns a report of what it measured.

pub mod large;
pub mod ping;
pub mod probe;
pub mod redis;
pub mod restart;
pub mod slow;
pub mod stall;
pub mod storm;

use std::time::Duration;

/// Waits for a change to `flag` on `client` (or panics after `limit`).
pub async fn wait_change(
    changes: &mut tokio::sync::broadcast::Receiver<flagstream::Change>,
    flag: &str,
    limit: Duration,
) {
    let wait = async {
        loop {
            match changes.recv().await {
                Ok(c) if c.flags.iter().any(|f| f == flag) => return,
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(e) => panic!("change stream ended: {e}"),
            }
        }
    };
    tokio::time::timeout(limit, wait)
        .await
        .unwrap_or_else(|_| panic!("{flag} never changed within {limit:?}"));
}

/// Waits until `f` holds, checking every 100 ms (or panics after `limit`,
/// naming `what`).
pub async fn until<F, Fut>(what: &str, limit: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out after {limit:?} waiting for: {what}");
        // Polls a condition only observable from outside (a metric, a
        // process): each check is an event; the limit is a failure guard.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `ms` with one decimal.
pub fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1e3)
}
