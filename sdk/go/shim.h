/* The package's C wrappers around the flagstream ABI (included by every Go
 * file of the package that calls C, except export.go, whose preamble may
 * only declare). Each wrapper makes one ABI call and, when it did not
 * return OK, copies the calling OS thread's message (flagstream_last_error)
 * into a malloc'd buffer in the same C call: a goroutine may move to
 * another OS thread between two cgo calls, and the message is per OS
 * thread. Results come back by value, so no pointer to Go memory is passed
 * for them. Handles (C memory) come in as uintptr_t: a pointer to an
 * incomplete struct type as a cgo argument is checked at every call, at the
 * cost of a Go allocation per argument. So an evaluation allocates nothing
 * in Go. */
#ifndef FLAGSTREAM_GO_SHIM_H
#define FLAGSTREAM_GO_SHIM_H

#include <stdlib.h>
#include <string.h>
#include "flagstream.h"

// A message copied out of the library (malloc'd; NULL when none).
typedef struct { char *ptr; size_t len; } fs_err;

static inline fs_err fs_error(int status) {
	fs_err e = {NULL, 0};
	if (status == FLAGSTREAM_STATUS_OK) return e;
	const uint8_t *m = NULL;
	size_t n = flagstream_last_error(&m);
	e.ptr = malloc(n + 1);
	if (e.ptr == NULL) return e;
	if (n > 0 && m != NULL) memcpy(e.ptr, m, n);
	e.ptr[n] = 0;
	e.len = n;
	return e;
}

typedef struct { int status; fs_err err; } fs_ret;

static inline fs_ret fs_ret_of(int status) {
	fs_ret r;
	r.status = status;
	r.err = fs_error(status);
	return r;
}

// --- clients

typedef struct { int status; flagstream_client *client; fs_err err; } fs_client_ret;

static inline fs_client_ret fs_client_new(const uint8_t *options, size_t len) {
	fs_client_ret r = {0, NULL, {NULL, 0}};
	r.status = flagstream_client_new(options, len, &r.client);
	r.err = fs_error(r.status);
	return r;
}

static inline fs_ret fs_client_wait_ready(uintptr_t c_, uint64_t timeout_ms) {
	const flagstream_client *c = (const flagstream_client *)c_;
	return fs_ret_of(flagstream_client_wait_ready(c, timeout_ms));
}

static inline fs_ret fs_client_close(uintptr_t c_, uint64_t timeout_ms) {
	const flagstream_client *c = (const flagstream_client *)c_;
	return fs_ret_of(flagstream_client_close(c, timeout_ms));
}

typedef struct { int status; uint32_t state; uint64_t revision; fs_err err; } fs_status_ret;

static inline fs_status_ret fs_client_status(uintptr_t c_) {
	const flagstream_client *c = (const flagstream_client *)c_;
	fs_status_ret r = {0, 0, 0, {NULL, 0}};
	r.status = flagstream_client_status(c, &r.state, &r.revision);
	r.err = fs_error(r.status);
	return r;
}

typedef struct { int status; flagstream_stats stats; fs_err err; } fs_stats_ret;

static inline fs_stats_ret fs_client_stats(uintptr_t c_) {
	const flagstream_client *c = (const flagstream_client *)c_;
	fs_stats_ret r;
	memset(&r, 0, sizeof r);
	r.status = flagstream_client_stats(c, &r.stats);
	r.err = fs_error(r.status);
	return r;
}

// --- change listeners: the library calls the trampoline on its own
// thread; the trampoline calls the exported Go function (export.go).

extern void fsGoOnChange(uintptr_t handle, uint64_t revision, flagstream_str *flags, size_t count, _Bool missed);

static inline void fs_change_trampoline(void *user_data, uint64_t revision, const flagstream_str *flags, size_t count, bool missed) {
	fsGoOnChange((uintptr_t)user_data, revision, (flagstream_str *)flags, count, missed);
}

typedef struct { int status; uint64_t listener; fs_err err; } fs_listener_ret;

static inline fs_listener_ret fs_on_change(uintptr_t c_, uintptr_t handle) {
	const flagstream_client *c = (const flagstream_client *)c_;
	fs_listener_ret r = {0, 0, {NULL, 0}};
	r.status = flagstream_client_on_change(c, fs_change_trampoline, (void *)handle, &r.listener);
	r.err = fs_error(r.status);
	return r;
}

static inline fs_ret fs_off_change(uintptr_t c_, uint64_t listener) {
	const flagstream_client *c = (const flagstream_client *)c_;
	return fs_ret_of(flagstream_client_off_change(c, listener));
}

