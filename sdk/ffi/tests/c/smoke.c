/* The C ABI as a C user meets it, against a real relay:
 *   smoke RELAY_URL SDK_KEY
 * Prints one line per step; exits 0 when every step held, else 1 with the
 * step that failed. Run by tests/tests/bindings/c_abi.rs. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "flagstream.h"

static int failed = 0;

static void check(int ok, const char *what) {
    printf("%s %s\n", ok ? "ok  " : "FAIL", what);
    if (!ok) failed = 1;
}

static int last_error_says(const char *part) {
    const uint8_t *msg = NULL;
    size_t len = flagstream_last_error(&msg);
    char buf[512];
    if (len >= sizeof buf) len = sizeof buf - 1;
    if (len > 0) memcpy(buf, msg, len);
    buf[len] = 0;
    printf("     (last error: %s)\n", buf);
    return strstr(buf, part) != NULL;
}

#define S(x) (const uint8_t *)(x), strlen(x)

/* What the change listener saw, under its own lock. */
typedef struct {
    pthread_mutex_t lock;
    pthread_cond_t changed;
    int seen;
    uint64_t revision;
} seen_t;

static void on_change(void *user_data, uint64_t revision, const flagstream_str *flags, size_t count, bool missed) {
    seen_t *s = user_data;
    pthread_mutex_lock(&s->lock);
    for (size_t i = 0; i < count && !missed; i++) {
        if (flags[i].len == 9 && memcmp(flags[i].ptr, "from-test", 9) == 0) {
            s->seen = 1;
            s->revision = revision;
        }
    }
    pthread_cond_signal(&s->changed);
    pthread_mutex_unlock(&s->lock);
}

/* A wait for data on another thread, and how it ended. */
typedef struct {
    flagstream_client *client;
    int status;
} waited_t;

static void *wait_for_data(void *arg) {
    waited_t *w = arg;
    w->status = (int)flagstream_client_wait_ready(w->client, 60000);
    return NULL;
}

static int same(flagstream_string s, const char *text) {
    return s.len == strlen(text) && (s.len == 0 || memcmp(s.ptr, text, s.len) == 0);
}

/* In a forked child: the parent's flags first (marked stale), then the
   child's own sync. Exits with the child's verdict. */
