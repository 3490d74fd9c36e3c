//! Flag and segment files (the export format, YAML or JSON) and the diffs
//! every write shows before it is confirmed.

use flagstream::{Flag, Segment};

use crate::failure::{Failure, invalid};

/// Reads a file of the export format (YAML or JSON by extension).
pub(crate) fn read_file<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T, Failure> {
    let text = std::fs::read_to_string(path).map_err(|e| invalid(format!("{}: {e}", path.display())))?;
    if path.extension().is_some_and(|e| e == "json") {
        serde_json::from_str(&text).map_err(|e| invalid(format!("{}: {e}", path.display())))
    } else {
        serde_yaml_ng::from_str(&text).map_err(|e| invalid(format!("{}: {e}", path.display())))
    }
}

/// A YAML rendering for diffs, without the store-managed fields; an item
/// that does not exist (a create, a delete) renders as empty text.
pub(crate) fn yaml_for_diff<T: serde::Serialize>(v: Option<&T>) -> String {
    v.map(|v| serde_yaml_ng::to_string(v).unwrap_or_else(|e| format!("<unprintable: {e}>")))
        .unwrap_or_default()
}

/// Prints a unified diff (stderr, so stdout stays data).
pub(crate) fn show_diff(title: &str, before: &str, after: &str) {
    eprintln!("{title}");
    let diff = similar::TextDiff::from_lines(before, after);
    for change in diff.iter_all_changes() {
        let sign = match change.tag() {
            similar::ChangeTag::Delete => "-",
            similar::ChangeTag::Insert => "+",
            similar::ChangeTag::Equal => " ",
        };
        eprint!("{sign} {change}");
    }
}

/// Strips what the store sets, for comparing and showing.
pub(crate) fn strip_flag(mut f: Flag) -> Flag {
    f.version = 0;
    f.revision = 0;
    f
}

/// Strips what the store sets.
pub(crate) fn strip_segment(mut s: Segment) -> Segment {
    s.version = 0;
    s.revision = 0;
    s
}
