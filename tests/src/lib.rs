//! Shared fixtures for flagstream's integration tests: the data-driven
//! evaluation case format (`case`), a real relay process (`relay`) and a
//! raw protocol subscriber (`subscriber`), a TCP fault proxy (`proxy`), and
//! the pinned Python packages some tests run (`python`).

pub mod case;
pub mod cluster;
pub mod fault;
pub mod inbound;
pub mod postgres;
pub mod proxy;
pub mod python;
pub mod relay;
pub mod subscriber;

/// A generous timeout for one step of a test on a busy 2-core machine.
pub const STEP: std::time::Duration = std::time::Duration::from_secs(20);
