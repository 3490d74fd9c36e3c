/* The JNI glue of the Java package: dev.flagstream.Native's methods on the
 * C ABI (sdk/ffi/include/flagstream.h). Linked with the static
 * libflagstream_ffi.a into libflagstream_jni.so, so one shared object
 * carries the wrapper and the engine (no version drift between them).
 *
 * This file: the client's life. Loading is flagstream_jni_load.c; the
 * helpers every file uses (strings, errors; flagstream_jni.h) are in
 * flagstream_jni_util.c;
 * evaluations in flagstream_jni_eval.c; contexts, flag handles and change
 * listeners in flagstream_jni_objects.c.
 *
 * Rules kept by every function:
 * - A call that does not return OK reads flagstream_last_error in the same
 *   JNI call (the message is per OS thread) and throws a
 *   dev.flagstream.FlagstreamException (FlagstreamException.fromNative).
 * - Java strings cross as UTF-8 encoded here from GetStringRegion's UTF-16
 *   into C buffers (on the stack when short): no Java heap allocation, no
 *   modified UTF-8. Strings coming back are decoded from UTF-8 and made
 *   with NewString.
 * - The value-only evaluations create no Java object when they succeed.
 * - Change listeners: the C callback runs on a library thread, attached to
 *   the JVM as a daemon on its first call and detached when that thread
 *   exits (a pthread key's destructor); each call runs in a local frame.
 */
#include <stdlib.h>
#include <string.h>

#include "flagstream_jni.h"

/* dev.flagstream.Native.GLUE_VERSION: bumped when a native method changes. */
#define FLAGSTREAM_JNI_GLUE_VERSION 1

JNIEXPORT jint JNICALL Java_dev_flagstream_Native_abiVersion(JNIEnv *env, jclass cls) {
    (void)env, (void)cls;
    return (jint)flagstream_abi_version();
}

JNIEXPORT jint JNICALL Java_dev_flagstream_Native_glueVersion(JNIEnv *env, jclass cls) {
    (void)env, (void)cls;
    return FLAGSTREAM_JNI_GLUE_VERSION;
}

/* ---- clients ------------------------------------------------------------ */

JNIEXPORT jlong JNICALL Java_dev_flagstream_Native_clientNew(JNIEnv *env, jclass cls, jstring options) {
    (void)cls;
    fsj_utf8 o;
    if (!fsj_get_utf8(env, options, &o, "options")) return 0;
    flagstream_client *client = NULL;
    flagstream_status s = flagstream_client_new(o.ptr, o.len, &client);
    fsj_release_utf8(&o);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return 0;
    }
    return (jlong)(intptr_t)client;
}

JNIEXPORT jboolean JNICALL Java_dev_flagstream_Native_clientWaitReady(JNIEnv *env, jclass cls, jlong c, jlong ms) {
    (void)cls;
    flagstream_status s = flagstream_client_wait_ready(CLIENT(c), (uint64_t)ms);
    if (s == FLAGSTREAM_STATUS_OK) return JNI_TRUE;
    if (s != FLAGSTREAM_STATUS_TIMEOUT) fsj_throw_status(env, s);
    return JNI_FALSE;
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_clientClose(JNIEnv *env, jclass cls, jlong c, jlong ms) {
    (void)cls;
    flagstream_status s = flagstream_client_close(CLIENT(c), (uint64_t)ms);
    if (s != FLAGSTREAM_STATUS_OK) fsj_throw_status(env, s);
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_clientFree(JNIEnv *env, jclass cls, jlong c) {
    (void)env, (void)cls;
    flagstream_client_free((flagstream_client *)(intptr_t)c);
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_clientStatus(JNIEnv *env, jclass cls, jlong c, jlongArray out) {
    (void)cls;
    uint32_t state = 0;
    uint64_t revision = 0;
    flagstream_status s = flagstream_client_status(CLIENT(c), &state, &revision);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return;
    }
    jlong v[2] = {(jlong)state, (jlong)revision};
    (*env)->SetLongArrayRegion(env, out, 0, 2, v);
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_clientStats(JNIEnv *env, jclass cls, jlong c, jlongArray out) {
    (void)cls;
    flagstream_stats st;
    memset(&st, 0, sizeof st);
    flagstream_status s = flagstream_client_stats(CLIENT(c), &st);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return;
    }
    /* The order of dev.flagstream.Stats. */
    jlong v[17] = {
        (jlong)st.default_not_found, (jlong)st.default_not_ready, (jlong)st.default_wrong_type,
        (jlong)st.default_malformed, (jlong)st.connects,          (jlong)st.reconnects,
        (jlong)st.endpoint_switches, (jlong)st.stalls,            (jlong)st.resyncs,
        (jlong)st.checksum_mismatches, (jlong)st.diverged_heads,  (jlong)st.retry_hints,
        (jlong)st.snapshots_applied, (jlong)st.deltas_applied,    (jlong)st.cache_writes,
        (jlong)st.cache_errors,      (jlong)st.stale_ms,
    };
    (*env)->SetLongArrayRegion(env, out, 0, 17, v);
}
