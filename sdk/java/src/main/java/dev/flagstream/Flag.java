package dev.flagstream;

import java.lang.ref.Reference;
import java.util.Objects;

/**
 * A flag handle from {@link FlagstreamClient#flag(String)}: the key is
 * resolved once, so an evaluation passes three pointers and no key (the
 * value-only forms allocate nothing on the Java heap). Use it on hot paths.
 * Thread-safe; freed by a {@link java.lang.ref.Cleaner} once unreachable. It
 * keeps its client reachable.
 */
public final class Flag {
    private final FlagstreamClient client;
    private final String key;
    private final long handle;

    private static final class Free implements Runnable {
        private final long handle;

        Free(long handle) {
            this.handle = handle;
        }

        @Override
        public void run() {
            Native.flagFree(handle);
        }
    }

    Flag(FlagstreamClient client, String key, long handle) {
        this.client = client;
        this.key = key;
        this.handle = handle;
        Cleaners.CLEANER.register(this, new Free(handle));
    }

    /** @return the flag's key */
    public String key() {
        return key;
    }

    /** @return the client this handle evaluates on */
    public FlagstreamClient client() {
        return client;
    }

    /**
     * Evaluates a bool flag.
     *
     * @param context the context
     * @param defaultValue returned when the flag is missing, off-type or malformed (counted in stats)
     * @return the value
     */
    public boolean boolValue(Context context, boolean defaultValue) {
        try {
            return Native.evalBoolFlag(client.handle, handle, context.handle(), defaultValue);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
    }

    /**
     * Evaluates an int flag.
     *
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value
     */
    public long intValue(Context context, long defaultValue) {
        try {
            return Native.evalIntFlag(client.handle, handle, context.handle(), defaultValue);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
    }

    /**
     * Evaluates a number flag (an int flag reads as one too).
     *
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value
     */
    public double doubleValue(Context context, double defaultValue) {
        try {
            return Native.evalFloatFlag(client.handle, handle, context.handle(), defaultValue);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
    }

    /**
     * Evaluates a string flag.
     *
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value
     */
    public String stringValue(Context context, String defaultValue) {
        Objects.requireNonNull(defaultValue, "defaultValue");
        try {
            return Native.evalStringFlag(client.handle, handle, context.handle(), defaultValue);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
    }

    /**
     * Evaluates a JSON flag.
     *
     * @param context the context
     * @param defaultValue returned on an error: a Map, List, String, Number, Boolean or null
     * @return the value as Map/List/String/Long or Double/Boolean/null
     */
    public Object jsonValue(Context context, Object defaultValue) {
        String def = Json.write(defaultValue);
        String text;
        try {
            text = Native.evalJsonFlag(client.handle, handle, context.handle(), def);
        } finally {
            Reference.reachabilityFence(this);
            Reference.reachabilityFence(context);
        }
        return Json.parse(text);
    }

    /**
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value with its detail
     */
    public EvaluationDetail<Boolean> boolDetail(Context context, boolean defaultValue) {
        return detail(context, ValueType.BOOL, defaultValue ? 1 : 0, null);
    }

    /**
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value with its detail
     */
    public EvaluationDetail<Long> intDetail(Context context, long defaultValue) {
        return detail(context, ValueType.INT, defaultValue, null);
    }

    /**
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value with its detail
     */
    public EvaluationDetail<Double> doubleDetail(Context context, double defaultValue) {
        return detail(context, ValueType.DOUBLE, Double.doubleToRawLongBits(defaultValue), null);
    }

    /**
     * @param context the context
     * @param defaultValue returned on an error
     * @return the value with its detail
     */
    public EvaluationDetail<String> stringDetail(Context context, String defaultValue) {
        Objects.requireNonNull(defaultValue, "defaultValue");
        return detail(context, ValueType.STRING, 0, defaultValue);
    }

    /**
     * @param context the context
     * @param defaultValue returned on an error (JSON-writable)
     * @return the value with its detail
     */
    public EvaluationDetail<Object> jsonDetail(Context context, Object defaultValue) {
        return detail(context, ValueType.JSON, 0, Json.write(defaultValue));
    }

    private <T> EvaluationDetail<T> detail(Context context, ValueType type, long bits, String text) {
        try {
            return client.detail(null, handle, context, type, bits, text);
        } finally {
            Reference.reachabilityFence(this);
        }
    }
}
