package dev.flagstream;

import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.util.Objects;

/**
 * An evaluation context kept on the native side and reused: build it once
 * (per user, request or thread), evaluate it any number of times; each
 * evaluation passes a pointer, not the attributes.
 *
 * <pre>{@code
 * try (Context ctx = Context.of("user-42").set("country", "US").set("seats", 12)) {
 *     boolean on = client.boolValue("new-checkout", ctx, false);
 * }
 * }</pre>
 *
 * <p>Threads: any number of threads may evaluate one context at once, but
 * it must not be changed ({@code set*}) or closed while another thread
 * evaluates it (the native side does not lock it). A context is freed by
 * {@link #close()}, or by a {@link java.lang.ref.Cleaner} once it is
 * unreachable; using it after {@code close()} throws a
 * {@link FlagstreamException} with status {@code CLOSED}.
 */
public final class Context implements AutoCloseable {
    private long handle;
    private final Cleaner.Cleanable cleanable;

    /** The Cleaner's action: holds the handle, not the context. */
    private static final class Free implements Runnable {
        private final long handle;

        Free(long handle) {
            this.handle = handle;
        }

        @Override
        public void run() {
            Native.contextFree(handle);
        }
    }

    private Context(long handle) {
        this.handle = handle;
        this.cleanable = Cleaners.CLEANER.register(this, new Free(handle));
    }

    /**
     * A single context of kind {@code user} with this key.
     *
     * @param key the context key (any string, may be empty)
     * @return a new context
     */
    public static Context of(String key) {
        Objects.requireNonNull(key, "key");
        NativeLoader.ensureLoaded();
        return new Context(Native.contextNew(key));
    }

    /**
     * A context from its JSON form: {@code {"key": "u1", "kind": "user",
     * "attributes": {"plan": "pro"}}} or {@code {"kind": "multi", "contexts":
     * [{...}, {...}]}} (the form of docs/EVALUATION.md).
     *
     * @param json the context as JSON text
     * @return a new context
     * @throws FlagstreamException ({@code INVALID_ARGUMENT}) naming what is wrong
     */
    public static Context fromJson(String json) {
        Objects.requireNonNull(json, "json");
        NativeLoader.ensureLoaded();
        return new Context(Native.contextFromJson(json));
    }

    /**
     * Sets (or replaces) a string attribute ({@code key} and {@code kind} are not attributes: ignored).
     *
     * @param name the attribute's name
     * @param value its value
     * @return this context
     * @throws FlagstreamException ({@code INVALID_ARGUMENT}) on a multi-kind context
     */
    public Context set(String name, String value) {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(value, "value");
        try {
            Native.contextSetString(handle(), name, value);
        } finally {
            Reference.reachabilityFence(this);
        }
        return this;
    }

    /**
     * Sets (or replaces) a number attribute.
     *
     * @param name the attribute's name
     * @param value its value
     * @return this context
     */
    public Context set(String name, double value) {
        Objects.requireNonNull(name, "name");
        try {
            Native.contextSetNumber(handle(), name, value);
        } finally {
            Reference.reachabilityFence(this);
        }
        return this;
    }

    /**
     * Sets (or replaces) a bool attribute.
     *
     * @param name the attribute's name
     * @param value its value
     * @return this context
     */
    public Context set(String name, boolean value) {
        Objects.requireNonNull(name, "name");
        try {
            Native.contextSetBool(handle(), name, value);
        } finally {
            Reference.reachabilityFence(this);
        }
        return this;
    }

    /**
     * Sets an attribute from JSON text: a string, number or bool, an array
     * of those (matched element by element), or any other JSON value (an
     * object, a mixed array: kept as JSON, for attribute references into
     * it); {@code null} removes the attribute.
     *
     * @param name the attribute's name
     * @param json its value as JSON text
     * @return this context
     */
    public Context setJson(String name, String json) {
        Objects.requireNonNull(name, "name");
        Objects.requireNonNull(json, "json");
        try {
            Native.contextSetJson(handle(), name, json);
        } finally {
            Reference.reachabilityFence(this);
        }
        return this;
    }

    /** Frees the native context (once; later calls do nothing). Not while another thread evaluates it. */
    @Override
    public void close() {
        if (handle != 0) {
            handle = 0;
            cleanable.clean();
        }
    }

    /** The live handle; throws CLOSED after {@link #close()}. Allocates nothing while open. */
    long handle() {
        long h = handle;
        if (h == 0) {
            throw FlagstreamException.closed("the context");
        }
        return h;
    }
}
