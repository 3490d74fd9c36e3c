//! Output formats: human tables, JSON and YAML.

use clap::ValueEnum;

use crate::failure::{CmdResult, Failure, exit};

/// Output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    /// Human tables.
    Table,
    /// JSON.
    Json,
    /// YAML.
    Yaml,
}

/// Prints a serialisable value as JSON or YAML.
pub(crate) fn print_data<T: serde::Serialize>(output: Output, v: &T) -> CmdResult {
    let text = match output {
        Output::Yaml => serde_yaml_ng::to_string(v).map_err(|e| Failure::new(exit::ERROR, e.to_string()))?,
        _ => serde_json::to_string_pretty(v).map_err(|e| Failure::new(exit::ERROR, e.to_string()))? + "\n",
    };
    print!("{text}");
    Ok(())
}
