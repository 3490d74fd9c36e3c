package dev.flagstream;

import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * The options of a {@link FlagstreamClient} (the Rust {@code Builder}'s),
 * from {@link FlagstreamClient#builder()}: relays to follow, or test data or
 * a file to serve, then {@link #build()}. Durations are sent in seconds;
 * anything the library refuses is a {@link FlagstreamException}
 * ({@code INVALID_ARGUMENT}) naming the option. Not thread-safe; a builder
 * may build any number of clients.
 */
public final class ClientBuilder {
    private final Map<String, Object> options = new LinkedHashMap<>();

    /** From {@link FlagstreamClient#builder()}. */
    ClientBuilder() {}

    /**
     * @param urls relay URLs ({@code http://} or {@code https://}), in order of preference
     * @return this builder
     */
    public ClientBuilder endpoints(String... urls) {
        return endpoints(List.of(urls));
    }

    /**
     * @param urls relay URLs, in order of preference
     * @return this builder
     */
    public ClientBuilder endpoints(List<String> urls) {
        return option("endpoints", new ArrayList<>(urls));
    }

    /**
     * @param key the environment's SDK key
     * @return this builder
     */
    public ClientBuilder sdkKey(String key) {
        return option("sdk_key", Objects.requireNonNull(key, "sdkKey"));
    }

    /**
     * @param dir directory of the last-known-good cache (one per client)
     * @return this builder
     */
    public ClientBuilder cacheDir(Path dir) {
        return option("cache_dir", dir.toString());
    }

    /**
     * @param pem CA certificates (PEM text) trusted for {@code https://} relays
     * @return this builder
     */
    public ClientBuilder tlsCaPem(String pem) {
        return option("tls_ca_pem", Objects.requireNonNull(pem, "tlsCaPem"));
    }

    /**
     * @param certPem the client certificate chain (PEM) for mutual TLS
     * @param keyPem its private key (PEM)
     * @return this builder
     */
    public ClientBuilder tlsIdentityPem(String certPem, String keyPem) {
        return option("tls_identity_pem", List.of(certPem, keyPem));
    }

    /**
     * @param d TCP connect timeout
     * @return this builder
     */
    public ClientBuilder connectTimeout(Duration d) {
        return duration("connect_timeout", "connectTimeout", d);
    }

    /**
     * @param d HTTP/2 keepalive ping interval
     * @return this builder
     */
    public ClientBuilder keepaliveInterval(Duration d) {
        return duration("keepalive_interval", "keepaliveInterval", d);
    }

    /**
     * @param d how long a keepalive ping may go unanswered
     * @return this builder
     */
    public ClientBuilder keepaliveTimeout(Duration d) {
        return duration("keepalive_timeout", "keepaliveTimeout", d);
    }

    /**
     * @param d TCP_USER_TIMEOUT
     * @return this builder
     */
    public ClientBuilder tcpUserTimeout(Duration d) {
        return duration("tcp_user_timeout", "tcpUserTimeout", d);
    }

    /**
     * @param d how long a new stream may wait for its first message
     * @return this builder
     */
    public ClientBuilder firstMessageTimeout(Duration d) {
        return duration("first_message_timeout", "firstMessageTimeout", d);
    }

    /**
     * @param d heartbeat interval assumed until the relay says
     * @return this builder
     */
    public ClientBuilder heartbeatDefault(Duration d) {
        return duration("heartbeat_default", "heartbeatDefault", d);
    }

    /**
     * @param d first reconnect backoff
     * @return this builder
     */
    public ClientBuilder backoffBase(Duration d) {
        return duration("backoff_base", "backoffBase", d);
    }

    /**
     * @param d largest reconnect backoff
     * @return this builder
     */
    public ClientBuilder backoffCap(Duration d) {
        return duration("backoff_cap", "backoffCap", d);
    }

    /**
     * @param d how long a stream must live to reset the backoff
     * @return this builder
     */
    public ClientBuilder healthyAfter(Duration d) {
        return duration("healthy_after", "healthyAfter", d);
    }

    /**
     * @param d jitter added to stall detection
     * @return this builder
     */
    public ClientBuilder stallJitter(Duration d) {
        return duration("stall_jitter", "stallJitter", d);
    }

    /**
     * @param d age after which served data is marked stale
     * @return this builder
     */
    public ClientBuilder staleAfter(Duration d) {
        return duration("stale_after", "staleAfter", d);
    }

    /**
     * @param d least time between cache writes
     * @return this builder
     */
    public ClientBuilder cacheWriteInterval(Duration d) {
        return duration("cache_write_interval", "cacheWriteInterval", d);
    }

    /**
     * @param d how often a usage summary is sent
     * @return this builder
     */
    public ClientBuilder usageInterval(Duration d) {
        return duration("usage_interval", "usageInterval", d);
    }

    /**
     * @param n missed heartbeats before a stream is declared stalled
     * @return this builder
     */
    public ClientBuilder watchdogMisses(int n) {
        if (n < 0) {
            throw new IllegalArgumentException("watchdogMisses: negative (" + n + ")");
        }
        return option("watchdog_misses", n);
    }

    /**
     * @param keep try endpoints in the given order (default: shuffled)
     * @return this builder
     */
    public ClientBuilder keepEndpointOrder(boolean keep) {
        return option("keep_endpoint_order", keep);
    }

    /**
     * @param on count evaluations and send usage summaries (default on when following a relay)
     * @return this builder
     */
    public ClientBuilder usageReports(boolean on) {
        return option("usage_reports", on);
    }

    /**
     * Serves this flag set (YAML or JSON text) instead of following a relay, validated.
     *
     * @param yamlOrJson {@code {"flags": [...], "segments": [...]}}
     * @return this builder
     */
    public ClientBuilder testData(String yamlOrJson) {
        return testData(yamlOrJson, true);
    }

    /**
     * Serves this flag set instead of following a relay.
     *
     * @param yamlOrJson {@code {"flags": [...], "segments": [...]}}
     * @param validate false serves flags that fail validation as the engine
     *     compiles them (they evaluate to MALFORMED_FLAG errors)
     * @return this builder
     */
    public ClientBuilder testData(String yamlOrJson, boolean validate) {
        option("test_data", Objects.requireNonNull(yamlOrJson, "testData"));
        return option("validate", validate);
    }

    /**
     * @param file a YAML or JSON flag file (the format {@code flagctl export} writes), served instead of a relay
     * @return this builder
     */
    public ClientBuilder offlineFile(Path file) {
        return option("offline_file", file.toString());
    }

    /**
     * Sets an option by its name in the C ABI's options JSON (for options
     * newer than this builder); {@code null} removes it.
     *
     * @param name the option's JSON name
     * @param value a JSON-writable value
     * @return this builder
     */
    public ClientBuilder option(String name, Object value) {
        Objects.requireNonNull(name, "name");
        if (value == null) {
            options.remove(name);
        } else {
            Json.write(value); // refuses what cannot be sent, here rather than at build()
            options.put(name, value);
        }
        return this;
    }

    private ClientBuilder duration(String name, String what, Duration d) {
        Objects.requireNonNull(d, what);
        if (d.isNegative()) {
            throw new IllegalArgumentException(what + ": a negative duration (" + d + ")");
        }
        return option(name, d.getSeconds() + d.getNano() / 1e9);
    }

    /** @return the options as the JSON text sent to the library */
    String json() {
        return Json.write(options);
    }

    /**
     * Makes the client. Returns at once: it follows the relays in the
     * background (the cache, if any, is served meanwhile); see
     * {@link FlagstreamClient#waitReady(Duration)}.
     *
     * @return the client
     * @throws FlagstreamException ({@code INVALID_ARGUMENT}) naming a wrong option
     * @throws UnsatisfiedLinkError when the native library cannot be loaded (the message says what to set)
     */
    public FlagstreamClient build() {
        NativeLoader.ensureLoaded();
        return new FlagstreamClient(Native.clientNew(json()));
    }
}
