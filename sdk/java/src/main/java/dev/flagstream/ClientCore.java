package dev.flagstream;

import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.function.Consumer;

/**
 * What outlives a {@link FlagstreamClient} object: its native handle and
 * its change listeners' registry, freed by the Cleaner ({@link #run()})
 * once the client is unreachable. Never references the client, so the
 * client can be collected. The callers keep the client reachable while a
 * method here uses the handle.
 *
 * <p>A listener's native data (a global reference to its
 * {@link ListenerRef}) is freed only once its callback can no longer run:
 * after {@code off_change} returned OK, or after the native close (or free)
 * returned, whichever owns it; the states in {@link ListenerRef} decide
 * which, under {@link #lock}.
 */
final class ClientCore implements Runnable {
    final long handle;
    final Object lock = new Object();
    /** Set when close() begins; then Java-side calls throw CLOSED too. */
    volatile boolean closed;
    /** The native close returned (guarded by lock). */
    private boolean closeDone;
    /**
     * The native close failed part way: listeners may still run, so their
     * data is never freed (a leak rather than a crash; guarded by lock).
     */
    private boolean listenersUnsafe;
    /** Registered listeners by id (guarded by lock). */
    private final Map<Long, ListenerRef> listeners = new HashMap<>();

    ClientCore(long handle) {
        this.handle = handle;
    }

    /**
     * The Cleaner: the client is unreachable, so no call is in flight. The
     * Cleaner's thread is shared (every context, flag handle and client of
     * the package), so it never waits here: no listener call into the
     * user's code starts any more, and the free, which closes the client
     * first if needed (up to 2 s for the last usage counts) and waits for a
     * listener call in progress (however long a blocked listener takes),
     * runs on a daemon thread of its own.
     */
    @Override
    public void run() {
        synchronized (lock) {
            for (ListenerRef r : listeners.values()) {
                r.active = false;
            }
        }
        try {
            Thread t = new Thread(this::free, "flagstream-client-free");
            t.setDaemon(true);
            t.start();
        } catch (Throwable e) {
            // No thread to be had (out of memory or threads): free here
            // rather than leak the client.
            free();
        }
    }

    /** Frees the handle (closing it first if needed: every listener stopped), then the listeners' data. */
    private void free() {
        Native.clientFree(handle);
        synchronized (lock) {
            closeDone = true;
            if (!listenersUnsafe) {
                releaseStopped();
            }
        }
    }

    /** After the native close: frees the listeners no remover owns (lock held). */
    private void releaseStopped() {
        for (Iterator<ListenerRef> it = listeners.values().iterator(); it.hasNext(); ) {
            ListenerRef r = it.next();
            if (r.state == ListenerRef.ACTIVE || r.state == ListenerRef.ORPHANED) {
                r.active = false;
                Native.releaseListener(r.userData);
                r.state = ListenerRef.RELEASED;
            }
            if (r.state == ListenerRef.RELEASED) {
                it.remove();
            }
        }
    }

    /** Registers a native listener calling {@code listener}. */
    ListenerRef add(Consumer<Change> listener) {
        ListenerRef ref = new ListenerRef(this, listener);
        synchronized (lock) {
            if (closed) {
                throw FlagstreamException.closed("the client");
            }
            long[] out = new long[1];
            ref.id = Native.onChange(handle, ref, out);
            ref.userData = out[0];
            listeners.put(ref.id, ref);
        }
        return ref;
    }

    /**
     * Removes a listener: at once, or from its own client's callback in a
     * background thread that keeps {@code owner} (the client) reachable.
     */
    void remove(ListenerRef ref, Object owner) {
        synchronized (lock) {
            ref.active = false; // no more calls into the user's code
            if (ref.state != ListenerRef.ACTIVE || closed) {
                return; // removed already, or the close releases it
            }
            ref.state = ListenerRef.REMOVING;
        }
        if (ListenerRef.dispatchingFor(this)) {
            // From a callback of this client: off_change would wait for this very call.
            Thread t = new Thread(() -> {
                try {
                    finishRemoval(ref);
                } finally {
                    java.lang.ref.Reference.reachabilityFence(owner);
                }
            }, "flagstream-listener-removal");
            t.setDaemon(true);
            t.start();
        } else {
            finishRemoval(ref);
        }
    }

    /** Removes the native listener, then frees its data unless the close owns it. */
    private void finishRemoval(ListenerRef ref) {
        int status = -1;
        try {
            status = Native.offChange(handle, ref.id);
        } finally {
            synchronized (lock) {
                if (status == 0 || (status == 2 && closeDone)) {
                    Native.releaseListener(ref.userData);
                    ref.state = ListenerRef.RELEASED;
                    listeners.remove(ref.id);
                } else {
                    ref.state = ListenerRef.ORPHANED; // the close (or the Cleaner) frees it
                }
            }
        }
    }

    /** {@link FlagstreamClient#close(java.time.Duration)}: once; a second call waits for the first. */
    void close(long timeoutMs) {
        synchronized (lock) {
            if (ListenerRef.dispatchingFor(this)) {
                throw new IllegalStateException(
                        "close() called from a change listener of the same client would wait for itself: close it from another thread");
            }
            if (closed) {
                boolean interrupted = false;
                while (!closeDone) {
                    try {
                        lock.wait();
                    } catch (InterruptedException e) {
                        interrupted = true;
                    }
                }
                if (interrupted) {
                    Thread.currentThread().interrupt();
                }
                return;
            }
            closed = true;
        }
        boolean stopped = false;
        try {
            Native.clientClose(handle, timeoutMs);
            stopped = true;
        } catch (FlagstreamException e) {
            stopped = e.status() == FlagstreamException.Status.CLOSED;
            if (!stopped) {
                throw e;
            }
        } finally {
            synchronized (lock) {
                closeDone = true;
                if (stopped) {
                    releaseStopped();
                } else {
                    listenersUnsafe = true;
                }
                lock.notifyAll();
            }
        }
    }
}
