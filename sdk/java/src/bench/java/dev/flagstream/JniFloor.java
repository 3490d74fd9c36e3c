package dev.flagstream;

/**
 * For the benchmark only (it is compiled into bench-classes, not the jar):
 * the package-private {@link Native#abiVersion()}, a native method that
 * does nothing but cross the JNI boundary (flagstream_abi_version returns
 * a constant), so the benchmark can time the crossing on its own. The
 * library must be loaded first (by making a client or a context).
 */
public final class JniFloor {
    private JniFloor() {}

    /** @return the C ABI's version, through one JNI call */
    public static int abiVersion() {
        return Native.abiVersion();
    }
}
