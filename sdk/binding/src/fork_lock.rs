//! A lock a forked child can always take: [`ForkMutex`].
//!
//! `fork()` copies a process's memory, locks included, but only the
//! forking thread: a lock another thread held at that moment stays held in
//! the child by a thread that does not exist there, and a `std` mutex
//! would block the child's first taker for good. This lock records the
//! holder's process ID; a holder of another process (necessarily an
//! ancestor's thread, gone here) is taken over. Critical sections are
//! short (a table insert, a state swap, building a client), so a waiter
//! spins with `yield_now`.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU32, Ordering};

/// A mutual-exclusion lock that a forked child takes over from its
/// parent's threads (see the module).
#[derive(Debug, Default)]
pub struct ForkMutex<T> {
    /// The holder's process ID; 0 when free.
    owner: AtomicU32,
    value: UnsafeCell<T>,
}

// SAFETY: access to `value` is exclusive while `owner` names this process
// (one holder at a time within a process, as with any mutex); a value
// taken over from an ancestor's thread is this process's own copy.
unsafe impl<T: Send> Sync for ForkMutex<T> {}

impl<T> ForkMutex<T> {
    /// A free lock around `value`.
    pub const fn new(value: T) -> ForkMutex<T> {
        ForkMutex { owner: AtomicU32::new(0), value: UnsafeCell::new(value) }
    }

    /// Takes the lock, waiting for a holder of this process; a holder of
    /// another process (a thread of an ancestor, which does not exist
    /// here) is taken over at once.
    pub fn lock(&self) -> ForkGuard<'_, T> {
        let me = std::process::id();
        loop {
            match self.owner.compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed) {
                Ok(_) => return ForkGuard { lock: self },
                Err(holder) if holder != me => {
                    if self.owner.compare_exchange(holder, me, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                        return ForkGuard { lock: self };
                    }
                }
                Err(_) => std::thread::yield_now(),
            }
        }
    }

    /// The value, with the lock not needed (`&mut self` is exclusive).
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

/// The lock held; released when dropped.
#[derive(Debug)]
pub struct ForkGuard<'a, T> {
    lock: &'a ForkMutex<T>,
}

impl<T> Deref for ForkGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        // SAFETY: this guard is the one holder (see `ForkMutex`).
        unsafe { &*self.lock.value.get() }
    }
}

impl<T> DerefMut for ForkGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the one holder (see `ForkMutex`).
        unsafe { &mut *self.lock.value.get() }
    }
}

impl<T> Drop for ForkGuard<'_, T> {
    fn drop(&mut self) {
        self.lock.owner.store(0, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holder_of_another_process_is_taken_over_and_one_of_this_process_is_waited_for() {
        let lock = ForkMutex::new(0u32);
        // A parent's thread held it at the fork: another process's ID.
        lock.owner.store(std::process::id().wrapping_add(1), Ordering::Relaxed);
        *lock.lock() += 1;
        assert_eq!(lock.owner.load(Ordering::Relaxed), 0, "released");
        // Two threads of this process: mutual exclusion.
        let lock = std::sync::Arc::new(ForkMutex::new(0u64));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let lock = lock.clone();
                std::thread::spawn(move || {
                    for _ in 0..10_000 {
                        *lock.lock() += 1;
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().expect("a thread");
        }
        assert_eq!(*lock.lock(), 40_000);
    }
}
