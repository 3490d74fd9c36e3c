package dev.flagstream;

import static dev.flagstream.Fixtures.STEP;
import static dev.flagstream.Fixtures.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.lang.ref.WeakReference;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;
import java.util.function.BooleanSupplier;
import java.util.logging.Handler;
import java.util.logging.LogRecord;
import java.util.logging.Logger;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * The Java client against real relay processes, as
 * sdk/python/tests/test_relay.py: first data and a change arriving at a
 * listener, failover by delta, the blackhole stall, the cache with every
 * relay down, a child JVM that exits by itself after close, and a client
 * collected without close while its listener blocks. Every wait is on an
 * event, bounded by {@link Fixtures#STEP}; nothing asserts timing.
 */
class RelayTest {
    @TempDir
    Path tmp;

    private final List<AutoCloseable> started = new ArrayList<>();

    @AfterEach
    void stopEverything() throws Exception {
        for (AutoCloseable c : started) {
            c.close();
        }
    }

    private Relay relay(String name) throws IOException, InterruptedException {
        Relay r = new Relay(tmp.resolve(name));
        started.add(r);
        return r;
    }

    private Relay copyOf(String name, Relay from) throws IOException, InterruptedException {
        Relay r = Relay.copyOf(tmp, name, from);
        started.add(r);
        return r;
    }

    private static Context user42() {
        return Context.of("user-42").set("country", "US").set("plan", "enterprise");
    }

    /** Counted down when an applied revision changes {@code key}. */
    private static CountDownLatch flagEvent(FlagstreamClient client, String key) {
        CountDownLatch latch = new CountDownLatch(1);
        client.addChangeListener(ch -> {
            if (ch.flags().contains(key)) {
                latch.countDown();
            }
        });
        return latch;
    }

    @Test
    void firstDataAndAChangeArriveAtAListener() throws Exception {
        Relay a = relay("a");
        // What the package logs (System.Logger, the JDK's logging by default).
        Logger log = Logger.getLogger("dev.flagstream");
        CountDownLatch logged = new CountDownLatch(1);
        Handler handler = new Handler() {
            @Override
            public void publish(LogRecord r) {
                if (r.getMessage().contains("a change listener threw") && r.getThrown() != null
                        && "boom".equals(r.getThrown().getMessage())) {
                    logged.countDown();
                }
            }

            @Override
            public void flush() {}

            @Override
            public void close() {}
        };
        log.addHandler(handler);
        try (FlagstreamClient c = FlagstreamClient.builder().endpoints(a.url()).sdkKey(a.sdkKey()).build();
                Context user = user42()) {
            assertTrue(c.waitReady(STEP), () -> c.status().toString());
            ClientStatus st = c.status();
            assertEquals(ClientStatus.State.READY, st.state());
            assertTrue(st.revision() > 0, st::toString);
            assertEquals("dark", c.stringValue("theme", user, "light"));
            assertTrue(c.boolValue("new-checkout", user, false));
            EvaluationDetail<Boolean> d = c.boolDetail("new-checkout", user, false);
            assertEquals("RULE_MATCH", d.reason(), d::toString);
            assertEquals("us-enterprise", d.ruleId().orElseThrow());
            assertEquals(0, d.ruleIndex().getAsInt());
            assertEquals(0, d.variation().getAsInt());
            assertEquals(st.revision(), d.revision());
            assertFalse(d.stale());

            // A listener that throws is logged; the others still run. One
            // removes itself from its own callback, one tries to close the
            // client from its callback (refused: it would wait for itself).
            c.addChangeListener(ch -> {
                throw new IllegalStateException("boom");
            });
            AtomicReference<Throwable> closeFromListener = new AtomicReference<>();
            CountDownLatch triedClose = new CountDownLatch(1);
            c.addChangeListener(ch -> {
                try {
                    c.close();
                } catch (Throwable t) {
                    closeFromListener.set(t);
                }
                triedClose.countDown();
            });
            CountDownLatch selfRemoved = new CountDownLatch(1);
            List<Change> afterRemoval = new CopyOnWriteArrayList<>();
            AtomicReference<ListenerRegistration> self = new AtomicReference<>();
            self.set(c.addChangeListener(ch -> {
                if (selfRemoved.getCount() == 0) {
                    afterRemoval.add(ch);
                }
                self.get().close();
                selfRemoved.countDown();
            }));
            // Each listener runs on its own: wait for each one's own event.
            List<Change> seen = new CopyOnWriteArrayList<>();
            CountDownLatch recorded = new CountDownLatch(1);
            ListenerRegistration recording = c.addChangeListener(ch -> {
                seen.add(ch);
                if (ch.flags().contains("java-flag")) {
                    recorded.countDown();
                }
            });
            CountDownLatch changed = flagEvent(c, "java-flag");
            assertFalse(c.boolValue("java-flag", user, false));

            a.flagctl("flag", "create", "java-flag", "--on", "--yes");
            await(changed, "the change");
            assertTrue(c.boolValue("java-flag", user, false));
            await(logged, "the log of the listener that threw");
            await(triedClose, "the listener that closes");
            assertTrue(closeFromListener.get() instanceof IllegalStateException, String.valueOf(closeFromListener.get()));
            await(selfRemoved, "the listener that removes itself");
            await(recorded, "the recording listener");
            assertTrue(seen.stream().anyMatch(ch -> ch.flags().contains("java-flag") && ch.revision() > st.revision()),
                    seen::toString);
            Stats s = c.stats();
            assertEquals(1, s.snapshotsApplied(), s::toString);
            assertTrue(s.deltasApplied() >= 1, s::toString);
            assertTrue(s.defaultNotFound() >= 1, "the evaluation before the flag existed was counted: " + s);

            // A second change: the self-removed listener is not called again.
            CountDownLatch second = flagEvent(c, "java-flag-2");
            a.flagctl("flag", "create", "java-flag-2", "--on", "--yes");
            await(second, "the second change");
            assertTrue(afterRemoval.isEmpty(), afterRemoval::toString);
            recording.close();
            recording.close(); // twice: nothing
            assertFalse(c.isClosed());
        } finally {
            log.removeHandler(handler);
        }
        aCollectedClientWithABlockedListenerNeverStallsTheCleaner(a);
    }

    /**
     * A client collected without close() while its listener is blocked in
     * a call: the close and free wait for that call, but not on the
     * Cleaner's thread, which every client, context and flag handle of the
     * package shares: a Cleaner action registered after the client's runs.
     */
    private static void aCollectedClientWithABlockedListenerNeverStallsTheCleaner(Relay a) throws Exception {
        CountDownLatch entered = new CountDownLatch(1);
        CountDownLatch release = new CountDownLatch(1);
        try {
            WeakReference<FlagstreamClient> client = abandonedClient(a, entered, release);
            a.flagctl("flag", "create", "cleaner-flag", "--on", "--yes");
            await(entered, "the change at the blocking listener");
            collect(() -> client.get() == null, "the abandoned client was not collected");
            CountDownLatch cleaned = new CountDownLatch(1);
            Cleaners.CLEANER.register(new Object(), cleaned::countDown);
            collect(() -> cleaned.getCount() == 0,
                    "a Cleaner action registered after the client's did not run (the Cleaner's thread is stalled)");
        } finally {
            release.countDown();
        }
    }

    /** A client of {@code a} whose listener blocks on {@code release} at the change naming cleaner-flag; kept nowhere. */
    private static WeakReference<FlagstreamClient> abandonedClient(Relay a, CountDownLatch entered, CountDownLatch release)
            throws Exception {
        FlagstreamClient c = FlagstreamClient.builder().endpoints(a.url()).sdkKey(a.sdkKey()).build();
        assertTrue(c.waitReady(STEP));
        c.addChangeListener(ch -> {
            if (ch.flags().contains("cleaner-flag")) {
                entered.countDown();
                try {
                    release.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }
        });
        return new WeakReference<>(c);
    }

    /** Runs the GC until {@code done}, failing with {@code what} after {@link Fixtures#STEP}. */
    private static void collect(BooleanSupplier done, String what) throws InterruptedException {
        long deadline = System.nanoTime() + STEP.toNanos();
        while (!done.getAsBoolean()) {
            if (System.nanoTime() - deadline > 0) {
                fail(what + " within " + STEP.toSeconds() + " s");
            }
            System.gc();
            // A poll, not a timing: collection has no event to wait on;
            // the deadline above bounds it.
            Thread.sleep(20);
        }
    }

    @Test
    void failoverBetweenTwoRelaysByDelta() throws Exception {
        Relay a = relay("a");
        a.stop();
        Relay b = copyOf("b", a); // the same store: the same epoch
        a = relay("a");
        try (FlagstreamClient c = FlagstreamClient.builder().endpoints(a.url(), b.url()).sdkKey(a.sdkKey())
                .keepEndpointOrder(true).backoffBase(Duration.ofMillis(100)).build();
                Context user = user42()) {
            assertTrue(c.waitReady(STEP));
            assertEquals(1, c.stats().snapshotsApplied());
            CountDownLatch changed = flagEvent(c, "after-failover");
            a.kill();
            b.flagctl("flag", "create", "after-failover", "--on", "--yes");
            await(changed, "the change through the other relay (" + c.status() + ")");
            assertTrue(c.boolValue("after-failover", user, false));
            Stats s = c.stats();
            assertEquals(1, s.snapshotsApplied(), "resumed with a delta, not a snapshot: " + s);
            assertTrue(s.endpointSwitches() >= 1 && s.deltasApplied() >= 1, s::toString);
        }
    }

    @Test
    void blackholeStallRecoveredWithDefaultSettings() throws Exception {
        Relay a = relay("a");
        a.stop();
        Relay b = copyOf("b", a);
        a = relay("a");
        Proxy p = new Proxy(a.grpc);
        started.add(p);
        // Default settings except the order (the stalled path first).
        try (FlagstreamClient c = FlagstreamClient.builder().endpoints(p.url(), b.url()).sdkKey(a.sdkKey())
                .keepEndpointOrder(true).build();
                Context user = user42()) {
            assertTrue(c.waitReady(STEP));
            assertEquals(1, c.stats().snapshotsApplied());
            CountDownLatch changed = flagEvent(c, "after-stall");
            p.blackhole();
            b.flagctl("flag", "create", "after-stall", "--on", "--yes");
            // With default settings the stall is found (keepalive), then the
            // change arrives from the other relay.
            await(changed, "the change after the stall (" + c.status() + ")");
            assertTrue(c.boolValue("after-stall", user, false));
            assertEquals("dark", c.stringValue("theme", user, "light"), "never the default for a known flag");
            Stats s = c.stats();
            assertEquals(1, s.stalls(), "detected as one stall: " + s);
            assertEquals(1, s.endpointSwitches(), s::toString);
            assertEquals(1, s.snapshotsApplied(), "resumed with a delta: " + s);
        }
    }

    @Test
    void cacheAcrossARestartWithEveryRelayDown() throws Exception {
        Relay a = relay("a");
        Path cache = tmp.resolve("cache");
        try (FlagstreamClient c = FlagstreamClient.builder().endpoints(a.url()).sdkKey(a.sdkKey()).cacheDir(cache)
                .build()) {
            assertTrue(c.waitReady(STEP));
            CountDownLatch changed = flagEvent(c, "cached-flag");
            a.flagctl("flag", "create", "cached-flag", "--on", "--yes");
            await(changed, "the change");
        }
        // close() wrote the newest revision; now no relay at all.
        String key = a.sdkKey();
        a.kill();
        try (FlagstreamClient c = FlagstreamClient.builder().endpoints(a.url()).sdkKey(key).cacheDir(cache).build();
                Context user = user42()) {
            assertTrue(c.waitReady(STEP));
            assertEquals(ClientStatus.State.STALE, c.status().state());
            assertTrue(c.boolValue("cached-flag", user, false));
            assertEquals("dark", c.stringValue("theme", user, "light"));
            assertEquals(0, c.stats().cacheErrors());
        }
    }

    @Test
    void aChildJvmExitsByItselfAfterClose() throws Exception {
        Relay a = relay("a");
        List<String> cmd = Fixtures.childJvm("dev.flagstream.ChildMain", List.of(), "exit", a.url(), a.sdkKey());
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        StringBuffer out = new StringBuffer();
        CountDownLatch listening = new CountDownLatch(1);
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                    out.append(line).append('\n');
                    if (line.equals("listening")) {
                        listening.countDown();
                    }
                }
            } catch (IOException e) {
                out.append("(reading failed: ").append(e).append(")\n");
            }
        });
        reader.setDaemon(true);
        reader.start();
        try {
            if (!listening.await(STEP.toSeconds(), TimeUnit.SECONDS)) {
                fail("the child never listened:\n" + out);
            }
            // A change reaches the child's listener: a library thread is attached to its JVM.
            a.flagctl("flag", "create", "child-flag", "--on", "--yes");
            if (!p.waitFor(STEP.toSeconds(), TimeUnit.SECONDS)) {
                fail("the child JVM did not exit by itself after close (a non-daemon thread left?):\n" + out);
            }
        } finally {
            p.destroyForcibly();
        }
        reader.join(STEP.toMillis());
        assertEquals(0, p.exitValue(), out::toString);
        assertTrue(out.toString().contains("theme=dark\n") && out.toString().contains("closed\n"), out::toString);
    }
}
