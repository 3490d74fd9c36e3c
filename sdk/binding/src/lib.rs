//! What every foreign-language binding of the flagstream client shares
//! (the Python package, the C ABI behind Go and Java): the state an
//! evaluation loads whole ([`serving`]: a Rust client or a fixed
//! snapshot), the process's runtime, and the sync restarted in a forked
//! child ([`engine`]). The evaluation result's shape is flattened once,
//! in the core (`Reason::parts`).
//!
//! Forks: a child process has only the thread that called `fork()`. The
//! parent's runtime threads, and the client tasks that ran on them, are
//! gone, and any lock one of them held at the fork stays held. A client
//! used in a child therefore never calls the parent's client: it serves
//! the parent's last snapshot, marked stale and read without a lock, and
//! starts a sync of its own on a runtime of its own, which replaces the
//! parent's snapshot once it has data. A fork is noticed by
//! [`count_fork`]: from a `pthread_atfork` child handler
//! ([`install_fork_handler`]), a language's own hook (Python's
//! `os.register_at_fork`), or a PID check off the evaluation path.

// One unsafe call: registering the fork handler (see `install_fork_handler`).
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};

pub mod engine;
pub mod fork_lock;
pub mod serving;

pub use engine::Engine;
pub use fork_lock::{ForkGuard, ForkMutex};
pub use serving::{DataSeen, Fallbacks, Live, Serving, client_parts, count, fixed_parts};

/// Forks seen by this process's lineage: a client started under another
/// count is in a child of the process that started it.
pub static FORKS: AtomicU64 = AtomicU64::new(0);

/// The process in which [`FORKS`] was last bumped: a fork is counted once
/// per process, by a hook or by the first PID check that sees it.
static FORK_PID: AtomicU32 = AtomicU32::new(0);

/// Counts a fork into this process, unless it was counted already. Safe
/// in a `fork()` child handler: atomics and `getpid` only.
pub fn count_fork() {
    let pid = std::process::id();
    if FORK_PID.swap(pid, Ordering::SeqCst) != pid {
        FORKS.fetch_add(1, Ordering::SeqCst);
    }
}

/// Registers [`count_fork`] as a `pthread_atfork` child handler, once per
/// process lineage (a registration is inherited by children). For
/// bindings whose language has no fork hook of its own (C, Go, Java);
/// a PID check ([`Engine::live_checked`]) still catches a fork made with
/// a raw `clone` that skips the handlers.
pub fn install_fork_handler() -> Result<(), String> {
    static ONCE: Once = Once::new();
    static RESULT: Mutex<Result<(), String>> = Mutex::new(Ok(()));
    extern "C" fn in_child() {
        count_fork();
    }
    ONCE.call_once(|| {
        // SAFETY: `in_child` is a plain function that touches atomics and
        // calls getpid only (async-signal-safe, as a child handler must
        // be); no prepare or parent handler.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
        if rc != 0 {
            let e = format!("pthread_atfork failed ({})", std::io::Error::from_raw_os_error(rc));
            *RESULT.lock().unwrap_or_else(|p| p.into_inner()) = Err(e);
        }
    });
    RESULT.lock().unwrap_or_else(|p| p.into_inner()).clone()
}

/// The process's runtime, with the PID that built it (a [`ForkMutex`]: a
/// thread of the parent that held it at a fork does not block the child).
static RUNTIME: ForkMutex<Option<(u32, Arc<tokio::runtime::Runtime>)>> = ForkMutex::new(None);

/// The runtime of this process (two workers), built on first use, and
/// anew in a forked child, leaking the parent's: its threads are gone and
/// dropping it would wait for them.
pub fn runtime() -> Result<Arc<tokio::runtime::Runtime>, String> {
    let pid = std::process::id();
    let mut slot = RUNTIME.lock();
    if let Some((built_by, rt)) = slot.as_ref()
        && *built_by == pid
    {
        return Ok(rt.clone());
    }
    if let Some((_, parents)) = slot.take() {
        std::mem::forget(parents);
    }
    let rt = Arc::new(
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("flagstream")
            .enable_all()
            .build()
            .map_err(|e| format!("starting the flagstream runtime: {e}"))?,
    );
    *slot = Some((pid, rt.clone()));
    Ok(rt)
}
