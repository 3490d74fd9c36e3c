package dev.flagstream;

import java.util.Arrays;
import java.util.List;
import java.util.function.Consumer;

/**
 * One change listener as the JNI glue holds it (a global reference, passed
 * as the C callback's user data): {@link #dispatch} runs on a library
 * thread attached to the JVM as a daemon. It holds the client's
 * {@link ClientCore}, never the client, so a client with
 * listeners can still be collected (unless the user's listener holds it).
 */
final class ListenerRef {
    private static final System.Logger LOG = System.getLogger("dev.flagstream");
    /** The core whose listener this thread is running, if any. */
    private static final ThreadLocal<Object> DISPATCHING = new ThreadLocal<>();

    /** Registration states (guarded by the core's lock). */
    static final int ACTIVE = 0, REMOVING = 1, ORPHANED = 2, RELEASED = 3;

    final Object core;
    private final Consumer<Change> listener;
    /** False once removal began: no more calls into the user's code. */
    volatile boolean active = true;
    long id;
    long userData;
    int state = ACTIVE;

    ListenerRef(Object core, Consumer<Change> listener) {
        this.core = core;
        this.listener = listener;
    }

    /** Called by the glue, one call at a time, in order. Never throws. */
    void dispatch(long revision, String[] flags, boolean missed) {
        if (!active) {
            return;
        }
        Object previous = DISPATCHING.get();
        DISPATCHING.set(core);
        try {
            listener.accept(new Change(revision, missed ? List.of() : Arrays.asList(flags), missed));
        } catch (Throwable t) {
            LOG.log(System.Logger.Level.WARNING, "flagstream: a change listener threw", t);
        } finally {
            DISPATCHING.set(previous);
        }
    }

    /** Whether the current thread is running a listener of {@code core}. */
    static boolean dispatchingFor(Object core) {
        return DISPATCHING.get() == core;
    }
}