static void in_child(flagstream_client *client, flagstream_context *ctx) {
    bool on = false;
    flagstream_detail d;
    check(flagstream_eval_bool(client, S("new-checkout"), ctx, false, &on, &d) == FLAGSTREAM_STATUS_OK && on
              && d.reason == FLAGSTREAM_REASON_RULE_MATCH && d.stale,
          "child: the parent's flags are served at once, marked stale");
    flagstream_detail_free(&d);
    check(flagstream_client_wait_ready(client, 20000) == FLAGSTREAM_STATUS_OK, "child: its own sync has data");
    check(flagstream_eval_bool(client, S("new-checkout"), ctx, false, &on, &d) == FLAGSTREAM_STATUS_OK && on
              && !d.stale,
          "child: then its own sync's flags are served, not stale");
    flagstream_detail_free(&d);
    flagstream_stats st;
    check(flagstream_client_stats(client, &st) == FLAGSTREAM_STATUS_OK && st.connects >= 1 && st.snapshots_applied >= 1,
          "child: its own stream connected and applied a snapshot");
    check(flagstream_client_close(client, 5000) == FLAGSTREAM_STATUS_OK,
          "child: the client closes (the parent's listener is left to the parent, not waited for)");
    flagstream_client_free(client);
    fflush(stdout);
    _exit(failed);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: smoke RELAY_URL SDK_KEY\n");
        return 2;
    }
    check(flagstream_abi_version() == FLAGSTREAM_ABI_VERSION, "the library's ABI version is the header's");

    flagstream_client *client = NULL;
    check(flagstream_client_new(S("{\"endpoint\": []}"), &client) == FLAGSTREAM_STATUS_INVALID_ARGUMENT
              && client == NULL && last_error_says("unknown field `endpoint`"),
          "an unknown option is refused, naming it");

    char options[1024];
    snprintf(options, sizeof options, "{\"endpoints\": [\"%s\"], \"sdk_key\": \"%s\"}", argv[1], argv[2]);
    check(flagstream_client_new(S(options), &client) == FLAGSTREAM_STATUS_OK && client != NULL, "a client is made");
    check(flagstream_client_wait_ready(client, 20000) == FLAGSTREAM_STATUS_OK, "it has data from the relay");

    flagstream_context *ctx = NULL;
    check(flagstream_context_new(S("user-42"), &ctx) == FLAGSTREAM_STATUS_OK, "a context is made");
    check(flagstream_context_set_string(ctx, S("country"), S("US")) == FLAGSTREAM_STATUS_OK
              && flagstream_context_set_string(ctx, S("plan"), S("enterprise")) == FLAGSTREAM_STATUS_OK
              && flagstream_context_set_number(ctx, S("seats"), 12) == FLAGSTREAM_STATUS_OK,
          "attributes are set on the kept context");
    const uint8_t *msg = (const uint8_t *)"x";
    check(flagstream_last_error(&msg) == 0 && msg == NULL, "after a call that succeeded there is no message");

    bool on = false;
    flagstream_detail d;
    check(flagstream_eval_bool(client, S("new-checkout"), ctx, false, &on, &d) == FLAGSTREAM_STATUS_OK && on
              && d.reason == FLAGSTREAM_REASON_RULE_MATCH && d.rule_index == 0 && d.variation == 0 && d.revision > 0
              && d.error_kind == FLAGSTREAM_ERROR_NONE && same(d.rule_id, "us-enterprise") && d.schedule_step == -1
              && d.prerequisite_key.ptr == NULL && !d.stale,
          "a rule match, with its detail and the rule's id");
    flagstream_detail_free(&d);
    flagstream_detail_free(&d);

    flagstream_string theme = {0};
    check(flagstream_eval_string(client, S("theme"), ctx, S("light"), &theme, &d) == FLAGSTREAM_STATUS_OK
              && theme.len == 4 && memcmp(theme.ptr, "dark", 4) == 0 && d.reason == FLAGSTREAM_REASON_TARGET_MATCH,
          "a string flag's target, in a string the library owns");
    flagstream_string_free(theme);
    flagstream_detail_free(&d);

    int64_t mb = 0;
    check(flagstream_eval_int(client, S("max-upload-mb"), ctx, 1, &mb, &d) == FLAGSTREAM_STATUS_OK && mb == 100
              && d.reason == FLAGSTREAM_REASON_RULE_MATCH,
          "an int flag's rule");
    flagstream_detail_free(&d);
    double ratio = 0;
    check(flagstream_eval_float(client, S("max-upload-mb"), ctx, 0.5, &ratio, &d) == FLAGSTREAM_STATUS_OK
              && ratio == 100.0,
          "an int flag read as a number");
    flagstream_detail_free(&d);
    flagstream_string json = {0};
    check(flagstream_eval_json(client, S("search-ranking"), ctx, S("{}"), &json, &d) == FLAGSTREAM_STATUS_OK
              && json.len == strlen("{\"model\":\"bm25\"}") && memcmp(json.ptr, "{\"model\":\"bm25\"}", json.len) == 0
              && d.reason == FLAGSTREAM_REASON_OFF,
          "a JSON flag that is off: its off variation as JSON text");
    flagstream_string_free(json);
    flagstream_detail_free(&d);

    flagstream_flag *flag = NULL;
    on = false;
    check(flagstream_flag_new(S("new-checkout"), &flag) == FLAGSTREAM_STATUS_OK
              && flagstream_eval_bool_flag(client, flag, ctx, false, &on, NULL) == FLAGSTREAM_STATUS_OK && on,
          "a flag handle: no key on the hot path");
    flagstream_flag *theme_flag = NULL;
    theme = (flagstream_string){0};
    check(flagstream_flag_new(S("theme"), &theme_flag) == FLAGSTREAM_STATUS_OK
              && flagstream_eval_string_flag(client, theme_flag, ctx, S("light"), &theme, &d) == FLAGSTREAM_STATUS_OK
              && same(theme, "dark") && d.reason == FLAGSTREAM_REASON_TARGET_MATCH,
          "a string flag's handle, with its detail");
    flagstream_string_free(theme);
    flagstream_detail_free(&d);
    flagstream_flag_free(theme_flag);

    flagstream_context *multi = NULL;
    check(flagstream_context_from_json(
              S("{\"kind\": \"multi\", \"contexts\": [{\"key\": \"org-1\", \"kind\": \"org\"},"
                " {\"key\": \"user-42\", \"attributes\": {\"country\": \"CA\", \"plan\": \"enterprise\"}}]}"),
              &multi) == FLAGSTREAM_STATUS_OK
              && flagstream_eval_bool(client, S("new-checkout"), multi, false, &on, NULL) == FLAGSTREAM_STATUS_OK && on,
          "a multi-kind context from JSON: its user kind matches the rule");
    check(flagstream_context_set_bool(multi, S("vip"), true) == FLAGSTREAM_STATUS_INVALID_ARGUMENT
              && last_error_says("multi-kind"),
          "setting an attribute of a multi-kind context is refused, saying why");
    flagstream_context_free(multi);
    check(flagstream_context_set_json(ctx, S("country"), S("[\"FR\", \"CA\"]")) == FLAGSTREAM_STATUS_OK
              && flagstream_eval_bool(client, S("new-checkout"), ctx, false, &on, NULL) == FLAGSTREAM_STATUS_OK && on
              && flagstream_context_set_string(ctx, S("country"), S("US")) == FLAGSTREAM_STATUS_OK,
          "a list attribute from JSON matches an `in` clause");
    flagstream_string at = {0};
    check(flagstream_eval_at(client, S("max-upload-mb"), ctx, FLAGSTREAM_TYPE_INT, S("1"), 1767225600000, &at, &d)
                  == FLAGSTREAM_STATUS_OK
              && same(at, "100") && same(d.rule_id, "paid"),
          "an evaluation as of a given time, JSON in and out");
    flagstream_string_free(at);
    flagstream_detail_free(&d);

    uint32_t state = 9;
    uint64_t revision = 0;
    check(flagstream_client_status(client, &state, &revision) == FLAGSTREAM_STATUS_OK && state == 1 && revision > 0,
          "the client is ready, at a revision");

    on = false;
    check(flagstream_eval_bool(client, S("no-such-flag"), ctx, true, &on, &d) == FLAGSTREAM_STATUS_OK && on
              && d.reason == FLAGSTREAM_REASON_ERROR && d.error_kind == FLAGSTREAM_ERROR_FLAG_NOT_FOUND
              && d.variation == -1,
          "a missing flag: the default, FLAG_NOT_FOUND");
    flagstream_detail_free(&d);
    flagstream_stats stats;
    check(flagstream_client_stats(client, &stats) == FLAGSTREAM_STATUS_OK && stats.default_not_found == 1
              && stats.connects >= 1 && stats.snapshots_applied >= 1,
          "the stats count the missing flag's default and the stream");

    /* A fork: the child serves the parent's flags, then its own sync's;
       a listener the parent registered stays the parent's. */
    seen_t before_fork = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    uint64_t parents_listener = 0;
    check(flagstream_client_on_change(client, on_change, &before_fork, &parents_listener) == FLAGSTREAM_STATUS_OK,
          "a listener is registered before the fork");
    fflush(stdout);
    pid_t child = fork();
    if (child == 0) in_child(client, ctx);
    int child_status = -1;
    check(child > 0 && waitpid(child, &child_status, 0) == child && WIFEXITED(child_status)
              && WEXITSTATUS(child_status) == 0,
          "a forked child's steps held");
    check(flagstream_eval_bool(client, S("new-checkout"), ctx, false, &on, NULL) == FLAGSTREAM_STATUS_OK && on
              && flagstream_client_off_change(client, parents_listener) == FLAGSTREAM_STATUS_OK,
          "the parent goes on after the fork, its listener with it");

    /* A wait for data ends when another thread closes the client. */
    flagstream_client *unreachable = NULL;
    check(flagstream_client_new(S("{\"endpoints\": [\"http://127.0.0.1:1\"], \"sdk_key\": \"k\"}"), &unreachable)
              == FLAGSTREAM_STATUS_OK,
          "a client of a relay that is not there is made");
    pthread_t waiter;
    waited_t w = {unreachable, -1};
    pthread_create(&waiter, NULL, wait_for_data, &w);
    check(flagstream_client_close(unreachable, 1000) == FLAGSTREAM_STATUS_OK, "another thread closes it");
    pthread_join(waiter, NULL);
    check(w.status == FLAGSTREAM_STATUS_CLOSED, "the wait for data ends with CLOSED, not its 60 s timeout");
    flagstream_client_free(unreachable);

    on = true;
    check(flagstream_eval_bool(client, S("theme"), ctx, false, &on, NULL) == FLAGSTREAM_STATUS_OK && !on,
          "a wrong type: the default (detail not asked for)");

    check(flagstream_eval_bool(NULL, S("theme"), ctx, false, &on, NULL) == FLAGSTREAM_STATUS_INVALID_ARGUMENT
              && last_error_says("client: a null pointer"),
          "a null client is an error, not a crash");

    /* A change listener: the test writes `from-test` once it reads
       "listening", and the callback sees it on a library thread. */
    seen_t seen = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0};
    uint64_t listener = 0;
    check(flagstream_client_on_change(client, on_change, &seen, &listener) == FLAGSTREAM_STATUS_OK && listener > 0,
          "a change listener is registered");
    printf("listening\n");
    fflush(stdout);
    struct timespec deadline;
    clock_gettime(CLOCK_REALTIME, &deadline);
    deadline.tv_sec += 20;
    pthread_mutex_lock(&seen.lock);
    while (!seen.seen && pthread_cond_timedwait(&seen.changed, &seen.lock, &deadline) != ETIMEDOUT) {
    }
    int got = seen.seen;
    uint64_t changed_at = seen.revision;
    pthread_mutex_unlock(&seen.lock);
    check(got && changed_at > revision, "the listener saw the flag the test wrote, at a newer revision");
    check(flagstream_client_off_change(client, listener) == FLAGSTREAM_STATUS_OK, "the listener is removed");
    check(flagstream_client_off_change(client, listener) == FLAGSTREAM_STATUS_INVALID_ARGUMENT
              && last_error_says("no listener"),
          "removing it twice is an error");

    check(flagstream_client_close(client, 5000) == FLAGSTREAM_STATUS_OK, "the client closes");
    check(flagstream_eval_bool(client, S("new-checkout"), ctx, false, &on, &d) == FLAGSTREAM_STATUS_CLOSED
              && last_error_says("closed"),
          "a use after close is an error, not a crash");
    check(flagstream_client_close(client, 5000) == FLAGSTREAM_STATUS_CLOSED, "a second close says so");

    flagstream_flag_free(flag);
    flagstream_context_free(ctx);
    flagstream_client_free(client);
    flagstream_client_free(NULL);
    printf(failed ? "FAILED\n" : "all steps held\n");
    return failed;
}
