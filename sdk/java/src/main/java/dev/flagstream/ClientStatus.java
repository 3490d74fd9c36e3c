package dev.flagstream;

/**
 * Where a client stands.
 *
 * @param state initializing, ready, stale or failed
 * @param revision the served data's revision (0 without data)
 */
public record ClientStatus(State state, long revision) {
    /** The client's state. */
    public enum State {
        /** No data yet (it keeps trying). */
        INITIALIZING,
        /** Serving current data. */
        READY,
        /** Serving data that may be out of date (e.g. from the cache, or the stream is down). */
        STALE,
        /** A permanent error (e.g. a revoked SDK key). */
        FAILED
    }

    /** @return whether flags are served (ready or stale) */
    public boolean hasData() {
        return state == State.READY || state == State.STALE;
    }

    static ClientStatus of(long state, long revision) {
        State[] all = State.values();
        State s = state >= 0 && state < all.length ? all[(int) state] : State.FAILED;
        return new ClientStatus(s, revision);
    }
}
