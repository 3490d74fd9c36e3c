/* The JNI glue (see flagstream_jni.c): evaluations, by key or through a
 * flag handle. The value-only forms read the key and default into C
 * buffers and return primitives (string and JSON flags: the one String
 * made from the library's text); the detail forms also fill the caller's
 * long[] and String[] (EvaluationDetail's layout).
 */
#include <string.h>

#include "flagstream_jni.h"

/* ---- value-only evaluations (no Java allocation on success) ------------- */

JNIEXPORT jboolean JNICALL Java_dev_flagstream_Native_evalBool(JNIEnv *env, jclass cls, jlong c, jstring key,
                                                               jlong ctx, jboolean def) {
    (void)cls;
    fsj_utf8 k;
    if (!fsj_get_utf8(env, key, &k, "key")) return def;
    bool v = def == JNI_TRUE;
    flagstream_status s = flagstream_eval_bool(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), def == JNI_TRUE, &v, NULL);
    fsj_release_utf8(&k);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return def;
    }
    return v ? JNI_TRUE : JNI_FALSE;
}

JNIEXPORT jlong JNICALL Java_dev_flagstream_Native_evalInt(JNIEnv *env, jclass cls, jlong c, jstring key, jlong ctx,
                                                           jlong def) {
    (void)cls;
    fsj_utf8 k;
    if (!fsj_get_utf8(env, key, &k, "key")) return def;
    int64_t v = def;
    flagstream_status s = flagstream_eval_int(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), def, &v, NULL);
    fsj_release_utf8(&k);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return def;
    }
    return (jlong)v;
}

JNIEXPORT jdouble JNICALL Java_dev_flagstream_Native_evalFloat(JNIEnv *env, jclass cls, jlong c, jstring key,
                                                               jlong ctx, jdouble def) {
    (void)cls;
    fsj_utf8 k;
    if (!fsj_get_utf8(env, key, &k, "key")) return def;
    double v = def;
    flagstream_status s = flagstream_eval_float(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), def, &v, NULL);
    fsj_release_utf8(&k);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return def;
    }
    return v;
}

/* A string the library returned as a Java string, freed here. */
static jstring take_string(JNIEnv *env, flagstream_string v) {
    jstring out = fsj_new_string(env, v.ptr, v.len);
    flagstream_string_free(v);
    return out;
}

JNIEXPORT jstring JNICALL Java_dev_flagstream_Native_evalString(JNIEnv *env, jclass cls, jlong c, jstring key,
                                                                jlong ctx, jstring def) {
    (void)cls;
    fsj_utf8 k, d;
    if (!fsj_get_utf8(env, key, &k, "key")) return NULL;
    if (!fsj_get_utf8(env, def, &d, "defaultValue")) {
        fsj_release_utf8(&k);
        return NULL;
    }
    flagstream_string v = {NULL, 0};
    flagstream_status s = flagstream_eval_string(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), d.ptr, d.len, &v, NULL);
    fsj_release_utf8(&k);
    fsj_release_utf8(&d);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return NULL;
    }
    return take_string(env, v);
}

JNIEXPORT jstring JNICALL Java_dev_flagstream_Native_evalJson(JNIEnv *env, jclass cls, jlong c, jstring key,
                                                              jlong ctx, jstring def) {
    (void)cls;
    fsj_utf8 k, d;
    if (!fsj_get_utf8(env, key, &k, "key")) return NULL;
    if (!fsj_get_utf8(env, def, &d, "defaultValue")) {
        fsj_release_utf8(&k);
        return NULL;
    }
    flagstream_string v = {NULL, 0};
    flagstream_status s = flagstream_eval_json(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), d.ptr, d.len, &v, NULL);
    fsj_release_utf8(&k);
    fsj_release_utf8(&d);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return NULL;
    }
    return take_string(env, v);
}

