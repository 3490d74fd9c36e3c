package dev.flagstream;

import java.lang.ref.Reference;
import java.time.Duration;
import java.time.Instant;
import java.util.Objects;
import java.util.function.Consumer;

/**
 * A flagstream client: the Rust streaming client (relay stream with delta
 * resume, stall detection, failover, checksums, the last-known-good cache)
 * running on the library's own threads, evaluated locally.
 *
 * <pre>{@code
 * try (FlagstreamClient client = FlagstreamClient.builder()
 *         .endpoints("http://127.0.0.1:7070").sdkKey(key).build();
 *      Context ctx = Context.of("user-42").set("country", "US")) {
 *     client.waitReady(Duration.ofSeconds(2));
 *     boolean on = client.boolValue("new-checkout", ctx, false);
 * }
 * }</pre>
 *
 * <p><b>Evaluations</b> never throw for a missing, mistyped or malformed
 * flag, nor before the first data: they return the caller's default (with
 * reason {@code ERROR} in the detail), counted in {@link #stats()}. They
 * take no lock; any number of threads may evaluate at once.
 *
 * <p><b>Closing.</b> {@link #close()} sends the last usage counts, ends the
 * stream and stops the listeners; afterwards every call on this client (and
 * its {@link Flag} handles) throws a {@link FlagstreamException} with status
 * {@code CLOSED}, also from threads that race with the close. The native
 * handle is freed only when this object is unreachable (by a
 * {@link java.lang.ref.Cleaner}), never by {@code close()}: the library
 * answers {@code CLOSED} on a closed handle, so an evaluation in flight
 * during a close stays safe without a lock or a shared in-flight counter on
 * the hot path (each call keeps the object reachable until it returns with
 * {@link Reference#reachabilityFence}). The cost is that a closed client's
 * last flag data stays in native memory until it is collected. A client
 * collected without {@code close()} is closed and freed then: its listeners
 * are no longer called, and the close and free (its last usage counts are
 * sent, waiting up to 2 s, and a listener call in progress is waited for)
 * run on a daemon thread of their own ({@code flagstream-client-free}), so a
 * listener that blocks never stalls the Cleaner's thread, which frees every
 * other client, context and flag handle of the package.
 *
 * <p><b>Threads.</b> The library runs its own threads (not Java threads: they
 * never keep the JVM alive). Change listeners are called on them, attached
 * to the JVM as daemons; each listener one call at a time and in order.
 */
public final class FlagstreamClient implements AutoCloseable {
    /** How long {@link #close()} waits for the relay to take the last usage counts. */
    public static final Duration DEFAULT_CLOSE_TIMEOUT = Duration.ofSeconds(2);

    /** The C handle: valid until the Cleaner frees it, after this object is unreachable. */
    final long handle;
    private final ClientCore core;

    /** Made by {@link ClientBuilder#build()}. */
    FlagstreamClient(long handle) {
        this.handle = handle;
        this.core = new ClientCore(handle);
        Cleaners.CLEANER.register(this, core);
    }

    /** @return a builder for a client following relays, or serving test data or a file */
    public static ClientBuilder builder() {
        return new ClientBuilder();
    }

    /**
     * A client serving a flag set given as YAML or JSON text
     * ({@code {"flags": [...], "segments": [...]}}, the flag file format of
     * docs/EVALUATION.md), validated; for unit tests of your code.
     *
     * @param yamlOrJson the flag set
     * @return a ready client
     */
    public static FlagstreamClient testData(String yamlOrJson) {
        return builder().testData(yamlOrJson).build();
    }

