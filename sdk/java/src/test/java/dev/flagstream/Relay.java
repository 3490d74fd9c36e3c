package dev.flagstream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.stream.Stream;

/**
 * One relay process on 127.0.0.1 with the demo environment
 * ({@code $FLAGSTREAM_RELAY_BIN serve --demo true}), as
 * sdk/python/tests/conftest.py starts it; writes go through
 * {@code $FLAGSTREAM_FLAGCTL_BIN}.
 */
final class Relay implements AutoCloseable {
    final Path dir;
    final Path data;
    final String grpc;
    final String admin;
    private final Process proc;

    /** Starts a relay in {@code dir} (its data in dir/data), listening on a free port. */
    Relay(Path dir) throws IOException, InterruptedException {
        this.dir = dir;
        this.data = dir.resolve("data");
        Files.createDirectories(dir);
        ProcessBuilder pb = new ProcessBuilder(Fixtures.binary("FLAGSTREAM_RELAY_BIN").toString(), "serve",
                "--metrics-listen", "127.0.0.1:0", "--listen", "127.0.0.1:0", "--data-dir", data.toString(),
                "--demo", "true");
        pb.environment().put("RUST_LOG", "info");
        pb.redirectError(ProcessBuilder.Redirect.appendTo(dir.resolve("relay.log").toFile()));
        proc = pb.start();
        CompletableFuture<String> listening = new CompletableFuture<>();
        // Reads the line that says where it listens, then keeps draining
        // stdout so the relay never blocks on a full pipe.
        Thread drain = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(proc.getInputStream(), StandardCharsets.UTF_8))) {
                for (String line; (line = r.readLine()) != null; ) {
                    if (line.startsWith("flagstream-relay listening")) {
                        listening.complete(line);
                    }
                }
            } catch (IOException e) {
                listening.completeExceptionally(e);
            }
            listening.completeExceptionally(new IOException("the relay's stdout ended"));
        }, "relay-stdout");
        drain.setDaemon(true);
        drain.start();
        String line;
        try {
            line = listening.get(Fixtures.STEP.toSeconds(), TimeUnit.SECONDS);
        } catch (java.util.concurrent.ExecutionException | TimeoutException e) {
            proc.destroyForcibly();
            throw new AssertionError("the relay did not start (" + e + "):\n" + log(), e);
        }
        Map<String, String> fields = new HashMap<>();
        for (String w : line.split("\\s+")) {
            int eq = w.indexOf('=');
            if (eq > 0) {
                fields.put(w.substring(0, eq), w.substring(eq + 1));
            }
        }
        grpc = fields.get("grpc");
        admin = fields.get("admin");
        if (grpc == null || admin == null) {
            fail("no grpc= or admin= in: " + line);
        }
    }

    /** Starts relay {@code name} under {@code root}, first copying {@code from}'s store (the same epoch). */
    static Relay copyOf(Path root, String name, Relay from) throws IOException, InterruptedException {
        Path d = root.resolve(name).resolve("data");
        if (!Files.exists(d)) {
            copyTree(from.data, d);
        }
        return new Relay(root.resolve(name));
    }

    private static void copyTree(Path from, Path to) throws IOException {
        try (Stream<Path> all = Files.walk(from)) {
            for (Path p : (Iterable<Path>) all::iterator) {
                Path t = to.resolve(from.relativize(p).toString());
                if (Files.isDirectory(p)) {
                    Files.createDirectories(t);
                } else {
                    Files.copy(p, t, StandardCopyOption.COPY_ATTRIBUTES);
                }
            }
        }
    }

    String url() {
        return "http://" + grpc;
    }

    String sdkKey() throws IOException {
        return Files.readString(data.resolve("demo-sdk-key")).trim();
    }

    String adminToken() throws IOException {
        return Files.readString(data.resolve("admin-token")).trim();
    }

    String log() {
        try {
            return Files.readString(dir.resolve("relay.log"));
        } catch (IOException e) {
            return "(no log: " + e + ")";
        }
    }

    /** Runs {@code flagctl ARGS} against this relay's demo environment; returns its stdout. */
    String flagctl(String... args) throws IOException, InterruptedException {
        List<String> cmd = new ArrayList<>(List.of(Fixtures.binary("FLAGSTREAM_FLAGCTL_BIN").toString(),
                "--relay", url(), "--token", adminToken(), "--config", "/nonexistent/flagctl.toml"));
        cmd.addAll(List.of(args));
        ProcessBuilder pb = new ProcessBuilder(cmd);
        pb.environment().put("FLAGSTREAM_ENV", "demo");
        Fixtures.Result r = Fixtures.run(pb);
        assertEquals(0, r.code(), "flagctl " + List.of(args) + ":\n" + r.output());
        return r.output();
    }

    /** SIGTERM and wait: a clean shutdown. */
    void stop() throws InterruptedException {
        if (proc.isAlive()) {
            proc.destroy();
            if (!proc.waitFor(Fixtures.STEP.toSeconds(), TimeUnit.SECONDS)) {
                fail("the relay did not stop on SIGTERM:\n" + log());
            }
        }
    }

    /** SIGKILL and wait. */
    void kill() throws InterruptedException {
        if (proc.isAlive()) {
            proc.destroyForcibly();
            proc.waitFor(Fixtures.STEP.toSeconds(), TimeUnit.SECONDS);
        }
    }

    @Override
    public void close() {
        try {
            kill();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
