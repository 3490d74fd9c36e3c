package dev.flagstream.bench;

import dev.flagstream.Context;
import dev.flagstream.Flag;
import dev.flagstream.FlagstreamClient;
import dev.flagstream.JniFloor;
import java.lang.management.ManagementFactory;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.SplittableRandom;

/**
 * Per-evaluation cost from Java, next to a same-run floor: a {@link HashMap}
 * lookup returning a precomputed value (what a hand-rolled flag map costs).
 * Flags from test data (no network): an on/off flag, a 2-clause rule, and
 * 10,000 one-clause flags. Every case runs one warm-up round, then ROUNDS
 * rounds interleaved with every other case (a load change on a shared
 * machine hits all alike); each figure is the median of the rounds, the
 * ratio the median of the per-round ratios. Bytes per evaluation come from
 * the thread's allocation counter over one more round.
 *
 * <p>The first row is the JNI floor: a native method that does nothing but
 * cross the boundary ({@code Native.abiVersion()}, through
 * {@link JniFloor}) in the same loop, so each evaluation's row shows how
 * much of it is the crossing and how much the C ABI's own work.
 *
 * <pre>
 *   sdk/java/build.sh --release
 *   java -cp sdk/java/build/flagstream.jar:sdk/java/build/bench-classes dev.flagstream.bench.Bench [--quick]
 * </pre>
 */
public final class Bench {
    private Bench() {}

    static final int FLAGS = 10_000;

    /** One timed loop: {@code n} evaluations, returning a sink. */
    interface Loop {
        long run(int n);
    }

    /** A case: the flagstream loop and its floor, with their per-round ns/op. */
    static final class Task {
        final String name;
        final Loop subject;
        final Loop floor;
        final int n;
        final List<Double> subjectNs = new ArrayList<>();
        final List<Double> floorNs = new ArrayList<>();
        double subjectBytes;
        double floorBytes;

        Task(String name, int n, Loop subject, Loop floor) {
            this.name = name;
            this.n = n;
            this.subject = subject;
            this.floor = floor;
        }
    }

    static long sink;

    static double time(Loop loop, int n) {
        long t0 = System.nanoTime();
        sink += loop.run(n);
        return (System.nanoTime() - t0) / (double) n;
    }

    static double bytes(Loop loop, int n) {
        com.sun.management.ThreadMXBean bean = (com.sun.management.ThreadMXBean) ManagementFactory.getThreadMXBean();
        long before = bean.getCurrentThreadAllocatedBytes();
        sink += loop.run(n);
        return (bean.getCurrentThreadAllocatedBytes() - before) / (double) n;
    }

    static double median(List<Double> xs) {
        double[] s = xs.stream().mapToDouble(Double::doubleValue).sorted().toArray();
        return s[s.length / 2];
    }

    static String flagSet() {
        StringBuilder b = new StringBuilder("{\"segments\": [], \"flags\": [");
        b.append("{\"key\": \"onoff\", \"type\": \"bool\", \"variations\": [true, false], \"on\": true,"
                + " \"off_variation\": 1, \"fallthrough\": {\"variation\": 0}},");
        b.append("{\"key\": \"rule2\", \"type\": \"bool\", \"variations\": [true, false], \"on\": true,"
                + " \"off_variation\": 1, \"rules\": [{\"id\": \"us-enterprise\", \"clauses\": ["
                + "{\"attribute\": \"country\", \"op\": \"in\", \"values\": [\"US\"]},"
                + "{\"attribute\": \"plan\", \"op\": \"in\", \"values\": [\"enterprise\"]}],"
                + " \"serve\": {\"variation\": 0}}], \"fallthrough\": {\"variation\": 1}}");
        for (int i = 0; i < FLAGS; i++) {
            b.append(",{\"key\": \"f").append(i).append("\", \"type\": \"bool\", \"variations\": [true, false],"
                    + " \"on\": true, \"off_variation\": 1, \"rules\": [{\"id\": \"r\", \"clauses\": ["
                    + "{\"attribute\": \"country\", \"op\": \"in\", \"values\": [\"US\"]}],"
                    + " \"serve\": {\"variation\": 0}}], \"fallthrough\": {\"variation\": 1}}");
        }
        return b.append("]}").toString();
    }

