import dev.flagstream.Context;
import dev.flagstream.Flag;
import dev.flagstream.FlagstreamClient;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;

/**
 * Watches the demo relay's flags (README quickstart):
 *
 *   java -cp sdk/java/build/flagstream.jar sdk/java/examples/Watch.java [RELAY_URL] [SDK_KEY]
 *
 * Defaults: http://127.0.0.1:7070 and the key in flagstream-data/demo-sdk-key.
 * Prints the flags at once and after every change; Enter (or the end of
 * stdin) stops it.
 */
public class Watch {
    public static void main(String[] args) throws Exception {
        String url = args.length > 0 ? args[0] : "http://127.0.0.1:7070";
        String key = args.length > 1 ? args[1] : Files.readString(Path.of("flagstream-data/demo-sdk-key")).trim();
        Context[] users = new Context[20];
        for (int i = 0; i < users.length; i++) {
            users[i] = Context.of("user-" + (i + 1));
        }
        try (FlagstreamClient client = FlagstreamClient.builder().endpoints(url).sdkKey(key).build();
                Context user42 = Context.of("user-42").set("country", "US").set("plan", "enterprise")) {
            System.out.println("has data: " + client.waitReady(Duration.ofSeconds(5)) + ", " + client.status());
            Flag checkout = client.flag("new-checkout");
            Runnable show = () -> {
                int on = 0;
                for (Context u : users) {
                    on += checkout.boolValue(u, false) ? 1 : 0;
                }
                System.out.printf("revision %d: new-checkout on for %d/20 users | beta-banner(user-1)=%b | theme(user-42)=%s%n",
                        client.status().revision(), on, client.boolValue("beta-banner", users[0], false),
                        client.stringValue("theme", user42, "light"));
            };
            show.run();
            // Called on a library thread, one change at a time.
            client.addChangeListener(change -> show.run());
            System.out.println("watching the demo writer's changes; Enter to stop");
            System.in.read();
        } finally {
            for (Context u : users) {
                u.close();
            }
        }
    }
}