JNIEXPORT jboolean JNICALL Java_dev_flagstream_Native_evalBoolFlag(JNIEnv *env, jclass cls, jlong c, jlong f,
                                                                   jlong ctx, jboolean def) {
    (void)cls;
    bool v = def == JNI_TRUE;
    flagstream_status s = flagstream_eval_bool_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), def == JNI_TRUE, &v, NULL);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return def;
    }
    return v ? JNI_TRUE : JNI_FALSE;
}

JNIEXPORT jlong JNICALL Java_dev_flagstream_Native_evalIntFlag(JNIEnv *env, jclass cls, jlong c, jlong f, jlong ctx,
                                                               jlong def) {
    (void)cls;
    int64_t v = def;
    flagstream_status s = flagstream_eval_int_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), def, &v, NULL);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return def;
    }
    return (jlong)v;
}

JNIEXPORT jdouble JNICALL Java_dev_flagstream_Native_evalFloatFlag(JNIEnv *env, jclass cls, jlong c, jlong f,
                                                                   jlong ctx, jdouble def) {
    (void)cls;
    double v = def;
    flagstream_status s = flagstream_eval_float_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), def, &v, NULL);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return def;
    }
    return v;
}

JNIEXPORT jstring JNICALL Java_dev_flagstream_Native_evalStringFlag(JNIEnv *env, jclass cls, jlong c, jlong f,
                                                                    jlong ctx, jstring def) {
    (void)cls;
    fsj_utf8 d;
    if (!fsj_get_utf8(env, def, &d, "defaultValue")) return NULL;
    flagstream_string v = {NULL, 0};
    flagstream_status s = flagstream_eval_string_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), d.ptr, d.len, &v, NULL);
    fsj_release_utf8(&d);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return NULL;
    }
    return take_string(env, v);
}

JNIEXPORT jstring JNICALL Java_dev_flagstream_Native_evalJsonFlag(JNIEnv *env, jclass cls, jlong c, jlong f,
                                                                  jlong ctx, jstring def) {
    (void)cls;
    fsj_utf8 d;
    if (!fsj_get_utf8(env, def, &d, "defaultValue")) return NULL;
    flagstream_string v = {NULL, 0};
    flagstream_status s = flagstream_eval_json_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), d.ptr, d.len, &v, NULL);
    fsj_release_utf8(&d);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        return NULL;
    }
    return take_string(env, v);
}

/* ---- evaluations with their detail -------------------------------------- */

/* Copies `d` into out[1..] (EvaluationDetail's indices) and its strings into
 * strings[0..2]; frees the detail's strings. 0 with an exception pending on
 * failure. */
static int put_detail(JNIEnv *env, flagstream_detail *d, jlong value_bits, jlongArray out, jobjectArray strings) {
    jlong v[10] = {
        value_bits,        (jlong)d->variation,  (jlong)d->reason,       (jlong)d->error_kind,
        (jlong)d->rule_index, (jlong)d->flag_version, (jlong)d->revision, d->in_rollout ? 1 : 0,
        d->stale ? 1 : 0,  (jlong)d->schedule_step,
    };
    (*env)->SetLongArrayRegion(env, out, 0, 10, v);
    int ok = !(*env)->ExceptionCheck(env);
    flagstream_string parts[2] = {d->rule_id, d->prerequisite_key};
    for (int i = 0; ok && i < 2; i++) {
        if (parts[i].len == 0) continue; /* absent (a rule without an id is empty) */
        jstring s = fsj_new_string(env, parts[i].ptr, parts[i].len);
        if (s == NULL) {
            ok = 0;
            break;
        }
        (*env)->SetObjectArrayElement(env, strings, i, s);
        (*env)->DeleteLocalRef(env, s);
        ok = !(*env)->ExceptionCheck(env);
    }
    flagstream_detail_free(d);
    return ok;
}