// --- contexts and flag handles

typedef struct { int status; flagstream_context *context; fs_err err; } fs_context_ret;

static inline fs_context_ret fs_context_new(const uint8_t *key, size_t len) {
	fs_context_ret r = {0, NULL, {NULL, 0}};
	r.status = flagstream_context_new(key, len, &r.context);
	r.err = fs_error(r.status);
	return r;
}

static inline fs_context_ret fs_context_from_json(const uint8_t *json, size_t len) {
	fs_context_ret r = {0, NULL, {NULL, 0}};
	r.status = flagstream_context_from_json(json, len, &r.context);
	r.err = fs_error(r.status);
	return r;
}

static inline fs_ret fs_context_set_string(uintptr_t c_, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl) {
	flagstream_context *c = (flagstream_context *)c_;
	return fs_ret_of(flagstream_context_set_string(c, n, nl, v, vl));
}

static inline fs_ret fs_context_set_number(uintptr_t c_, const uint8_t *n, size_t nl, double v) {
	flagstream_context *c = (flagstream_context *)c_;
	return fs_ret_of(flagstream_context_set_number(c, n, nl, v));
}

static inline fs_ret fs_context_set_bool(uintptr_t c_, const uint8_t *n, size_t nl, bool v) {
	flagstream_context *c = (flagstream_context *)c_;
	return fs_ret_of(flagstream_context_set_bool(c, n, nl, v));
}

static inline fs_ret fs_context_set_json(uintptr_t c_, const uint8_t *n, size_t nl, const uint8_t *v, size_t vl) {
	flagstream_context *c = (flagstream_context *)c_;
	return fs_ret_of(flagstream_context_set_json(c, n, nl, v, vl));
}

typedef struct { int status; flagstream_flag *flag; fs_err err; } fs_flag_ret;

static inline fs_flag_ret fs_flag_new(const uint8_t *key, size_t len) {
	fs_flag_ret r = {0, NULL, {NULL, 0}};
	r.status = flagstream_flag_new(key, len, &r.flag);
	r.err = fs_error(r.status);
	return r;
}

// --- evaluations. The plain ones (no detail) copy no message: their
// caller returns the default on any failure.

typedef struct { int status; bool value; } fs_bool_plain;
typedef struct { int status; int64_t value; } fs_int_plain;
typedef struct { int status; double value; } fs_float_plain;

static inline fs_bool_plain fs_bool(uintptr_t c_, const uint8_t *k, size_t kl, uintptr_t x_, bool d) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_bool_plain r = {0, d};
	r.status = flagstream_eval_bool(c, k, kl, x, d, &r.value, NULL);
	return r;
}

static inline fs_int_plain fs_int(uintptr_t c_, const uint8_t *k, size_t kl, uintptr_t x_, int64_t d) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_int_plain r = {0, d};
	r.status = flagstream_eval_int(c, k, kl, x, d, &r.value, NULL);
	return r;
}

static inline fs_float_plain fs_float(uintptr_t c_, const uint8_t *k, size_t kl, uintptr_t x_, double d) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_float_plain r = {0, d};
	r.status = flagstream_eval_float(c, k, kl, x, d, &r.value, NULL);
	return r;
}

static inline fs_bool_plain fs_bool_flag(uintptr_t c_, uintptr_t f_, uintptr_t x_, bool d) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_flag *f = (const flagstream_flag *)f_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_bool_plain r = {0, d};
	r.status = flagstream_eval_bool_flag(c, f, x, d, &r.value, NULL);
	return r;
}

static inline fs_int_plain fs_int_flag(uintptr_t c_, uintptr_t f_, uintptr_t x_, int64_t d) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_flag *f = (const flagstream_flag *)f_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_int_plain r = {0, d};
	r.status = flagstream_eval_int_flag(c, f, x, d, &r.value, NULL);
	return r;
}

static inline fs_float_plain fs_float_flag(uintptr_t c_, uintptr_t f_, uintptr_t x_, double d) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_flag *f = (const flagstream_flag *)f_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_float_plain r = {0, d};
	r.status = flagstream_eval_float_flag(c, f, x, d, &r.value, NULL);
	return r;
}

// With the detail (its strings owned by the library until
// fs_detail_release) and the message on failure.

typedef struct { int status; bool value; flagstream_detail detail; fs_err err; } fs_bool_detail;
typedef struct { int status; int64_t value; flagstream_detail detail; fs_err err; } fs_int_detail;
typedef struct { int status; double value; flagstream_detail detail; fs_err err; } fs_float_detail;

