package dev.flagstream;

/**
 * A change listener's registration: {@link #close()} removes the listener
 * and returns after its last call (when called from that listener itself,
 * the removal completes in the background instead, and the listener is not
 * called again). Closing twice, or after the client was closed, does nothing.
 */
public interface ListenerRegistration extends AutoCloseable {
    /** Removes the listener. */
    @Override
    void close();
}
