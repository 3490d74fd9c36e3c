package dev.flagstream;

/**
 * A call into the flagstream library failed: {@link #status()} says how,
 * the message says what (it names the option, argument or state at fault).
 *
 * <p>Evaluations never throw for a missing, mistyped or malformed flag
 * (they return the caller's default, counted in {@link FlagstreamClient#stats()});
 * they throw only for a closed client ({@link Status#CLOSED}), a closed
 * context, or a wrong argument.
 */
public class FlagstreamException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** What kind of failure (the C ABI's {@code flagstream_status}). */
    public enum Status {
        /** An argument was wrong (bad options, bad JSON, a closed context): the message names it. */
        INVALID_ARGUMENT,
        /** The client (or context) was closed. */
        CLOSED,
        /** A wait ended before what it waited for. */
        TIMEOUT,
        /** The library panicked (a bug); nothing unwound into the JVM. */
        PANIC,
        /** Anything else: the message says what. */
        INTERNAL
    }

    /** The kind of failure. */
    private final Status status;

    /**
     * @param status the kind of failure
     * @param message what failed
     */
    public FlagstreamException(Status status, String message) {
        super(message);
        this.status = status;
    }

    /** @return the kind of failure */
    public Status status() {
        return status;
    }

    /** Called by the JNI glue with the C status code and the library's message. */
    static FlagstreamException fromNative(int code, String message) {
        Status s;
        switch (code) {
            case 1: s = Status.INVALID_ARGUMENT; break;
            case 2: s = Status.CLOSED; break;
            case 3: s = Status.TIMEOUT; break;
            case 4: s = Status.PANIC; break;
            default: s = Status.INTERNAL; break;
        }
        String text = message == null || message.isEmpty() ? "flagstream: status " + code : message;
        return new FlagstreamException(s, text);
    }

    static FlagstreamException closed(String what) {
        return new FlagstreamException(Status.CLOSED, what + " was closed");
    }
}
