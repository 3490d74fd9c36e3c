package dev.flagstream;

/**
 * The JNI glue's entry points ({@code src/main/c/*.c}). Every
 * method that fails throws a {@link FlagstreamException} built from the C
 * status and the calling thread's {@code flagstream_last_error}, read in the
 * same native call. Handles are the C pointers as {@code long}. Only
 * {@link NativeLoader} makes sure the library is loaded; every other caller
 * holds a handle, so it was.
 *
 * <p>The value-only evaluations ({@code eval*}) allocate nothing on the
 * Java heap when they succeed: keys and defaults are read with
 * {@code GetStringRegion} into C buffers, results come back as primitives.
 */
final class Native {
    private Native() {}

    /** The glue's own interface version: bumped when a method below changes. */
    static final int GLUE_VERSION = 1;

    static native int abiVersion();

    static native int glueVersion();

    // Clients.
    static native long clientNew(String optionsJson);

    /** True with data, false on timeout. */
    static native boolean clientWaitReady(long client, long timeoutMs);

    static native void clientClose(long client, long timeoutMs);

    static native void clientFree(long client);

    /** out[0] state, out[1] revision. */
    static native void clientStatus(long client, long[] out);

    /** out: the {@link Stats#COUNT} counters in order. */
    static native void clientStats(long client, long[] out);

    /** Registers {@code ref.dispatch}; returns the listener id, out[0] = the glue's user data. */
    static native long onChange(long client, ListenerRef ref, long[] out);

    /** Returns 0 (OK) or 2 (CLOSED: the client's close stops the listener); throws otherwise. */
    static native int offChange(long client, long listener);

    /** Frees a listener's user data (its global reference) once its callback can no longer run. */
    static native void releaseListener(long userData);

    // Contexts and flag handles.
    static native long contextNew(String key);

    static native long contextFromJson(String json);

    static native void contextSetString(long context, String name, String value);

    static native void contextSetNumber(long context, String name, double value);

    static native void contextSetBool(long context, String name, boolean value);

    static native void contextSetJson(long context, String name, String json);

    static native void contextFree(long context);

    static native long flagNew(String key);

    static native void flagFree(long flag);

    // Evaluations by key.
    static native boolean evalBool(long client, String key, long context, boolean def);

    static native long evalInt(long client, String key, long context, long def);

    static native double evalFloat(long client, String key, long context, double def);

    static native String evalString(long client, String key, long context, String def);

    static native String evalJson(long client, String key, long context, String defJson);

    // Evaluations through a flag handle.
    static native boolean evalBoolFlag(long client, long flag, long context, boolean def);

    static native long evalIntFlag(long client, long flag, long context, long def);

    static native double evalFloatFlag(long client, long flag, long context, double def);

    static native String evalStringFlag(long client, long flag, long context, String def);

    static native String evalJsonFlag(long client, long flag, long context, String defJson);

    /**
     * An evaluation with its detail, by key ({@code flag} 0) or through a
     * flag handle. {@code type} is {@link ValueType#code}; the default is
     * {@code defBits} (bool 0/1, int, a double's raw bits) or
     * {@code defText} (string; JSON text). Fills {@code out} (value bits at
     * 0, then {@link EvaluationDetail}'s fields) and {@code strings} (rule
     * id, prerequisite key); returns the string or JSON value, else null.
     */
    static native String evalDetail(long client, String key, long flag, long context, int type, long defBits,
            String defText, long[] out, String[] strings);

    /** As {@link #evalDetail} at {@code atMs} (Unix ms), default and value as JSON text. */
    static native String evalAt(long client, String key, long context, int type, String defJson, long atMs,
            long[] out, String[] strings);
}
