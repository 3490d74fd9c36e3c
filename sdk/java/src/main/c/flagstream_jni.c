/* The JNI glue of the Java package: dev.flagstream.Native's methods on the
 * C ABI (sdk/ffi/include/flagstream.h). Linked with the static
 * libflagstream_ffi.a into libflagstream_jni.so, so one shared object
 * carries the wrapper and the engine (no version drift between them).
 *
 * This file: loading, the helpers every file uses (strings, errors; see
 * flagstream_jni.h) and the client's life. Evaluations are in
 * flagstream_jni_eval.c; contexts, flag handles and change listeners in
 * flagstream_jni_objects.c.
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

static jclass exception_class; /* dev/flagstream/FlagstreamException */
static jmethodID exception_of; /* static fromNative(int, String) */

/* ---- errors ------------------------------------------------------------ */

void fsj_throw_status(JNIEnv *env, flagstream_status status) {
    const uint8_t *msg = NULL;
    size_t len = flagstream_last_error(&msg);
    jstring text = fsj_new_string(env, msg, msg == NULL ? 0 : len);
    if (text == NULL) return; /* an OutOfMemoryError is pending */
    jobject ex = (*env)->CallStaticObjectMethod(env, exception_class, exception_of, (jint)status, text);
    if (ex != NULL && !(*env)->ExceptionCheck(env)) (*env)->Throw(env, (jthrowable)ex);
}

static void throw_npe(JNIEnv *env, const char *what) {
    jclass npe = (*env)->FindClass(env, "java/lang/NullPointerException");
    if (npe != NULL) (*env)->ThrowNew(env, npe, what);
}

void fsj_throw_oom(JNIEnv *env, const char *message) {
    jclass oom = (*env)->FindClass(env, "java/lang/OutOfMemoryError");
    if (oom != NULL) (*env)->ThrowNew(env, oom, message);
}

/* ---- strings ---------------------------------------------------------- */

/* UTF-16 code units decoded from UTF-8, then a Java string. The library's
 * text is valid UTF-8; bad bytes would become U+FFFD. */
jstring fsj_new_string(JNIEnv *env, const uint8_t *s, size_t len) {
    static const jchar empty = 0;
    if (len == 0) return (*env)->NewString(env, &empty, 0);
    jchar stack[256] = {0};
    jchar *buf = stack;
    if (len > sizeof stack / sizeof stack[0]) {
        buf = malloc(len * sizeof(jchar));
        if (buf == NULL) {
            fsj_throw_oom(env, "flagstream: decoding a string");
            return NULL;
        }
    }
    size_t n = 0;
    for (size_t i = 0; i < len;) {
        uint32_t c = s[i];
        size_t extra;
        if (c < 0x80) {
            extra = 0;
        } else if ((c & 0xE0) == 0xC0) {
            extra = 1;
            c &= 0x1F;
        } else if ((c & 0xF0) == 0xE0) {
            extra = 2;
            c &= 0x0F;
        } else if ((c & 0xF8) == 0xF0) {
            extra = 3;
            c &= 0x07;
        } else {
            buf[n++] = 0xFFFD;
            i++;
            continue;
        }
        size_t k = 1;
        if (extra <= len - i - 1) {
            for (; k <= extra && (s[i + k] & 0xC0) == 0x80; k++) c = (c << 6) | (s[i + k] & 0x3F);
        }
        if (k <= extra || c > 0x10FFFF) { /* truncated or malformed */
            buf[n++] = 0xFFFD;
            i++;
            continue;
        }
        i += extra + 1;
        if (c >= 0x10000) {
            c -= 0x10000;
            buf[n++] = (jchar)(0xD800 + (c >> 10));
            buf[n++] = (jchar)(0xDC00 + (c & 0x3FF));
        } else {
            buf[n++] = (jchar)c;
        }
    }
    jstring out = (*env)->NewString(env, buf, (jsize)n);
    if (buf != stack) free(buf);
    return out;
}

int fsj_get_utf8(JNIEnv *env, jstring s, fsj_utf8 *out, const char *what) {
    out->heap = NULL;
    out->ptr = out->stack;
    out->len = 0;
    if (s == NULL) {
        throw_npe(env, what);
        return 0;
    }
    jsize n = (*env)->GetStringLength(env, s);
    jchar cstack[256];
    jchar *chars = cstack;
    if ((size_t)n > sizeof cstack / sizeof cstack[0]) {
        chars = malloc((size_t)n * sizeof(jchar));
        if (chars == NULL) goto oom;
    }
    (*env)->GetStringRegion(env, s, 0, n, chars);
    size_t cap = (size_t)n * 3;
    if (cap > sizeof out->stack) {
        out->heap = malloc(cap);
        if (out->heap == NULL) {
            if (chars != cstack) free(chars);
            goto oom;
        }
        out->ptr = out->heap;
    }
    uint8_t *p = out->ptr;
    for (jsize i = 0; i < n; i++) {
        uint32_t c = chars[i];
        if (c >= 0xD800 && c <= 0xDBFF && i + 1 < n && chars[i + 1] >= 0xDC00 && chars[i + 1] <= 0xDFFF) {
            c = 0x10000 + ((c - 0xD800) << 10) + (chars[i + 1] - 0xDC00);
            i++;
        } else if (c >= 0xD800 && c <= 0xDFFF) {
            c = 0xFFFD;
        }
        if (c < 0x80) {
            *p++ = (uint8_t)c;
        } else if (c < 0x800) {
            *p++ = (uint8_t)(0xC0 | (c >> 6));
            *p++ = (uint8_t)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            *p++ = (uint8_t)(0xE0 | (c >> 12));
            *p++ = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            *p++ = (uint8_t)(0x80 | (c & 0x3F));
        } else {
            *p++ = (uint8_t)(0xF0 | (c >> 18));
            *p++ = (uint8_t)(0x80 | ((c >> 12) & 0x3F));
            *p++ = (uint8_t)(0x80 | ((c >> 6) & 0x3F));
            *p++ = (uint8_t)(0x80 | (c & 0x3F));
        }
    }
    out->len = (size_t)(p - out->ptr);
    if (chars != cstack) free(chars);
    return 1;
oom:
    fsj_throw_oom(env, "flagstream: encoding a string");
    return 0;
}

void fsj_release_utf8(fsj_utf8 *a) {
    free(a->heap);
    a->heap = NULL;
}

/* ---- loading ------------------------------------------------------------ */

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved) {
    (void)reserved;
    JNIEnv *env;
    if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK) return JNI_ERR;
    jclass c = (*env)->FindClass(env, "dev/flagstream/FlagstreamException");
    if (c == NULL) return JNI_ERR;
    exception_class = (*env)->NewGlobalRef(env, c);
    exception_of = (*env)->GetStaticMethodID(env, c, "fromNative",
                                             "(ILjava/lang/String;)Ldev/flagstream/FlagstreamException;");
    if (exception_class == NULL || exception_of == NULL) return JNI_ERR;
    if (!fsj_listeners_load(vm, env)) return JNI_ERR;
    return JNI_VERSION_1_8;
}

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