    /**
     * Waits for the first data (from a relay or the cache).
     *
     * @param timeout how long to wait at most
     * @return true once the client has data; false when the timeout passed
     *     first (it keeps trying in the background). Never throws for a
     *     timeout.
     */
    public boolean waitReady(Duration timeout) {
        long ms = millis(timeout, "timeout");
        try {
            return Native.clientWaitReady(handle, ms);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** @return the client's state and the served data's revision */
    public ClientStatus status() {
        long[] out = new long[2];
        try {
            Native.clientStatus(handle, out);
        } finally {
            Reference.reachabilityFence(this);
        }
        return ClientStatus.of(out[0], out[1]);
    }

    /** @return a copy of the client's counters */
    public Stats stats() {
        long[] out = new long[Stats.COUNT];
        try {
            Native.clientStats(handle, out);
        } finally {
            Reference.reachabilityFence(this);
        }
        return Stats.of(out);
    }

    /**
     * A handle for flag {@code key}: evaluations through it skip the key
     * lookup (and, for the value-only forms, allocate nothing).
     *
     * @param key the flag's key
     * @return a handle bound to this client
     */
    public Flag flag(String key) {
        Objects.requireNonNull(key, "key");
        if (core.closed) {
            throw FlagstreamException.closed("the client");
        }
        return new Flag(this, key, Native.flagNew(key));
    }

    // ---- evaluations by key ------------------------------------------------

    /**
     * Evaluates a bool flag.
     *
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned when the flag is missing, off-type or malformed (counted in stats)
     * @return the value
     */
    public boolean boolValue(String key, Context context, boolean defaultValue) {
        Objects.requireNonNull(key, "key");
        try {
            return Native.evalBool(handle, key, context.handle(), defaultValue);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
    }

    /**
     * Evaluates an int flag.
     *
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value
     */
    public long intValue(String key, Context context, long defaultValue) {
        Objects.requireNonNull(key, "key");
        try {
            return Native.evalInt(handle, key, context.handle(), defaultValue);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
    }

    /**
     * Evaluates a number flag (an int flag reads as one too).
     *
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value
     */
    public double doubleValue(String key, Context context, double defaultValue) {
        Objects.requireNonNull(key, "key");
        try {
            return Native.evalFloat(handle, key, context.handle(), defaultValue);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
    }

    /**
     * Evaluates a string flag.
     *
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value
     */
    public String stringValue(String key, Context context, String defaultValue) {
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(defaultValue, "defaultValue");
        try {
            return Native.evalString(handle, key, context.handle(), defaultValue);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
    }

    /**
     * Evaluates a JSON flag.
     *
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned on an error: a Map (string keys), List,
     *     String, Number, Boolean or null
     * @return the value as a fresh Map/List/String/Long or Double/Boolean/null
     * @throws IllegalArgumentException when the default cannot be written as JSON
     */
    public Object jsonValue(String key, Context context, Object defaultValue) {
        Objects.requireNonNull(key, "key");
        String def = Json.write(defaultValue);
        String text;
        try {
            text = Native.evalJson(handle, key, context.handle(), def);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
        return Json.parse(text);
    }

    /**
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value with its detail
     */
    public EvaluationDetail<Boolean> boolDetail(String key, Context context, boolean defaultValue) {
        return detail(Objects.requireNonNull(key, "key"), 0, context, ValueType.BOOL, defaultValue ? 1 : 0, null);
    }

    /**
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value with its detail
     */
    public EvaluationDetail<Long> intDetail(String key, Context context, long defaultValue) {
        return detail(Objects.requireNonNull(key, "key"), 0, context, ValueType.INT, defaultValue, null);
    }

    /**
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value with its detail
     */
    public EvaluationDetail<Double> doubleDetail(String key, Context context, double defaultValue) {
        return detail(Objects.requireNonNull(key, "key"), 0, context, ValueType.DOUBLE,
                Double.doubleToRawLongBits(defaultValue), null);
    }

    /**
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value with its detail
     */
    public EvaluationDetail<String> stringDetail(String key, Context context, String defaultValue) {
        Objects.requireNonNull(defaultValue, "defaultValue");
        return detail(Objects.requireNonNull(key, "key"), 0, context, ValueType.STRING, 0, defaultValue);
    }

    /**
     * @param key the flag's key
     * @param context the context
     * @param defaultValue returned on an error (JSON-writable)
     * @return the value with its detail
     */
    public EvaluationDetail<Object> jsonDetail(String key, Context context, Object defaultValue) {
        return detail(Objects.requireNonNull(key, "key"), 0, context, ValueType.JSON, 0, Json.write(defaultValue));
    }

    /**
     * Evaluates at another time than now (schedule previews, tests); not
     * counted in stats or usage.
     *
     * @param type the type asked for
     * @param key the flag's key
     * @param context the context
     * @param defaultValue a Boolean, a Long (or other integral Number), a
     *     Number, a String, or any JSON-writable value, as {@code type} says
     * @param at the evaluator's clock (millisecond precision)
     * @return the value (typed as {@link ValueType} says) with its detail
     */
    public EvaluationDetail<Object> detailAt(ValueType type, String key, Context context, Object defaultValue,
            Instant at) {
        Objects.requireNonNull(type, "type");
        Objects.requireNonNull(key, "key");
        Objects.requireNonNull(at, "at");
        String def = Json.write(typed(type, defaultValue, "defaultValue"));
        long[] out = new long[EvaluationDetail.FIELDS];
        String[] strings = new String[2];
        String text;
        try {
            text = Native.evalAt(handle, key, context.handle(), type.code, def, at.toEpochMilli(), out, strings);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
        return EvaluationDetail.of(typed(type, Json.parse(text), "the library's value"), out, strings);
    }

    /** A value as {@code type} holds it (Long for INT, Double for DOUBLE...), else IllegalArgumentException. */
    private static Object typed(ValueType type, Object v, String what) {
        boolean ok;
        switch (type) {
            case BOOL:
                ok = v instanceof Boolean;
                break;
            case INT:
                ok = v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte;
                if (ok) {
                    v = ((Number) v).longValue();
                }
                break;
            case DOUBLE:
                ok = v instanceof Number;
                if (ok) {
                    v = ((Number) v).doubleValue();
                }
                break;
            case STRING:
                ok = v instanceof String;
                break;
            default:
                ok = true;
        }
        if (!ok) {
            throw new IllegalArgumentException(what + ": " + v + " is not a " + type + " value");
        }
        return v;
    }

    @SuppressWarnings("unchecked")
    <T> EvaluationDetail<T> detail(String key, long flag, Context context, ValueType type, long bits, String text) {
        long[] out = new long[EvaluationDetail.FIELDS];
        String[] strings = new String[2];
        String s;
        try {
            s = Native.evalDetail(handle, key, flag, context.handle(), type.code, bits, text, out, strings);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
        Object value;
        switch (type) {
            case BOOL: value = out[0] != 0; break;
            case INT: value = out[0]; break;
            case DOUBLE: value = Double.longBitsToDouble(out[0]); break;
            case STRING: value = s; break;
            default: value = Json.parse(s);
        }
        return (EvaluationDetail<T>) EvaluationDetail.of(value, out, strings);
    }

    // ---- change listeners ----------------------------------------------------

    /**
     * Calls {@code listener} for every change the client applies from now
     * on, on a library thread (attached to the JVM as a daemon): each
     * listener one call at a time and in order. What it throws is logged
     * (logger {@code dev.flagstream}), not propagated. It should return
     * quickly; it must not call {@link #close()} on this client (that throws
     * {@link IllegalStateException}: it would wait for itself). Keep a
     * reference to the client: a client that becomes unreachable is closed
     * by its Cleaner, which stops its listeners. A listener that refers to
     * the client (or to anything that does) keeps it reachable until the
     * listener is removed or the client closed.
     *
     * @param listener called with each {@link Change}
     * @return its registration: {@code close()} removes it
     */
    public ListenerRegistration addChangeListener(Consumer<Change> listener) {
        Objects.requireNonNull(listener, "listener");
        ListenerRef ref;
        try {
            ref = core.add(listener);
        } finally {
            Reference.reachabilityFence(this);
        }
        return new Registration(this, ref);
    }

    /** A registration keeps its client reachable (the native off_change needs the handle). */
    private static final class Registration implements ListenerRegistration {
        private final FlagstreamClient client;
        private final ListenerRef ref;

        Registration(FlagstreamClient client, ListenerRef ref) {
            this.client = client;
            this.ref = ref;
        }

        @Override
        public void close() {
            try {
                client.core.remove(ref, client);
            } finally {
                Reference.reachabilityFence(client);
            }
        }
    }

    // ---- closing -----------------------------------------------------------

    /** Closes the client, waiting up to {@link #DEFAULT_CLOSE_TIMEOUT} for the last usage counts. */
    @Override
    public void close() {
        close(DEFAULT_CLOSE_TIMEOUT);
    }

    /**
     * Closes the client: its last usage counts are sent (waiting up to
     * {@code timeout} for the relay), its stream ends, its listeners are
     * stopped (this returns after their last call), the cache is written.
     * Later calls throw {@code CLOSED}. A second close waits for the first
     * and returns.
     *
     * @param timeout how long to wait for the relay to take the last usage counts
     * @throws IllegalStateException when called from a change listener of this client
     */
    public void close(Duration timeout) {
        long ms = millis(timeout, "timeout");
        try {
            core.close(ms);
        } finally {
            Reference.reachabilityFence(this);
        }
    }

    /** @return whether {@link #close()} was called */
    public boolean isClosed() {
        return core.closed;
    }

    static long millis(Duration d, String what) {
        Objects.requireNonNull(d, what);
        if (d.isNegative()) {
            throw new IllegalArgumentException(what + ": a negative duration (" + d + ")");
        }
        // Capped (about 35 years) so the library's deadline arithmetic cannot overflow.
        long cap = 1L << 40;
        return d.compareTo(Duration.ofMillis(cap)) > 0 ? cap : d.toMillis();
    }
}
