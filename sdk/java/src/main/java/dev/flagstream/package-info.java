/**
 * flagstream for Java: the Rust streaming client behind its C ABI, through
 * a JNI glue linked with it into one native library carried in the jar.
 *
 * <p>Start with {@link dev.flagstream.FlagstreamClient#builder()}; evaluate
 * with a reused {@link dev.flagstream.Context}, on hot paths through a
 * {@link dev.flagstream.Flag} handle. Errors of the library are
 * {@link dev.flagstream.FlagstreamException}s with a
 * {@link dev.flagstream.FlagstreamException.Status}; a native library that
 * cannot be loaded is an {@link java.lang.UnsatisfiedLinkError} saying which
 * system property ({@code flagstream.native.dir}, {@code flagstream.native.path})
 * or environment variable ({@code FLAGSTREAM_NATIVE_DIR}) to set.
 */
package dev.flagstream;
