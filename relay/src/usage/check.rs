//! The bounds a usage summary must keep before anything of it is used
//! (PROTOCOL.md §4.1): the first one passed names the field.

use flagstream::usage::{MAX_DEFAULT_BYTES, MAX_FLAGS_PER_SUMMARY, MAX_KEY_BYTES, MAX_VARIATIONS};
use flagstream_proto::v1 as pb;

use super::MAX_SUMMARY_DEFAULTS;

/// A summary over one of its bounds: the field and the message.
#[derive(Debug)]
pub(crate) struct OverBound {
    pub field: &'static str,
    pub message: String,
}

/// Checks a summary against PROTOCOL.md's bounds before anything of it is
/// used.
pub(crate) fn check(s: &pb::UsageSummary) -> Result<(), OverBound> {
    if s.flags.len() > MAX_FLAGS_PER_SUMMARY {
        return Err(OverBound {
            field: "usage.flags",
            message: format!("{} flags, the limit is {MAX_FLAGS_PER_SUMMARY}", s.flags.len()),
        });
    }
    for f in &s.flags {
        if f.key.len() > MAX_KEY_BYTES {
            return Err(OverBound {
                field: "usage.flags.key",
                message: format!("a key of {} bytes, the limit is {MAX_KEY_BYTES}", f.key.len()),
            });
        }
        if f.variations.len() > MAX_VARIATIONS {
            return Err(OverBound {
                field: "usage.flags.variations",
                message: format!(
                    "flag {:?}: {} variation counts, the limit is {MAX_VARIATIONS}",
                    f.key,
                    f.variations.len()
                ),
            });
        }
        if f.defaults.len() > MAX_SUMMARY_DEFAULTS {
            return Err(OverBound {
                field: "usage.flags.defaults",
                message: format!(
                    "flag {:?}: {} defaults, the limit is {MAX_SUMMARY_DEFAULTS}",
                    f.key,
                    f.defaults.len()
                ),
            });
        }
        if let Some(d) = f.defaults.iter().find(|d| d.len() > MAX_DEFAULT_BYTES) {
            return Err(OverBound {
                field: "usage.flags.defaults",
                message: format!(
                    "flag {:?}: a default of {} bytes, the limit is {MAX_DEFAULT_BYTES}",
                    f.key,
                    d.len()
                ),
            });
        }
    }
    Ok(())
}
