package dev.flagstream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.Supplier;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;
import org.junit.jupiter.api.io.TempDir;

/**
 * A client's life without a relay: use after close, a close racing
 * evaluations, wrong options and arguments named in the error, contexts,
 * the offline file, and the native loader's extraction and its error.
 */
class LifecycleTest {
    static final String FLAGS = "flags:\n"
            + "  - {key: b, type: bool, variations: [true, false], on: true, off_variation: 1, fallthrough: {variation: 0}}\n"
            + "  - {key: n, type: int, variations: [7, 8], on: true, off_variation: 1, fallthrough: {variation: 0}}\n"
            + "  - {key: x, type: float, variations: [0.5, 1.5], on: true, off_variation: 1, fallthrough: {variation: 0}}\n"
            + "  - {key: s, type: string, variations: [a, b], on: true, off_variation: 1, fallthrough: {variation: 0}}\n"
            + "  - {key: j, type: json, variations: [{\"k\": [1, 2.5, null]}, 0], on: true, off_variation: 1, fallthrough: {variation: 0}}\n";

    private static FlagstreamException.Status statusOf(Executable call) {
        return assertThrows(FlagstreamException.class, call).status();
    }

    @Test
    void everyCallAfterCloseThrowsClosed() {
        FlagstreamClient c = FlagstreamClient.testData(FLAGS);
        try (Context ctx = Context.of("u")) {
            Flag on = c.flag("b");
            Flag j = c.flag("j");
            assertTrue(c.boolValue("b", ctx, false));
            assertEquals(Map.of("k", java.util.Arrays.asList(1L, 2.5, null)), c.jsonValue("j", ctx, null));
            assertEquals(Map.of("k", java.util.Arrays.asList(1L, 2.5, null)), j.jsonValue(ctx, null));
            c.close();
            assertTrue(c.isClosed());
            c.close(); // a second close: nothing
            List<Executable> calls = List.of(
                    () -> c.boolValue("b", ctx, false),
                    () -> c.intValue("n", ctx, 0),
                    () -> c.doubleValue("x", ctx, 0),
                    () -> c.stringValue("s", ctx, ""),
                    () -> c.jsonValue("j", ctx, null),
                    () -> c.boolDetail("b", ctx, false),
                    () -> c.intDetail("n", ctx, 0),
                    () -> c.doubleDetail("x", ctx, 0),
                    () -> c.stringDetail("s", ctx, ""),
                    () -> c.jsonDetail("j", ctx, null),
                    () -> c.detailAt(ValueType.BOOL, "b", ctx, false, Instant.now()),
                    () -> on.boolValue(ctx, false),
                    () -> on.boolDetail(ctx, false),
                    () -> c.flag("n").intValue(ctx, 0),
                    () -> j.jsonValue(ctx, null),
                    () -> c.status(),
                    () -> c.stats(),
                    () -> c.waitReady(Duration.ZERO),
                    () -> c.addChangeListener(ch -> {}),
                    () -> c.flag("b"));
            for (Executable call : calls) {
                assertEquals(FlagstreamException.Status.CLOSED, statusOf(call));
            }
        }
    }

