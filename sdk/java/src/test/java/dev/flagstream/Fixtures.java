package dev.flagstream;

import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * What the tests share: the environment they need (missing: the test
 * fails, never skips), the wait bound, child JVMs.
 */
final class Fixtures {
    /**
     * How long any wait on an event may take before a test fails: not a
     * bound asserted on timing, generous on a loaded 2-core machine.
     */
    static final Duration STEP = Duration.ofSeconds(60);

    private Fixtures() {}

    /** An environment variable that must be set (the Rust harness sets it). */
    static String env(String name) {
        String v = System.getenv(name);
        if (v == null || v.isEmpty()) {
            fail(name + " must be set (cargo test -p flagstream-tests --test bindings java_sdk sets it; see sdk/java/README.md)");
        }
        return v;
    }

    /** A binary named by an environment variable, which must exist. */
    static Path binary(String name) {
        Path p = Path.of(env(name));
        if (!Files.isExecutable(p)) {
            fail(name + "=" + p + " is not an executable file");
        }
        return p;
    }

    /** Waits for {@code latch}, failing with {@code what} after {@link #STEP}. */
    static void await(CountDownLatch latch, String what) throws InterruptedException {
        if (!latch.await(STEP.toSeconds(), TimeUnit.SECONDS)) {
            fail(what + ": not within " + STEP.toSeconds() + " s");
        }
    }

    /** A {@code java} command running {@code main} on this JVM's class path, with its native settings. */
    static List<String> childJvm(String main, List<String> properties, String... args) {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        for (String p : List.of(NativeLoader.DIR_PROPERTY, NativeLoader.PATH_PROPERTY)) {
            String v = System.getProperty(p);
            if (v != null && properties.stream().noneMatch(x -> x.startsWith("-D" + p + "="))) {
                cmd.add("-D" + p + "=" + v);
            }
        }
        cmd.addAll(properties);
        // Not java.class.path: under the JUnit console launcher that is the
        // launcher's jar alone; the package, the tests and JUnit are where
        // their classes were loaded from.
        cmd.add("-cp");
        cmd.add(String.join(java.io.File.pathSeparator, location(FlagstreamClient.class), location(ChildMain.class),
                location(org.junit.jupiter.api.Assertions.class)));
        cmd.add(main);
        cmd.addAll(List.of(args));
        return cmd;
    }

    private static String location(Class<?> c) {
        try {
            return Path.of(c.getProtectionDomain().getCodeSource().getLocation().toURI()).toString();
        } catch (java.net.URISyntaxException e) {
            throw new IllegalStateException(e);
        }
    }

    /** Runs a child process to its end (failing after {@link #STEP}); returns its exit code and output. */
    static Result run(List<String> cmd) throws IOException, InterruptedException {
        return run(new ProcessBuilder(cmd));
    }

    /** As {@link #run(List)}, for a process set up by the caller (its environment). */
    static Result run(ProcessBuilder pb) throws IOException, InterruptedException {
        List<String> cmd = pb.command();
        Process p = pb.redirectErrorStream(true).start();
        StringBuilder out = new StringBuilder();
        Thread reader = new Thread(() -> {
            try {
                out.append(new String(p.getInputStream().readAllBytes()));
            } catch (IOException e) {
                out.append("(reading the output failed: ").append(e).append(')');
            }
        });
        reader.setDaemon(true);
        reader.start();
        if (!p.waitFor(STEP.toSeconds(), TimeUnit.SECONDS)) {
            p.destroyForcibly();
            reader.join(STEP.toMillis());
            fail("the child " + cmd + " did not exit by itself within " + STEP.toSeconds() + " s:\n" + out);
        }
        reader.join(STEP.toMillis());
        return new Result(p.exitValue(), out.toString());
    }

    /** A child's exit code and output (stdout and stderr). */
    record Result(int code, String output) {}
}