    public static void main(String[] args) {
        boolean quick = Arrays.asList(args).contains("--quick");
        int n = quick ? 200_000 : 2_000_000;
        int rounds = quick ? 3 : 7;

        FlagstreamClient client = FlagstreamClient.testData(flagSet());
        Context ctx = Context.of("user-42").set("country", "US").set("plan", "enterprise");
        Flag onoff = client.flag("onoff");
        Flag rule2 = client.flag("rule2");
        SplittableRandom rnd = new SplittableRandom(42);
        String[] randomKeys = new String[1 << 16];
        Flag[] handles = new Flag[FLAGS];
        for (int i = 0; i < FLAGS; i++) {
            handles[i] = client.flag("f" + i);
        }
        int[] randomIdx = new int[1 << 16];
        for (int i = 0; i < randomKeys.length; i++) {
            randomIdx[i] = rnd.nextInt(FLAGS);
            randomKeys[i] = "f" + randomIdx[i];
        }
        String[] users = new String[1024];
        for (int i = 0; i < users.length; i++) {
            users[i] = "user-" + i;
        }
        // The floors: a map lookup returning the value computed beforehand.
        Map<String, Boolean> byFlag = new HashMap<>();
        byFlag.put("onoff", onoff.boolValue(ctx, false));
        byFlag.put("rule2", rule2.boolValue(ctx, false));
        for (int i = 0; i < FLAGS; i++) {
            byFlag.put("f" + i, handles[i].boolValue(ctx, false));
        }
        Map<String, Boolean> byUser = new HashMap<>();
        for (String u : users) {
            byUser.put(u, true);
        }

        int abi = JniFloor.abiVersion();
        List<Task> tasks = List.of(
                new Task("JNI floor: a native call doing nothing (Native.abiVersion())", n,
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += JniFloor.abiVersion() == abi ? 1 : 0;
                            return s;
                        },
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += byFlag.get("onoff") ? 1 : 0;
                            return s;
                        }),
                new Task("on/off flag, flag handle, reused context", n,
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += onoff.boolValue(ctx, false) ? 1 : 0;
                            return s;
                        },
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += byFlag.get("onoff") ? 1 : 0;
                            return s;
                        }),
                new Task("on/off flag by key, reused context", n,
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += client.boolValue("onoff", ctx, false) ? 1 : 0;
                            return s;
                        },
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += byFlag.get("onoff") ? 1 : 0;
                            return s;
                        }),
                new Task("2-clause rule, flag handle, reused context", n,
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += rule2.boolValue(ctx, false) ? 1 : 0;
                            return s;
                        },
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += byFlag.get("rule2") ? 1 : 0;
                            return s;
                        }),
                new Task("2-clause rule, context built per call (1,024 users)", n / 10,
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) {
                                try (Context c = Context.of(users[i & 1023]).set("country", "US").set("plan", "enterprise")) {
                                    s += rule2.boolValue(c, false) ? 1 : 0;
                                }
                            }
                            return s;
                        },
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += byUser.get(users[i & 1023]) ? 1 : 0;
                            return s;
                        }),
                new Task("random flag of 10,000 by key, reused context", n,
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += client.boolValue(randomKeys[i & 0xFFFF], ctx, false) ? 1 : 0;
                            return s;
                        },
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += byFlag.get(randomKeys[i & 0xFFFF]) ? 1 : 0;
                            return s;
                        }),
                new Task("random flag of 10,000, flag handles, reused context", n,
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += handles[randomIdx[i & 0xFFFF]].boolValue(ctx, false) ? 1 : 0;
                            return s;
                        },
                        k -> {
                            long s = 0;
                            for (int i = 0; i < k; i++) s += byFlag.get(randomKeys[i & 0xFFFF]) ? 1 : 0;
                            return s;
                        }));

        for (Task t : tasks) { // warm-up: the interpreter, then compiled code
            time(t.subject, t.n);
            time(t.floor, t.n);
        }
        for (int r = 0; r < rounds; r++) {
            for (Task t : tasks) {
                t.subjectNs.add(time(t.subject, t.n));
                t.floorNs.add(time(t.floor, t.n));
            }
        }
        for (Task t : tasks) {
            t.subjectBytes = bytes(t.subject, t.n);
            t.floorBytes = bytes(t.floor, t.n);
        }

        System.out.printf(Locale.ROOT, "Java %s, %s %s, %d rounds of %,d evaluations (context per call: %,d)%n%n",
                System.getProperty("java.version"), System.getProperty("os.name"), System.getProperty("os.arch"),
                rounds, n, n / 10);
        System.out.println("| case | flagstream ns/eval | floor (HashMap) ns | ratio | flagstream bytes/eval | floor bytes |");
        System.out.println("|---|---:|---:|---:|---:|---:|");
        for (Task t : tasks) {
            List<Double> ratios = new ArrayList<>();
            for (int i = 0; i < t.subjectNs.size(); i++) {
                ratios.add(t.subjectNs.get(i) / t.floorNs.get(i));
            }
            System.out.printf(Locale.ROOT, "| %s | %.1f | %.1f | %.1fx | %.1f | %.1f |%n", t.name, median(t.subjectNs),
                    median(t.floorNs), median(ratios), t.subjectBytes, t.floorBytes);
        }
        System.out.println();
        System.out.println("(sink " + (sink % 10) + ")");
        ctx.close();
        client.close();
    }
}
