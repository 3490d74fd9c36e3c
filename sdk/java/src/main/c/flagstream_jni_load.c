/* JNI_OnLoad of the glue: sets up the helpers (flagstream_jni_util.c) and
 * what the change listeners need (flagstream_jni_objects.c). */
#include "flagstream_jni.h"

JNIEXPORT jint JNICALL JNI_OnLoad(JavaVM *vm, void *reserved) {
    (void)reserved;
    JNIEnv *env;
    if ((*vm)->GetEnv(vm, (void **)&env, JNI_VERSION_1_8) != JNI_OK) return JNI_ERR;
    if (!fsj_util_load(env)) return JNI_ERR;
    if (!fsj_listeners_load(vm, env)) return JNI_ERR;
    return JNI_VERSION_1_8;
}

