//! Change listeners: a C callback with its user data, called in order on
//! a library thread.

use std::sync::atomic::Ordering;

use crate::*;

/// One change listener: its stop signal and its task, and the fork count
/// it was made under (a parent's listener is never waited for in a child:
/// its task ran on the parent's runtime).
pub(crate) struct Listener {
    pub(crate) stop: std::sync::Arc<tokio::sync::Notify>,
    pub(crate) task: tokio::task::JoinHandle<()>,
    pub(crate) forks: u64,
}

/// A string borrowed for the length of a callback.
#[repr(C)]
pub struct FlagstreamStr {
    /// UTF-8 bytes, not NUL-terminated.
    pub ptr: *const u8,
    /// Length in bytes.
    pub len: usize,
}

/// A change listener: called on a library thread, one call at a time and
/// in order, with the new revision and the keys of the flags it added,
/// changed or removed (`flags[0..count]`, valid during the call only), or
/// with `missed` true and no keys when changes came faster than the
/// callback took them (re-read what you cache). It must not call
/// `flagstream_client_off_change`, `_close` or `_free` on its own client.
pub type FlagstreamChangeFn = Option<
    unsafe extern "C" fn(
        user_data: *mut std::ffi::c_void,
        revision: u64,
        flags: *const FlagstreamStr,
        count: usize,
        missed: bool,
    ),
>;

/// The callback and its user data, moved to the listener's thread (the
/// caller promised both are usable from a library thread).
pub(crate) struct Callback {
    pub(crate) f: unsafe extern "C" fn(*mut std::ffi::c_void, u64, *const FlagstreamStr, usize, bool),
    pub(crate) user_data: *mut std::ffi::c_void,
}

// SAFETY: the header's contract: the callback and its user data may be
// used from a library thread, one call at a time.
unsafe impl Send for Callback {}

impl Callback {
    fn call(&self, revision: u64, flags: &[String], missed: bool) {
        let strs: Vec<FlagstreamStr> =
            flags.iter().map(|k| FlagstreamStr { ptr: k.as_ptr(), len: k.len() }).collect();
        // SAFETY: the caller's callback with its own user data; `strs`
        // and the keys it points into outlive the call.
        unsafe { (self.f)(self.user_data, revision, strs.as_ptr(), strs.len(), missed) }
    }
}

/// Stops a listener and waits until its task (and any call of its
/// callback) has ended. A listener inherited from a parent process is
/// leaked instead: its task will never run here (nor call back).
pub(crate) fn stop_listener(l: Listener) -> Result<(), Failure> {
    if l.forks != flagstream_binding::FORKS.load(Ordering::SeqCst) {
        std::mem::forget(l);
        return Ok(());
    }
    l.stop.notify_one();
    let task = l.task;
    // A task that panicked has ended too.
    let _ended = wait_on(task)?;
    Ok(())
}

/// Calls `callback(user_data, …)` for every change the client applies
/// from now on; `*listener` is its id for [`flagstream_client_off_change`].
///
/// # Safety
/// `client` is a live client handle; `callback` and `user_data` may be
/// used from a library thread until the listener is removed (off_change,
/// close or free return only after its last call); `listener` is valid
/// for a write.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_client_on_change(
    client: *const FlagstreamClient,
    callback: FlagstreamChangeFn,
    user_data: *mut std::ffi::c_void,
    listener: *mut u64,
) -> FlagstreamStatus {
    guard(|| {
        if listener.is_null() {
            return Err(invalid("listener: a null out pointer"));
        }
        let f = callback.ok_or_else(|| invalid("callback: a null function"))?;
        // SAFETY: the caller's contract, above.
        let (c, live) = unsafe { open(client, true) }?;
        let rt = runtime()?;
        // Fixed data (unvalidated test data) never changes: no feed.
        let mut changes = match live.syncing() {
            Some(sync) => sync.changes(),
            None => tokio::sync::broadcast::channel(1).1,
        };
        drop(live);
        // The table first: a close empties it under this lock, so a
        // listener is either in it (and stopped by the close) or refused
        // before its task exists (and never calls back).
        let mut table = c.listeners.lock();
        let Some(listeners) = table.as_mut() else {
            return Err(Failure(FlagstreamStatus::Closed, "the client was closed".into()));
        };
        let cb = std::sync::Arc::new(std::sync::Mutex::new(Callback { f, user_data }));
        let stop = std::sync::Arc::new(tokio::sync::Notify::new());
        let stopped = stop.clone();
        let task = rt.spawn(async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                let (revision, flags, missed) = tokio::select! {
                    _ = stopped.notified() => return,
                    r = changes.recv() => match r {
                        Ok(change) => (change.revision, change.flags, false),
                        Err(RecvError::Lagged(_)) => (0, std::sync::Arc::from(Vec::new()), true),
                        Err(RecvError::Closed) => return,
                    },
                };
                let cb = cb.clone();
                // Off the async workers: the callback is the caller's code.
                let called = tokio::task::spawn_blocking(move || {
                    cb.lock().unwrap_or_else(|p| p.into_inner()).call(revision, &flags, missed)
                });
                // A callback that unwound (it must not) ends the listener.
                if called.await.is_err() {
                    return;
                }
            }
        });
        let id = c.next_listener.fetch_add(1, Ordering::Relaxed);
        let forks = flagstream_binding::FORKS.load(Ordering::SeqCst);
        listeners.insert(id, Listener { stop, task, forks });
        drop(table);
        // SAFETY: the caller's contract, above.
        unsafe { put(listener, id, "listener") }
    })
}

/// Removes a change listener; returns after its callback's last call.
///
/// # Safety
/// `client` is a live client handle; not called from the listener's own
/// callback.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn flagstream_client_off_change(
    client: *const FlagstreamClient,
    listener: u64,
) -> FlagstreamStatus {
    guard(|| {
        // SAFETY: the caller's contract, above.
        let (c, live) = unsafe { open(client, true) }?;
        drop(live);
        let l = c.listeners.lock().as_mut().and_then(|l| l.remove(&listener));
        let l = l.ok_or_else(|| invalid(format!("listener: no listener {listener}")))?;
        stop_listener(l)
    })
}