    /**
     * Threads evaluate (through a handle and by key, values and details)
     * while another closes the client: the close waits until each of them
     * has had some evaluations answered, so the race is real. Nothing
     * crashes, every thread ends on {@code CLOSED}, and no call that began
     * after {@code close()} returned got an answer (neither the value nor
     * the default: it threw {@code CLOSED}).
     */
    @Test
    void aCloseRacingEvaluationsNeverCrashes() throws Exception {
        for (int round = 0; round < 5; round++) {
            FlagstreamClient c = FlagstreamClient.testData(FLAGS);
            Flag on = c.flag("b");
            int threads = 4;
            int warmUp = 100;
            // Counted down by each thread after its first warmUp answers.
            CountDownLatch evaluated = new CountDownLatch(threads);
            AtomicLong ok = new AtomicLong();
            AtomicLong closed = new AtomicLong();
            AtomicLong answeredAfterClose = new AtomicLong();
            AtomicBoolean closeReturned = new AtomicBoolean();
            AtomicReference<Throwable> other = new AtomicReference<>();
            List<Thread> all = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                final int kind = t;
                Thread th = new Thread(() -> {
                    boolean counted = false;
                    try (Context ctx = Context.of("u" + kind)) {
                        for (long mine = 1; ; mine++) {
                            boolean after = closeReturned.get();
                            try {
                                boolean v = kind % 2 == 0 ? on.boolValue(ctx, false) : c.boolValue("b", ctx, false);
                                if (kind == 3) {
                                    c.stringDetail("s", ctx, "");
                                }
                                if (after) {
                                    answeredAfterClose.incrementAndGet();
                                }
                                assertTrue(v, "an answer before the close is the flag's value");
                                ok.incrementAndGet();
                                if (mine == warmUp) {
                                    evaluated.countDown();
                                    counted = true;
                                }
                            } catch (FlagstreamException e) {
                                if (e.status() != FlagstreamException.Status.CLOSED) {
                                    throw e;
                                }
                                closed.incrementAndGet();
                                // Once closed, every kind of call throws CLOSED.
                                assertEquals(FlagstreamException.Status.CLOSED,
                                        statusOf(() -> on.boolValue(ctx, false)));
                                assertEquals(FlagstreamException.Status.CLOSED,
                                        statusOf(() -> c.boolValue("b", ctx, false)));
                                assertEquals(FlagstreamException.Status.CLOSED,
                                        statusOf(() -> c.stringDetail("s", ctx, "")));
                                return;
                            }
                        }
                    } catch (Throwable e) {
                        other.compareAndSet(null, e);
                    } finally {
                        if (!counted) {
                            evaluated.countDown(); // a thread that failed does not hold the close back
                        }
                    }
                });
                th.start();
                all.add(th);
            }
            Fixtures.await(evaluated, "the evaluating threads' first answers");
            c.close();
            closeReturned.set(true);
            for (Thread th : all) {
                th.join(Fixtures.STEP.toMillis());
                assertFalse(th.isAlive(), "an evaluating thread never saw the close");
            }
            assertEquals(null, other.get());
            assertTrue(ok.get() >= (long) threads * warmUp, "evaluations answered before the close: " + ok.get());
            assertEquals(0, answeredAfterClose.get(), "calls that began after close() returned were answered");
            assertEquals(threads, closed.get(), "every thread ended on CLOSED");
        }
    }

    @Test
    void badOptionsNameTheField() {
        Supplier<ClientBuilder> relay = () -> FlagstreamClient.builder().endpoints("http://127.0.0.1:1");
        assertMessage("sdk_key", () -> relay.get().build());
        assertMessage("endpoints", () -> FlagstreamClient.builder().endpoints().sdkKey("k").build());
        assertMessage("ftp://x", () -> FlagstreamClient.builder().endpoints("ftp://x").sdkKey("k").build());
        assertMessage("bogus", () -> relay.get().sdkKey("k").option("bogus", 1).build());
        assertMessage("connect_timeout", () -> relay.get().sdkKey("k").option("connect_timeout", -1).build());
        assertMessage("watchdog_misses", () -> relay.get().sdkKey("k").watchdogMisses(0).build());
        assertMessage("test_data", () -> FlagstreamClient.testData("flags: [ {key: x"));
        assertMessage("/nonexistent/flags.yaml", () -> FlagstreamClient.builder().offlineFile(Path.of("/nonexistent/flags.yaml")).build());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                () -> FlagstreamClient.builder().connectTimeout(Duration.ofSeconds(-1)));
        assertTrue(e.getMessage().contains("connectTimeout"), e.getMessage());
        e = assertThrows(IllegalArgumentException.class, () -> FlagstreamClient.builder().option("x", new Object()));
        assertTrue(e.getMessage().contains("java.lang.Object"), e.getMessage());
    }

    /** An INVALID_ARGUMENT whose message contains {@code part}. */
    private static void assertMessage(String part, Executable call) {
        FlagstreamException e = assertThrows(FlagstreamException.class, call);
        assertEquals(FlagstreamException.Status.INVALID_ARGUMENT, e.status(), e.getMessage());
        assertTrue(e.getMessage().contains(part), "'" + part + "' not in: " + e.getMessage());
    }

    @Test
    void contextsAndArgumentsAreChecked() {
        try (FlagstreamClient c = FlagstreamClient.testData(FLAGS)) {
            assertMessage("kind", () -> Context.fromJson("{\"kind\": \"multi\"}"));
            assertMessage("context", () -> Context.fromJson("{"));
            try (Context multi = Context.fromJson(
                    "{\"kind\": \"multi\", \"contexts\": [{\"key\": \"u\"}, {\"key\": \"o\", \"kind\": \"org\"}]}")) {
                assertTrue(c.boolValue("b", multi, false));
                assertEquals(FlagstreamException.Status.INVALID_ARGUMENT, statusOf(() -> multi.set("a", "b")));
            }
            Context ctx = Context.of("u").set("plan", "pro").set("seats", 3).set("beta", true)
                    .setJson("tags", "[\"a\", 1]").setJson("plan", "null");
            assertMessage("", () -> ctx.setJson("tags", "[1,"));
            assertEquals(7, c.intValue("n", ctx, 0));
            assertEquals(0.5, c.doubleValue("x", ctx, 0));
            assertEquals(7.0, c.doubleValue("n", ctx, 0), "an int flag reads as a number");
            assertEquals("a", c.stringValue("s", ctx, "z"));
            assertEquals(false, c.boolValue("s", ctx, false), "a wrong type: the default");
            assertEquals("WRONG_TYPE", c.boolDetail("s", ctx, false).errorKind().orElseThrow());
            assertEquals(2, c.stats().defaultWrongType(), "the value and the detail both counted");
            assertEquals("é😀", c.stringValue("missing", ctx, "é😀"), "UTF-16 to UTF-8 and back");
            String longText = "ü€".repeat(300) + "😀";
            assertEquals(longText, c.stringValue("missing" + longText, ctx, longText), "past the glue's stack buffers");
            assertEquals(longText, c.stringDetail("missing", ctx, longText).value());
            assertThrows(NullPointerException.class, () -> c.boolValue(null, ctx, false));
            assertThrows(IllegalArgumentException.class, () -> c.jsonValue("j", ctx, Double.NaN));
            ctx.close();
            ctx.close();
            assertEquals(FlagstreamException.Status.CLOSED, statusOf(() -> c.boolValue("b", ctx, false)));
            assertEquals(FlagstreamException.Status.CLOSED, statusOf(() -> ctx.set("a", "b")));
        }
    }

    @Test
    void settingAnAttributeOfAMultiKindContextIsAnInvalidArgument() {
        String rules = "flags:\n"
                + "  - key: org-plan\n"
                + "    type: bool\n"
                + "    variations: [true, false]\n"
                + "    on: true\n"
                + "    off_variation: 1\n"
                + "    rules:\n"
                + "      - clauses: [{context_kind: org, attribute: plan, op: in, values: [enterprise]}]\n"
                + "        serve: {variation: 0}\n"
                + "    fallthrough: {variation: 1}\n";
        try (FlagstreamClient c = FlagstreamClient.testData(rules);
                Context multi = Context.fromJson("{\"kind\": \"multi\", \"contexts\": ["
                        + "{\"kind\": \"user\", \"key\": \"u\", \"attributes\": {\"plan\": \"free\"}},"
                        + "{\"kind\": \"org\", \"key\": \"o\", \"attributes\": {\"plan\": \"enterprise\"}}]}")) {
            assertTrue(c.boolValue("org-plan", multi, false));
            List<Executable> setters = List.of(
                    () -> multi.set("plan", "free"),
                    () -> multi.set("seats", 3),
                    () -> multi.set("beta", true),
                    () -> multi.setJson("plan", "\"free\""),
                    () -> multi.setJson("plan", "null"));
            for (Executable set : setters) {
                FlagstreamException e = assertThrows(FlagstreamException.class, set);
                assertEquals(FlagstreamException.Status.INVALID_ARGUMENT, e.status(), e.getMessage());
                assertTrue(e.getMessage().contains("multi-kind"), e.getMessage());
            }
            // Nothing was changed: the org's plan still matches.
            assertTrue(c.boolValue("org-plan", multi, false));
            assertEquals(0, c.boolDetail("org-plan", multi, false).ruleIndex().orElseThrow());
        }
    }

    @Test
    void anOfflineFileIsServed(@TempDir Path tmp) throws Exception {
        Path f = tmp.resolve("flags.yaml");
        Files.writeString(f, "flags:\n  - {key: f, type: bool, variations: [true, false], on: true, off_variation: 1,"
                + " fallthrough: {variation: 0}}\n");
        try (FlagstreamClient c = FlagstreamClient.builder().offlineFile(f).build(); Context ctx = Context.of("u")) {
            assertTrue(c.waitReady(Duration.ZERO));
            assertTrue(c.boolValue("f", ctx, false));
            assertEquals(ClientStatus.State.READY, c.status().state());
        }
    }

    @Test
    void theLoaderExtractsOnceByContentHash(@TempDir Path tmp) throws Exception {
        Path first = NativeLoader.extract(tmp.resolve("a"));
        assertTrue(first.getFileName().toString().matches("libflagstream_jni-[0-9a-f]{32}\\.so"), first::toString);
        long modified = Files.getLastModifiedTime(first).toMillis();
        Path again = NativeLoader.extract(tmp.resolve("a"));
        assertEquals(first, again, "the identical file is reused");
        assertEquals(modified, Files.getLastModifiedTime(again).toMillis());
        try (var files = Files.list(tmp.resolve("a"))) {
            assertEquals(1, files.count(), "no temporary file left");
        }
        Path elsewhere = NativeLoader.extract(tmp.resolve("b"));
        assertEquals(Files.size(first), Files.size(elsewhere));
    }

    @Test
    void theLoadersErrorNamesTheDirectoryAndTheSettings(@TempDir Path tmp) throws Exception {
        // A directory under a regular file cannot be made, even by root.
        Files.writeString(tmp.resolve("file"), "");
        Path dir = tmp.resolve("file").resolve("native");
        UnsatisfiedLinkError e = assertThrows(UnsatisfiedLinkError.class, () -> NativeLoader.extract(dir));
        for (String part : List.of(dir.toString(), NativeLoader.DIR_PROPERTY, NativeLoader.DIR_ENV)) {
            assertTrue(e.getMessage().contains(part), "'" + part + "' not in: " + e.getMessage());
        }
        // The same through the public API, in a JVM that has not loaded the library yet.
        Fixtures.Result r = Fixtures.run(Fixtures.childJvm("dev.flagstream.ChildMain",
                List.of("-D" + NativeLoader.DIR_PROPERTY + "=" + dir, "-D" + NativeLoader.PATH_PROPERTY + "="), "load"));
        assertEquals(3, r.code(), r.output());
        for (String part : List.of(dir.toString(), NativeLoader.DIR_PROPERTY, NativeLoader.DIR_ENV)) {
            assertTrue(r.output().contains(part), "'" + part + "' not in: " + r.output());
        }
        // And a good directory loads.
        r = Fixtures.run(Fixtures.childJvm("dev.flagstream.ChildMain",
                List.of("-D" + NativeLoader.DIR_PROPERTY + "=" + tmp.resolve("good"), "-D" + NativeLoader.PATH_PROPERTY + "="),
                "load"));
        assertEquals(0, r.code(), r.output());
        assertTrue(r.output().contains("loaded"), r.output());
    }
}