JNIEXPORT jstring JNICALL Java_dev_flagstream_Native_evalDetail(JNIEnv *env, jclass cls, jlong c, jstring key,
                                                                jlong f, jlong ctx, jint type, jlong def_bits,
                                                                jstring def_text, jlongArray out,
                                                                jobjectArray strings) {
    (void)cls;
    fsj_utf8 k = {0}, d = {0};
    k.ptr = k.stack;
    d.ptr = d.stack;
    if (f == 0 && !fsj_get_utf8(env, key, &k, "key")) return NULL;
    int text = type == FLAGSTREAM_TYPE_STRING || type == FLAGSTREAM_TYPE_JSON;
    if (text && !fsj_get_utf8(env, def_text, &d, "defaultValue")) {
        fsj_release_utf8(&k);
        return NULL;
    }
    flagstream_detail detail;
    memset(&detail, 0, sizeof detail);
    flagstream_string value = {NULL, 0};
    jlong bits = 0;
    flagstream_status s;
    switch (type) {
    case FLAGSTREAM_TYPE_BOOL: {
        bool v = def_bits != 0;
        s = f ? flagstream_eval_bool_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), def_bits != 0, &v, &detail)
              : flagstream_eval_bool(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), def_bits != 0, &v, &detail);
        bits = v ? 1 : 0;
        break;
    }
    case FLAGSTREAM_TYPE_INT: {
        int64_t v = def_bits;
        s = f ? flagstream_eval_int_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), def_bits, &v, &detail)
              : flagstream_eval_int(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), def_bits, &v, &detail);
        bits = v;
        break;
    }
    case FLAGSTREAM_TYPE_FLOAT: {
        double dv;
        memcpy(&dv, &def_bits, sizeof dv);
        double v = dv;
        s = f ? flagstream_eval_float_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), dv, &v, &detail)
              : flagstream_eval_float(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), dv, &v, &detail);
        memcpy(&bits, &v, sizeof bits);
        break;
    }
    case FLAGSTREAM_TYPE_STRING:
        s = f ? flagstream_eval_string_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), d.ptr, d.len, &value, &detail)
              : flagstream_eval_string(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), d.ptr, d.len, &value, &detail);
        break;
    default:
        s = f ? flagstream_eval_json_flag(CLIENT(c), FLAG(f), CONTEXT(ctx), d.ptr, d.len, &value, &detail)
              : flagstream_eval_json(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), d.ptr, d.len, &value, &detail);
        break;
    }
    fsj_release_utf8(&k);
    fsj_release_utf8(&d);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        flagstream_detail_free(&detail);
        flagstream_string_free(value);
        return NULL;
    }
    jstring result = NULL;
    if (text) {
        result = take_string(env, value);
        if (result == NULL) {
            flagstream_detail_free(&detail);
            return NULL;
        }
    }
    if (!put_detail(env, &detail, bits, out, strings)) return NULL;
    return result;
}

JNIEXPORT jstring JNICALL Java_dev_flagstream_Native_evalAt(JNIEnv *env, jclass cls, jlong c, jstring key, jlong ctx,
                                                            jint type, jstring def_json, jlong at_ms,
                                                            jlongArray out, jobjectArray strings) {
    (void)cls;
    fsj_utf8 k, d;
    if (!fsj_get_utf8(env, key, &k, "key")) return NULL;
    if (!fsj_get_utf8(env, def_json, &d, "defaultValue")) {
        fsj_release_utf8(&k);
        return NULL;
    }
    flagstream_detail detail;
    memset(&detail, 0, sizeof detail);
    flagstream_string value = {NULL, 0};
    flagstream_status s = flagstream_eval_at(CLIENT(c), k.ptr, k.len, CONTEXT(ctx), (uint32_t)type, d.ptr, d.len,
                                             (int64_t)at_ms, &value, &detail);
    fsj_release_utf8(&k);
    fsj_release_utf8(&d);
    if (s != FLAGSTREAM_STATUS_OK) {
        fsj_throw_status(env, s);
        flagstream_detail_free(&detail);
        flagstream_string_free(value);
        return NULL;
    }
    jstring result = take_string(env, value);
    if (result == NULL) {
        flagstream_detail_free(&detail);
        return NULL;
    }
    if (!put_detail(env, &detail, 0, out, strings)) return NULL;
    return result;
}
