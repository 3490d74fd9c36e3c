/* The JNI glue (see flagstream_jni.c): the objects a client is used with,
 * contexts and flag handles (owned by their Java objects, freed by them or
 * their Cleaner), and change listeners (a global reference to a
 * ListenerRef, called back on the library's threads).
 */
#include <pthread.h>
#include <stdlib.h>

#include "flagstream_jni.h"

/* ---- contexts and flag handles ----------------------------------------- */

JNIEXPORT jlong JNICALL Java_dev_flagstream_Native_contextNew(JNIEnv *env, jclass cls, jstring key) {
    (void)cls;
    fsj_utf8 k;
    if (!fsj_get_utf8(env, key, &k, "key")) return 0;
    flagstream_context *ctx = NULL;
    flagstream_status s = flagstream_context_new(k.ptr, k.len, &ctx);
    fsj_release_utf8(&k);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return 0;
    }
    return (jlong)(intptr_t)ctx;
}

JNIEXPORT jlong JNICALL Java_dev_flagstream_Native_contextFromJson(JNIEnv *env, jclass cls, jstring json) {
    (void)cls;
    fsj_utf8 j;
    if (!fsj_get_utf8(env, json, &j, "json")) return 0;
    flagstream_context *ctx = NULL;
    flagstream_status s = flagstream_context_from_json(j.ptr, j.len, &ctx);
    fsj_release_utf8(&j);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return 0;
    }
    return (jlong)(intptr_t)ctx;
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_contextSetString(JNIEnv *env, jclass cls, jlong ctx, jstring name,
                                                                   jstring value) {
    (void)cls;
    fsj_utf8 n, v;
    if (!fsj_get_utf8(env, name, &n, "name")) return;
    if (!fsj_get_utf8(env, value, &v, "value")) {
        fsj_release_utf8(&n);
        return;
    }
    flagstream_status s = flagstream_context_set_string(CONTEXT(ctx), n.ptr, n.len, v.ptr, v.len);
    fsj_release_utf8(&n);
    fsj_release_utf8(&v);
    if (s != FLAGSTREAM_STATUS_OK) fsj_throw_status(env, s);
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_contextSetNumber(JNIEnv *env, jclass cls, jlong ctx, jstring name,
                                                                   jdouble value) {
    (void)cls;
    fsj_utf8 n;
    if (!fsj_get_utf8(env, name, &n, "name")) return;
    flagstream_status s = flagstream_context_set_number(CONTEXT(ctx), n.ptr, n.len, value);
    fsj_release_utf8(&n);
    if (s != FLAGSTREAM_STATUS_OK) fsj_throw_status(env, s);
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_contextSetBool(JNIEnv *env, jclass cls, jlong ctx, jstring name,
                                                                 jboolean value) {
    (void)cls;
    fsj_utf8 n;
    if (!fsj_get_utf8(env, name, &n, "name")) return;
    flagstream_status s = flagstream_context_set_bool(CONTEXT(ctx), n.ptr, n.len, value == JNI_TRUE);
    fsj_release_utf8(&n);
    if (s != FLAGSTREAM_STATUS_OK) fsj_throw_status(env, s);
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_contextSetJson(JNIEnv *env, jclass cls, jlong ctx, jstring name,
                                                                 jstring json) {
    (void)cls;
    fsj_utf8 n, j;
    if (!fsj_get_utf8(env, name, &n, "name")) return;
    if (!fsj_get_utf8(env, json, &j, "json")) {
        fsj_release_utf8(&n);
        return;
    }
    flagstream_status s = flagstream_context_set_json(CONTEXT(ctx), n.ptr, n.len, j.ptr, j.len);
    fsj_release_utf8(&n);
    fsj_release_utf8(&j);
    if (s != FLAGSTREAM_STATUS_OK) fsj_throw_status(env, s);
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_contextFree(JNIEnv *env, jclass cls, jlong ctx) {
    (void)env, (void)cls;
    flagstream_context_free(CONTEXT(ctx));
}

JNIEXPORT jlong JNICALL Java_dev_flagstream_Native_flagNew(JNIEnv *env, jclass cls, jstring key) {
    (void)cls;
    fsj_utf8 k;
    if (!fsj_get_utf8(env, key, &k, "key")) return 0;
    flagstream_flag *flag = NULL;
    flagstream_status s = flagstream_flag_new(k.ptr, k.len, &flag);
    fsj_release_utf8(&k);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return 0;
    }
    return (jlong)(intptr_t)flag;
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_flagFree(JNIEnv *env, jclass cls, jlong flag) {
    (void)env, (void)cls;
    flagstream_flag_free((flagstream_flag *)(intptr_t)flag);
}

/* ---- change listeners --------------------------------------------------- */

static JavaVM *jvm;
static jclass string_class;        /* java/lang/String */
static jmethodID dispatch_method;  /* ListenerRef.dispatch(long, String[], boolean) */
static pthread_key_t attached_key; /* set on library threads this glue attached */

static void detach_at_exit(void *vm) {
    JavaVM *v = vm;
    (*v)->DetachCurrentThread(v);
}

int fsj_listeners_load(JavaVM *vm, JNIEnv *env) {
    jvm = vm;
    jclass c = (*env)->FindClass(env, "java/lang/String");
    if (c == NULL) return 0;
    string_class = (*env)->NewGlobalRef(env, c);
    c = (*env)->FindClass(env, "dev/flagstream/ListenerRef");
    if (c == NULL) return 0;
    dispatch_method = (*env)->GetMethodID(env, c, "dispatch", "(J[Ljava/lang/String;Z)V");
    if (string_class == NULL || dispatch_method == NULL) return 0;
    return pthread_key_create(&attached_key, detach_at_exit) == 0;
}

/* A listener's user data: the global reference to its ListenerRef. */
typedef struct {
    jobject ref;
} listener_data;

/* This thread's JNIEnv, attaching it as a daemon on its first call. */
static JNIEnv *attach(void) {
    JNIEnv *env = NULL;
    jint r = (*jvm)->GetEnv(jvm, (void **)&env, JNI_VERSION_1_8);
    if (r == JNI_OK) return env;
    if (r != JNI_EDETACHED) return NULL;
    JavaVMAttachArgs args = {JNI_VERSION_1_8, (char *)"flagstream-listener", NULL};
    if ((*jvm)->AttachCurrentThreadAsDaemon(jvm, (void **)&env, &args) != JNI_OK) return NULL;
    /* Detached by detach_at_exit when the library ends the thread. */
    pthread_setspecific(attached_key, jvm);
    return env;
}

static void on_change(void *user_data, uint64_t revision, const flagstream_str *flags, size_t count, bool missed) {
    listener_data *l = user_data;
    JNIEnv *env = attach();
    if (env == NULL) return;
    /* The thread never returns to Java: free every local reference made here. */
    if ((*env)->PushLocalFrame(env, 8) != 0) {
        (*env)->ExceptionClear(env);
        return;
    }
    jobjectArray keys = (*env)->NewObjectArray(env, (jsize)count, string_class, NULL);
    for (size_t i = 0; keys != NULL && i < count; i++) {
        jstring k = fsj_new_string(env, flags[i].ptr, flags[i].len);
        if (k == NULL) {
            keys = NULL;
            break;
        }
        (*env)->SetObjectArrayElement(env, keys, (jsize)i, k);
        (*env)->DeleteLocalRef(env, k);
    }
    if (keys != NULL) {
        (*env)->CallVoidMethod(env, l->ref, dispatch_method, (jlong)revision, keys, missed ? JNI_TRUE : JNI_FALSE);
    }
    /* dispatch catches what the listener throws; anything else (an
       OutOfMemoryError here) ends with this call. */
    if ((*env)->ExceptionCheck(env)) {
        (*env)->ExceptionDescribe(env);
        (*env)->ExceptionClear(env);
    }
    (*env)->PopLocalFrame(env, NULL);
}

JNIEXPORT jlong JNICALL Java_dev_flagstream_Native_onChange(JNIEnv *env, jclass cls, jlong c, jobject ref,
                                                            jlongArray out) {
    (void)cls;
    listener_data *l = malloc(sizeof *l);
    if (l == NULL) {
        fsj_throw_oom(env, "flagstream: a listener");
        return 0;
    }
    l->ref = (*env)->NewGlobalRef(env, ref);
    uint64_t id = 0;
    flagstream_status s = flagstream_client_on_change(CLIENT(c), on_change, l, &id);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        (*env)->DeleteGlobalRef(env, l->ref);
        free(l);
        return 0;
    }
    jlong data = (jlong)(intptr_t)l;
    (*env)->SetLongArrayRegion(env, out, 0, 1, &data);
    return (jlong)id;
}

JNIEXPORT jint JNICALL Java_dev_flagstream_Native_offChange(JNIEnv *env, jclass cls, jlong c, jlong id) {
    (void)cls;
    flagstream_status s = flagstream_client_off_change(CLIENT(c), (uint64_t)id);
    if (s != FLAGSTREAM_STATUS_OK && s != FLAGSTREAM_STATUS_CLOSED) fsj_throw_status(env, s);
    return (jint)s;
}

JNIEXPORT void JNICALL Java_dev_flagstream_Native_releaseListener(JNIEnv *env, jclass cls, jlong data) {
    (void)cls;
    listener_data *l = (listener_data *)(intptr_t)data;
    if (l == NULL) return;
    (*env)->DeleteGlobalRef(env, l->ref);
    free(l);
}
