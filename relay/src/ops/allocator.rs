//! The C allocator's settings for the relay process (glibc on Linux).
//!
//! glibc's defaults suit short-lived programs badly for a relay that
//! plans, encodes and drops megabytes per large write: freeing a large
//! block raises the mmap threshold (up to 32 MiB), so later large blocks
//! come from the heap, where freed space is rarely returned; and up to
//! 8 arenas per core each keep their own free pages. Measured with
//! `resilience large --flags 50000` (docs/RESILIENCE.md §5), a fixed
//! 128 KiB mmap and trim threshold and one arena per core (at least two)
//! take the relay's peak from ~385–430 to ~290–310 MiB. [`tune`] sets them
//! once, at start, before any thread exists; when the operator's
//! environment sets the allocator (any `MALLOC_*` variable, or
//! `GLIBC_TUNABLES`), nothing is set.

/// Blocks of at least this size are mapped on their own and returned to
/// the system when freed; the heap's top is trimmed past it.
pub const THRESHOLD_BYTES: usize = 128 * 1024;

/// What [`tune`] did, for the start-up log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tuning {
    /// Set: the arena count, and the two thresholds in bytes.
    Set { arenas: usize, threshold: usize },
    /// Left alone: the operator's environment sets the allocator (a
    /// `MALLOC_*` variable or `GLIBC_TUNABLES`).
    Operator,
    /// glibc refused these parameters (the others were set).
    Refused(Vec<&'static str>),
    /// Not glibc: nothing to set.
    Unsupported,
}

static APPLIED: std::sync::OnceLock<Tuning> = std::sync::OnceLock::new();

/// Applies the relay's allocator settings to this process, once. Call it
/// first in `main`, before the runtime starts threads.
pub fn tune() -> &'static Tuning {
    APPLIED.get_or_init(decide)
}

/// What [`tune`] did; `None` before it ran (a relay inside another
/// program, e.g. the tests' in-process servers, keeps that program's).
pub fn applied() -> Option<&'static Tuning> {
    APPLIED.get()
}

fn decide() -> Tuning {
    let given = std::env::vars_os().any(|(name, _)| {
        let name = name.to_string_lossy();
        name.starts_with("MALLOC_") || name == "GLIBC_TUNABLES"
    });
    if given {
        return Tuning::Operator;
    }
    let arenas = std::thread::available_parallelism().map_or(2, |n| n.get()).max(2);
    set(arenas, THRESHOLD_BYTES)
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn set(arenas: usize, threshold: usize) -> Tuning {
    let as_int = |v: usize| libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
    let settings = [
        ("M_ARENA_MAX", libc::M_ARENA_MAX, arenas),
        ("M_MMAP_THRESHOLD", libc::M_MMAP_THRESHOLD, threshold),
        ("M_TRIM_THRESHOLD", libc::M_TRIM_THRESHOLD, threshold),
    ];
    let mut refused = Vec::new();
    for (name, param, value) in settings {
        // SAFETY: `mallopt` only changes allocator parameters; it is called
        // with valid parameter numbers and values, before other threads
        // run. It returns 0 for a value it rejects, which leaves glibc's
        // default for that parameter.
        #[allow(unsafe_code)]
        let ok = unsafe { libc::mallopt(param, as_int(value)) } == 1;
        if !ok {
            refused.push(name);
        }
    }
    if refused.is_empty() { Tuning::Set { arenas, threshold } } else { Tuning::Refused(refused) }
}

/// Gives the free pages inside the allocator's arenas back to the system
/// (glibc's `malloc_trim(0)`): a large write's transient allocations are
/// many small blocks, freed in the middle of the heap where the trim
/// threshold never reaches, so without this the process keeps them
/// resident and the memory budget then sees memory nobody uses. Costs a
/// walk of the arenas (milliseconds for hundreds of MiB): call it off the
/// async workers, after a large write. Returns whether anything was given
/// back.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn release_free_memory() -> bool {
    // SAFETY: `malloc_trim` takes the arenas' locks itself and only
    // returns free pages to the kernel (madvise); it is safe to call from
    // any thread at any time.
    #[allow(unsafe_code)]
    let released = unsafe { libc::malloc_trim(0) };
    released == 1
}

/// Not glibc: nothing to give back this way.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn release_free_memory() -> bool {
    false
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn set(_arenas: usize, _threshold: usize) -> Tuning {
    Tuning::Unsupported
}
