package dev.flagstream;

import java.time.Duration;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

/**
 * What the tests run in a child JVM (not a test class):
 * <ul>
 * <li>{@code exit URL SDK_KEY}: a client with a change listener and a
 *     second, unclosed one; prints "listening", waits for the change the
 *     test writes (so a library thread was attached to the JVM), closes the
 *     first client and returns from main. The JVM must then exit by itself:
 *     no thread of the package may keep it alive.</li>
 * <li>{@code load}: makes a test-data client; prints the loader's error if
 *     there is one (exit 3), else "loaded".</li>
 * </ul>
 */
public final class ChildMain {
    private ChildMain() {}

    public static void main(String[] args) throws Exception {
        switch (args[0]) {
            case "exit": {
                FlagstreamClient client = FlagstreamClient.builder().endpoints(args[1]).sdkKey(args[2]).build();
                if (!client.waitReady(Fixtures.STEP)) {
                    System.out.println("no data: " + client.status());
                    System.exit(2);
                }
                CountDownLatch changed = new CountDownLatch(1);
                client.addChangeListener(c -> changed.countDown());
                FlagstreamClient other = FlagstreamClient.builder().endpoints(args[1]).sdkKey(args[2]).build();
                other.waitReady(Duration.ofSeconds(1));
                try (Context ctx = Context.of("user-42")) {
                    System.out.println("theme=" + client.stringValue("theme", ctx, "light"));
                }
                System.out.println("listening");
                System.out.flush();
                if (!changed.await(Fixtures.STEP.toSeconds(), TimeUnit.SECONDS)) {
                    System.out.println("no change arrived");
                    System.exit(2);
                }
                client.close();
                System.out.println("closed");
                return; // the JVM exits only if no non-daemon thread is left
            }
            case "load": {
                try {
                    FlagstreamClient.testData("flags: []").close();
                    System.out.println("loaded");
                } catch (UnsatisfiedLinkError e) {
                    System.out.println("error: " + e.getMessage());
                    System.exit(3);
                }
                return;
            }
            default:
                throw new IllegalArgumentException(args[0]);
        }
    }
}
