package dev.flagstream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.ManagementFactory;
import org.junit.jupiter.api.Test;

/**
 * The value-only evaluations allocate nothing on the Java heap with a
 * reused context: through a flag handle (the hot path) and by key. Measured
 * with the thread's allocation counter
 * ({@code com.sun.management.ThreadMXBean}) after a warm-up.
 */
class AllocationTest {
    static final String FLAGS = "flags:\n"
            + "  - {key: onoff, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}\n"
            + "  - key: rule2\n"
            + "    type: bool\n"
            + "    variations: [true, false]\n"
            + "    on: true\n"
            + "    off_variation: 1\n"
            + "    rules:\n"
            + "      - id: us-enterprise\n"
            + "        clauses:\n"
            + "          - {attribute: country, op: in, values: [US]}\n"
            + "          - {attribute: plan, op: in, values: [enterprise]}\n"
            + "        serve: {variation: 0}\n"
            + "    fallthrough: {variation: 1}\n"
            + "  - {key: n, type: int, variations: [7, 8], on: true, off_variation: 1, fallthrough: {variation: 0}}\n"
            + "  - {key: x, type: float, variations: [0.5, 1.5], on: true, off_variation: 1, fallthrough: {variation: 0}}\n";

    static final int N = 100_000;

    /** The bytes this thread allocated so far. */
    static long allocated() {
        return ((com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean()).getCurrentThreadAllocatedBytes();
    }

    @Test
    void valueEvaluationsAllocateNothing() {
        try (FlagstreamClient client = FlagstreamClient.testData(FLAGS);
                Context ctx = Context.of("user-42").set("country", "US").set("plan", "enterprise")) {
            Flag onoff = client.flag("onoff");
            Flag rule2 = client.flag("rule2");
            Flag n = client.flag("n");
            Flag x = client.flag("x");
            long sink = 0;
            // Warm up: the interpreter, then compiled code.
            for (int round = 0; round < 3; round++) {
                sink += handles(onoff, rule2, n, x, ctx) + byKey(client, ctx);
            }
            long overhead = allocated();
            overhead = allocated() - overhead; // the counter's own cost, if any
            long before = allocated();
            sink += handles(onoff, rule2, n, x, ctx);
            long handleBytes = allocated() - before - overhead;
            before = allocated();
            sink += byKey(client, ctx);
            long keyBytes = allocated() - before - overhead;
            assertEquals(8L * 10 * N, sink, "every evaluation served its flag's value");
            // Zero per evaluation: a few bytes in total would be a safepoint's, not a call's.
            assertTrue(handleBytes < 1024, handleBytes + " bytes for " + 4 * N + " evaluations through handles");
            assertTrue(keyBytes < 1024, keyBytes + " bytes for " + 4 * N + " evaluations by key");
        }
    }

    private static long handles(Flag onoff, Flag rule2, Flag n, Flag x, Context ctx) {
        long s = 0;
        for (int i = 0; i < N; i++) {
            s += onoff.boolValue(ctx, false) ? 1 : 0;
            s += rule2.boolValue(ctx, false) ? 1 : 0;
            s += n.intValue(ctx, 0);
            s += (long) (x.doubleValue(ctx, 0) * 2);
        }
        return s;
    }

    private static long byKey(FlagstreamClient client, Context ctx) {
        long s = 0;
        for (int i = 0; i < N; i++) {
            s += client.boolValue("onoff", ctx, false) ? 1 : 0;
            s += client.boolValue("rule2", ctx, false) ? 1 : 0;
            s += client.intValue("n", ctx, 0);
            s += (long) (client.doubleValue("x", ctx, 0) * 2);
        }
        return s;
    }
}
