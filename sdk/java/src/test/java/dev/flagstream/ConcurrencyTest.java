package dev.flagstream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * Evaluations take no lock and may run on any number of threads: many
 * threads evaluate one client at once, each with its own contexts, while
 * another thread makes calls that change nothing (status, stats, details by
 * key), and every result is the one the flag's rule gives. Nothing asserts
 * on scheduling: the evaluators start once the reader has made its first
 * round of calls, and how far their runs overlap is up to the machine.
 */
class ConcurrencyTest {
    static final String FLAGS = "flags:\n"
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
            + "    fallthrough: {variation: 1}\n";

    static final int THREADS = 8;
    static final int EVALUATIONS = 100_000;
    /** Contexts per thread: context j matches the rule when j % 4 == 0. */
    static final int CONTEXTS = 16;

    static Context context(String key, int j) {
        return Context.of(key).set("country", j % 2 == 0 ? "US" : "FR").set("plan", j % 4 < 2 ? "enterprise" : "free");
    }

    @Test
    void manyThreadsEvaluateOneClientAtOnceAndEveryResultIsRight() throws Exception {
        try (FlagstreamClient client = FlagstreamClient.testData(FLAGS)) {
            Flag rule2 = client.flag("rule2");
            // Each evaluator's own contexts (made here, used by that thread only).
            Context[][] contexts = new Context[THREADS][CONTEXTS];
            for (int t = 0; t < THREADS; t++) {
                for (int j = 0; j < CONTEXTS; j++) {
                    contexts[t][j] = context("t" + t + "-u" + j, j);
                }
            }
            // Counted down by the reader after its first round of calls:
            // then every evaluator starts.
            CountDownLatch readerStarted = new CountDownLatch(1);
            AtomicBoolean evaluating = new AtomicBoolean(true);
            AtomicLong wrong = new AtomicLong();
            AtomicLong matched = new AtomicLong();
            AtomicLong readerCalls = new AtomicLong();
            AtomicReference<Throwable> failure = new AtomicReference<>();
            List<Thread> evaluators = new ArrayList<>();
            for (int t = 0; t < THREADS; t++) {
                final Context[] ctxs = contexts[t];
                Thread th = new Thread(() -> {
                    try {
                        readerStarted.await();
                        long bad = 0;
                        long on = 0;
                        for (int i = 0; i < EVALUATIONS; i++) {
                            int j = i % CONTEXTS;
                            boolean expected = j % 4 == 0;
                            // The default is the wrong answer: an error would show as a wrong result.
                            boolean v = rule2.boolValue(ctxs[j], !expected);
                            if (v != expected) {
                                bad++;
                            }
                            if (v) {
                                on++;
                            }
                        }
                        wrong.addAndGet(bad);
                        matched.addAndGet(on);
                    } catch (Throwable e) {
                        failure.compareAndSet(null, e);
                    }
                }, "evaluator-" + t);
                th.start();
                evaluators.add(th);
            }
            // The other thread: calls on the same client that change nothing.
            Context us = context("reader", 0);
            Context fr = context("reader", 1);
            Thread reader = new Thread(() -> {
                try {
                    do {
                        assertEquals(ClientStatus.State.READY, client.status().state());
                        assertEquals(0, client.stats().defaultNotFound());
                        EvaluationDetail<Boolean> d = client.boolDetail("rule2", us, false);
                        assertTrue(d.value());
                        assertEquals("us-enterprise", d.ruleId().orElseThrow());
                        assertFalse(client.boolValue("rule2", fr, true));
                        readerCalls.incrementAndGet();
                        readerStarted.countDown();
                    } while (evaluating.get());
                } catch (Throwable e) {
                    failure.compareAndSet(null, e);
                } finally {
                    readerStarted.countDown(); // a failed reader does not hold the evaluators back
                }
            }, "reader");
            reader.start();
            for (Thread th : evaluators) {
                th.join(Fixtures.STEP.toMillis());
                assertFalse(th.isAlive(), th.getName() + " did not finish");
            }
            evaluating.set(false);
            reader.join(Fixtures.STEP.toMillis());
            assertFalse(reader.isAlive(), "the reader did not finish");
            us.close();
            fr.close();
            for (Context[] ctxs : contexts) {
                for (Context c : ctxs) {
                    c.close();
                }
            }

            assertNull(failure.get(), () -> "a thread failed: " + failure.get());
            assertEquals(0, wrong.get(), wrong.get() + " wrong results of " + (long) THREADS * EVALUATIONS);
            assertEquals((long) THREADS * EVALUATIONS / 4, matched.get(), "a quarter of the contexts match the rule");
            assertTrue(readerCalls.get() > 0, "the reader's first round counted");
            Stats s = client.stats();
            assertEquals(0, s.defaultNotFound() + s.defaultNotReady() + s.defaultWrongType() + s.defaultMalformed(),
                    "no evaluation fell back to its default");
        }
    }
}
