/* Internal to the JNI glue (src/main/c): what its files share.
 *
 *   flagstream_jni.c          loading, strings, errors, the client's life
 *   flagstream_jni_eval.c     evaluations, value-only and with their detail
 *   flagstream_jni_objects.c  contexts, flag handles, change listeners
 *
 * Everything declared here has hidden visibility: libflagstream_jni.so
 * exports only JNI_OnLoad and the Java_* functions (JNIEXPORT). The names
 * carry the fsj_ prefix so they cannot meet a C symbol of the static
 * library they are linked with.
 */
#ifndef FLAGSTREAM_JNI_H
#define FLAGSTREAM_JNI_H

#include <jni.h>
#include <stddef.h>
#include <stdint.h>

#include "flagstream.h"

#pragma GCC visibility push(hidden)

#define CLIENT(h) ((const flagstream_client *)(intptr_t)(h))
#define CONTEXT(h) ((flagstream_context *)(intptr_t)(h))
#define FLAG(h) ((const flagstream_flag *)(intptr_t)(h))

/* ---- strings (flagstream_jni_util.c) ----------------------------------- */

/* A Java string as UTF-8, in `stack` when it fits, else on the C heap. */
typedef struct {
    uint8_t *ptr;
    size_t len;
    uint8_t *heap;
    uint8_t stack[512];
} fsj_utf8;

/* Fills `out` from `s` (UTF-16 read with GetStringRegion, encoded here: no
 * Java heap allocation, no modified UTF-8; unpaired surrogates become
 * U+FFFD). 0 with an exception pending on failure (a NullPointerException
 * naming `what` for a null `s`); `out` then needs no release. */
int fsj_get_utf8(JNIEnv *env, jstring s, fsj_utf8 *out, const char *what);

/* Frees what fsj_get_utf8 put on the heap; safe to call twice. */
void fsj_release_utf8(fsj_utf8 *a);

/* A Java string decoded from UTF-8 (bad bytes become U+FFFD); NULL with an
 * exception pending on failure. */
jstring fsj_new_string(JNIEnv *env, const uint8_t *s, size_t len);

/* ---- errors (flagstream_jni_util.c) ------------------------------------ */

/* Throws the dev.flagstream.FlagstreamException for `status` with this
 * thread's flagstream_last_error message: call it in the same native call
 * that failed, before any other call into the library. */
void fsj_throw_status(JNIEnv *env, flagstream_status status);

/* Throws an OutOfMemoryError with `message`. */
void fsj_throw_oom(JNIEnv *env, const char *message);

/* ---- change listeners (flagstream_jni_objects.c) ----------------------- */

/* Called by JNI_OnLoad: what the listener callbacks need later (the VM,
 * the classes and method they call, the thread key that detaches). 0 on
 * failure. */
int fsj_listeners_load(JavaVM *vm, JNIEnv *env);

/* ---- loading (flagstream_jni_util.c) ------------------------------------ */

/* Called by JNI_OnLoad: the exception class and factory the helpers use.
 * 0 on failure. */
int fsj_util_load(JNIEnv *env);

#pragma GCC visibility pop

#endif
