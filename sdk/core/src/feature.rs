//! Evaluation features (PROTOCOL.md §8, rule 7): a change to how flags
//! evaluate that an older evaluator would silently misread gets a name.
//! SDKs announce the ones they implement in `Hello.features`; a relay
//! refuses a subscriber that lacks one its environment's data uses
//! (`FAILED_PRECONDITION` naming it), so an older SDK keeps its
//! last-known-good flags instead of evaluating them wrongly.

use crate::snapshot::Snapshot;

/// Rollouts and segment rules with another system's bucketing
/// (`bucketing`, docs/EVALUATION.md "Imported bucketing").
pub const IMPORTED_BUCKETING: &str = "imported_bucketing";

/// Every feature this evaluator implements (what an SDK announces).
pub const IMPLEMENTED: &[&str] = &[IMPORTED_BUCKETING];

/// The features `snap`'s flags and segments use.
pub fn used(snap: &Snapshot) -> Vec<&'static str> {
    let in_flags = snap.flags.iter().any(|f| f.facts().imported_bucketing);
    let in_segments = || snap.segments().any(|s| s.rules.iter().any(|r| r.bucketing.is_some()));
    if in_flags || in_segments() { vec![IMPORTED_BUCKETING] } else { Vec::new() }
}
