//! The tasks waiting on an environment's next revision (its subscribers'
//! streams): each registers its waker once and keeps it registered, and
//! every publish wakes them all by reference. tokio's `watch` puts each
//! waiter back on its list, under the list's lock, every time it waits:
//! with 50,000 streams on one environment that was a lock and a waker
//! clone per stream per revision.

use std::sync::Mutex;
use std::task::Waker;

use slab::Slab;

/// The wakers of the tasks waiting on one environment's head.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    wakers: Mutex<Slab<Waker>>,
}

/// A task's place in [`Waiters`]: its slot and the waker it holds.
#[derive(Debug)]
pub(crate) struct Registration {
    slot: usize,
    waker: Waker,
}

impl Waiters {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slab<Waker>> {
        // A slab of wakers stays consistent whatever panicked.
        self.wakers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Makes sure `waker` is woken by the next [`Waiters::wake_all`]: takes
    /// the lock only the first time and when the task's waker changed.
    #[inline]
    pub(crate) fn register(&self, reg: &mut Option<Registration>, waker: &Waker) {
        match reg {
            Some(r) if r.waker.will_wake(waker) => {}
            Some(r) => {
                let old = std::mem::replace(&mut r.waker, waker.clone());
                let replaced = self.lock().get_mut(r.slot).map(|w| std::mem::replace(w, waker.clone()));
                // Dropped after the lock: a waker's drop runs its
                // executor's code, which must not find the lock held.
                drop((old, replaced));
            }
            None => {
                let slot = self.lock().insert(waker.clone());
                *reg = Some(Registration { slot, waker: waker.clone() });
            }
        }
    }

    /// Forgets a task's registration (its stream ended).
    pub(crate) fn remove(&self, reg: Registration) {
        let removed = self.lock().try_remove(reg.slot);
        // Dropped after the lock (see `register`).
        drop(removed);
    }

    /// Wakes every registered task (they stay registered), under the lock:
    /// cloning 50,000 wakers out first would cost more than the wakes. A
    /// waker's `wake_by_ref` must only schedule its task, never poll or
    /// drop anything that could come back here (tokio's do just that).
    pub(crate) fn wake_all(&self) {
        for (_, w) in self.lock().iter() {
            w.wake_by_ref();
        }
    }

    /// Tasks registered now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A waker that counts its wakes.
    struct Count(AtomicUsize);

    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_registered_task_is_woken_by_every_publish_until_removed() {
        let waiters = Waiters::default();
        let (a, b) = (Arc::new(Count(AtomicUsize::new(0))), Arc::new(Count(AtomicUsize::new(0))));
        let (wa, wb) = (Waker::from(a.clone()), Waker::from(b.clone()));
        let (mut ra, mut rb) = (None, None);
        waiters.register(&mut ra, &wa);
        waiters.register(&mut rb, &wb);
        // Registering again with the same waker keeps one place.
        waiters.register(&mut ra, &wa);
        assert_eq!(waiters.len(), 2);
        waiters.wake_all();
        waiters.wake_all();
        assert_eq!((a.0.load(Ordering::Relaxed), b.0.load(Ordering::Relaxed)), (2, 2));
        // A task whose waker changed is woken through the new one.
        let a2 = Arc::new(Count(AtomicUsize::new(0)));
        waiters.register(&mut ra, &Waker::from(a2.clone()));
        waiters.remove(rb.take().expect("registered"));
        waiters.wake_all();
        assert_eq!(a.0.load(Ordering::Relaxed), 2, "the old waker is not woken");
        assert_eq!(a2.0.load(Ordering::Relaxed), 1);
        assert_eq!(b.0.load(Ordering::Relaxed), 2, "a removed task is not woken");
        assert_eq!(waiters.len(), 1);
    }
}
