//! Wall-clock time as the client records it: Unix milliseconds, for the
//! cache's write stamp and for how long ago a relay confirmed the data.

use std::time::{SystemTime, UNIX_EPOCH};

/// Unix time in ms (0 if the system clock is before 1970).
pub(crate) fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}
