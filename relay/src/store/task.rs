//! The store's operations on tasks of their own: a write, a key or an
//! environment change finishes even if its caller goes away, is counted
//! while it runs (`store_operations`), and shutdown waits for it before
//! the last flush.

use super::{Store, StoreError};

impl Store {
    /// Runs `work` on a task of its own and waits for it. The caller's
    /// future may be dropped at this await: the task is not, so whatever
    /// `work` began it finishes, and shutdown ([`Store::settle`]) waits for
    /// it before the last flush.
    pub(super) async fn detached<T: Send + 'static>(
        &self,
        work: impl Future<Output = Result<T, StoreError>> + Send + 'static,
    ) -> Result<T, StoreError> {
        self.track(work).await.map_err(StoreError::Task)?
    }

    /// Spawns `work`, a change the store must see finished (its audit
    /// record included) even if its caller goes away: counted in
    /// `store_operations` while it runs, and waited for by
    /// [`Store::settle`] at shutdown.
    pub(crate) fn track<F>(&self, work: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        /// Counts the operation while its task runs (a panic included).
        struct Running(prometheus_client::metrics::gauge::Gauge);
        impl Drop for Running {
            fn drop(&mut self) {
                self.0.dec();
            }
        }
        let running = Running(self.inner.metrics.store_operations.clone());
        running.0.inc();
        self.inner.tasks.spawn(async move {
            let _running = running;
            work.await
        })
    }

    /// Store operations running on tasks of their own now.
    pub(crate) fn operations(&self) -> usize {
        self.inner.tasks.len()
    }

    /// Takes no new operation on a task of its own and waits for those
    /// running, up to `deadline`; returns how many were still running then
    /// (0: all finished).
    pub(crate) async fn settle(&self, deadline: std::time::Duration) -> usize {
        let tasks = &self.inner.tasks;
        tasks.close();
        match tokio::time::timeout(deadline, tasks.wait()).await {
            Ok(()) => 0,
            Err(_) => tasks.len(),
        }
    }
}
