/* The helpers every file of the JNI glue uses (flagstream_jni.h):
 * FlagstreamException from a status and the calling thread's last error,
 * Java strings to and from UTF-8; and their setup at load. */
#include <stdlib.h>
#include <string.h>

#include "flagstream_jni.h"

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

int fsj_util_load(JNIEnv *env) {
    jclass c = (*env)->FindClass(env, "dev/flagstream/FlagstreamException");
    if (c == NULL) return 0;
    exception_class = (*env)->NewGlobalRef(env, c);
    exception_of = (*env)->GetStaticMethodID(env, c, "fromNative",
                                             "(ILjava/lang/String;)Ldev/flagstream/FlagstreamException;");
    return exception_class != NULL && exception_of != NULL;
}