static inline fs_bool_detail fs_bool_d(uintptr_t c_, const uint8_t *k, size_t kl, uintptr_t f_, uintptr_t x_, bool d) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_flag *f = (const flagstream_flag *)f_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_bool_detail r;
	memset(&r, 0, sizeof r);
	r.value = d;
	r.status = f != NULL ? flagstream_eval_bool_flag(c, f, x, d, &r.value, &r.detail)
	                     : flagstream_eval_bool(c, k, kl, x, d, &r.value, &r.detail);
	r.err = fs_error(r.status);
	return r;
}

static inline fs_int_detail fs_int_d(uintptr_t c_, const uint8_t *k, size_t kl, uintptr_t f_, uintptr_t x_, int64_t d) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_flag *f = (const flagstream_flag *)f_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_int_detail r;
	memset(&r, 0, sizeof r);
	r.value = d;
	r.status = f != NULL ? flagstream_eval_int_flag(c, f, x, d, &r.value, &r.detail)
	                     : flagstream_eval_int(c, k, kl, x, d, &r.value, &r.detail);
	r.err = fs_error(r.status);
	return r;
}

static inline fs_float_detail fs_float_d(uintptr_t c_, const uint8_t *k, size_t kl, uintptr_t f_, uintptr_t x_, double d) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_flag *f = (const flagstream_flag *)f_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_float_detail r;
	memset(&r, 0, sizeof r);
	r.value = d;
	r.status = f != NULL ? flagstream_eval_float_flag(c, f, x, d, &r.value, &r.detail)
	                     : flagstream_eval_float(c, k, kl, x, d, &r.value, &r.detail);
	r.err = fs_error(r.status);
	return r;
}

// Text results (a string flag's value, JSON text): copied into the
// caller's buffer `buf` when they fit (`len <= cap`, the library's string
// freed here), else handed back in `big` for the caller to copy and free.
typedef struct { int status; size_t len; flagstream_string big; flagstream_detail detail; fs_err err; } fs_text_ret;

static inline void fs_text_take(fs_text_ret *r, flagstream_string v, uint8_t *buf, size_t cap) {
	r->len = v.len;
	if (v.len <= cap) {
		if (v.len > 0) memcpy(buf, v.ptr, v.len);
		flagstream_string_free(v);
	} else {
		r->big = v;
	}
}

// kind: 0 string, 1 JSON.
static inline fs_text_ret fs_text(int kind, uintptr_t c_, const uint8_t *k, size_t kl, uintptr_t f_,
                           uintptr_t x_, const uint8_t *d, size_t dl, uint8_t *buf, size_t cap, int want_detail) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_flag *f = (const flagstream_flag *)f_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_text_ret r;
	memset(&r, 0, sizeof r);
	flagstream_string v = {NULL, 0};
	flagstream_detail *dp = want_detail ? &r.detail : NULL;
	if (kind == 0) {
		r.status = f != NULL ? flagstream_eval_string_flag(c, f, x, d, dl, &v, dp) : flagstream_eval_string(c, k, kl, x, d, dl, &v, dp);
	} else {
		r.status = f != NULL ? flagstream_eval_json_flag(c, f, x, d, dl, &v, dp) : flagstream_eval_json(c, k, kl, x, d, dl, &v, dp);
	}
	if (r.status != FLAGSTREAM_STATUS_OK) {
		if (want_detail) r.err = fs_error(r.status);
		return r;
	}
	fs_text_take(&r, v, buf, cap);
	return r;
}

static inline fs_text_ret fs_eval_at(uintptr_t c_, const uint8_t *k, size_t kl, uintptr_t x_, uint32_t type,
                              const uint8_t *d, size_t dl, int64_t at_ms, uint8_t *buf, size_t cap) {
	const flagstream_client *c = (const flagstream_client *)c_;
	const flagstream_context *x = (const flagstream_context *)x_;
	fs_text_ret r;
	memset(&r, 0, sizeof r);
	flagstream_string v = {NULL, 0};
	r.status = flagstream_eval_at(c, k, kl, x, type, d, dl, at_ms, &v, &r.detail);
	if (r.status != FLAGSTREAM_STATUS_OK) {
		r.err = fs_error(r.status);
		return r;
	}
	fs_text_take(&r, v, buf, cap);
	return r;
}

// Frees a detail's strings (passed by value: no Go pointer crosses).
static inline void fs_detail_release(flagstream_string rule_id, flagstream_string prerequisite_key) {
	flagstream_detail d;
	memset(&d, 0, sizeof d);
	d.rule_id = rule_id;
	d.prerequisite_key = prerequisite_key;
	flagstream_detail_free(&d);
}

#endif
