package dev.flagstream;

import java.util.Optional;
import java.util.OptionalInt;

/**
 * One evaluation's value and how it was chosen (docs/EVALUATION.md).
 *
 * @param value the flag's value, or the caller's default on an error
 * @param variation the served variation's index; empty when the default was returned
 * @param reason {@code OFF}, {@code TARGET_MATCH}, {@code RULE_MATCH},
 *     {@code FALLTHROUGH}, {@code PREREQUISITE_FAILED} or {@code ERROR}
 * @param errorKind for {@code ERROR}: {@code FLAG_NOT_FOUND}, {@code WRONG_TYPE},
 *     {@code MALFORMED_FLAG} or {@code NOT_READY}; otherwise empty
 * @param ruleIndex for {@code RULE_MATCH}: the rule's index
 * @param ruleId for {@code RULE_MATCH}: the rule's id, when it has one
 * @param prerequisiteKey for {@code PREREQUISITE_FAILED}: the first prerequisite that failed
 * @param scheduleStep when a schedule served: its current step, 1-based (0 before the first step)
 * @param flagVersion the flag's version (0 when not found)
 * @param revision the revision of the data evaluated
 * @param inRollout whether a percentage rollout or a schedule chose the variation
 *     (for {@code RULE_MATCH} only a schedule)
 * @param stale whether that data was older than the staleness threshold
 * @param <T> the value's type
 */
public record EvaluationDetail<T>(
        T value,
        OptionalInt variation,
        String reason,
        Optional<String> errorKind,
        OptionalInt ruleIndex,
        Optional<String> ruleId,
        Optional<String> prerequisiteKey,
        OptionalInt scheduleStep,
        long flagVersion,
        long revision,
        boolean inRollout,
        boolean stale) {

    private static final String[] REASONS = {
        "OFF", "TARGET_MATCH", "RULE_MATCH", "FALLTHROUGH", "PREREQUISITE_FAILED", "ERROR"
    };
    private static final String[] ERROR_KINDS = {
        null, "FLAG_NOT_FOUND", "WRONG_TYPE", "MALFORMED_FLAG", "NOT_READY"
    };

    /** Indices into the {@code long[]} the JNI glue fills (after the value bits at 0). */
    static final int VARIATION = 1, REASON = 2, ERROR_KIND = 3, RULE_INDEX = 4, FLAG_VERSION = 5, REVISION = 6,
            IN_ROLLOUT = 7, STALE = 8, SCHEDULE_STEP = 9, FIELDS = 10;

    /** @return whether the default was returned because of an error */
    public boolean isError() {
        return "ERROR".equals(reason);
    }

    static <T> EvaluationDetail<T> of(T value, long[] d, String[] strings) {
        int reason = (int) d[REASON];
        int kind = (int) d[ERROR_KIND];
        return new EvaluationDetail<>(
                value,
                d[VARIATION] < 0 ? OptionalInt.empty() : OptionalInt.of((int) d[VARIATION]),
                reason >= 0 && reason < REASONS.length ? REASONS[reason] : "ERROR",
                kind == 0 ? Optional.empty()
                        : Optional.of(kind > 0 && kind < ERROR_KINDS.length ? ERROR_KINDS[kind] : "UNKNOWN_" + kind),
                d[RULE_INDEX] < 0 ? OptionalInt.empty() : OptionalInt.of((int) d[RULE_INDEX]),
                Optional.ofNullable(strings[0]),
                Optional.ofNullable(strings[1]),
                d[SCHEDULE_STEP] < 0 ? OptionalInt.empty() : OptionalInt.of((int) d[SCHEDULE_STEP]),
                d[FLAG_VERSION],
                d[REVISION],
                d[IN_ROLLOUT] != 0,
                d[STALE] != 0);
    }
}
