//! How a command fails: the exit codes (docs/CLI.md) and [`Failure`], the
//! one error type of every command, with the one mapping from a relay's
//! `tonic::Status` to an exit code.

/// Exit codes, documented in docs/CLI.md.
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// The relay failed or could not be reached.
    pub const ERROR: i32 = 1;
    /// Bad command line (clap).
    pub const USAGE: i32 = 2;
    /// Optimistic-concurrency conflict: someone changed it first.
    pub const CONFLICT: i32 = 3;
    /// No such environment, flag or segment.
    pub const NOT_FOUND: i32 = 4;
    /// Invalid input (validation, malformed file).
    pub const INVALID: i32 = 5;
    /// `--wait` timed out before every subscriber applied the revision.
    pub const INCOMPLETE: i32 = 6;
    /// Missing or wrong credentials.
    pub const UNAUTHENTICATED: i32 = 7;
    /// The user declined the confirmation.
    pub const DECLINED: i32 = 8;
    /// `audit verify`: the audit hash chain is broken.
    pub const BROKEN_CHAIN: i32 = 9;
}

/// A command failure with its exit code.
#[derive(Debug)]
pub struct Failure {
    /// Exit code.
    pub code: i32,
    /// One line for the user.
    pub message: String,
}

impl Failure {
    pub(crate) fn new(code: i32, message: impl Into<String>) -> Failure {
        Failure { code, message: message.into() }
    }
}

impl From<tonic::Status> for Failure {
    fn from(s: tonic::Status) -> Failure {
        use tonic::Code;
        let code = match s.code() {
            Code::FailedPrecondition | Code::Aborted => exit::CONFLICT,
            Code::NotFound => exit::NOT_FOUND,
            Code::InvalidArgument | Code::AlreadyExists => exit::INVALID,
            Code::Unauthenticated | Code::PermissionDenied => exit::UNAUTHENTICATED,
            _ => exit::ERROR,
        };
        let mut what = match s.code() {
            Code::Unavailable => format!("relay unavailable: {}", s.message()),
            Code::DeadlineExceeded => format!("relay did not answer in time: {}", s.message()),
            _ => s.message().to_owned(),
        };
        // A transport failure (no status from the relay): say what broke.
        if let Some(cause) = std::error::Error::source(&s) {
            let chain = flagstream::follow::error_chain(cause);
            what = format!("{what}: {chain}");
            if chain.contains("CertificateRequired") {
                what.push_str(" (the relay requires a client certificate: --client-cert and --client-key)");
            }
        }
        Failure::new(code, what)
    }
}

/// Result of a command.
pub type CmdResult = Result<(), Failure>;

/// A [`Failure`] for input the user must fix (exit code `INVALID`).
pub(crate) fn invalid(msg: impl Into<String>) -> Failure {
    Failure::new(exit::INVALID, msg)
}
