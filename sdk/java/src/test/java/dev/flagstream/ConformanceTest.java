package dev.flagstream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.math.BigInteger;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.stream.Collectors;
import java.util.stream.Stream;
import org.junit.jupiter.api.Test;

/**
 * The whole data-driven evaluation suite (tests/data/eval/*.yaml, converted
 * to JSON by the Rust harness into $FLAGSTREAM_EVAL_JSON) through the public
 * Java API, as sdk/python/tests/test_conformance.py runs it: every case, the
 * same value (JSON types compared exactly), reason, variation, rule index
 * and id, prerequisite key, schedule step and error; cases with {@code now}
 * through {@link FlagstreamClient#detailAt}; the plain value agreeing with
 * the detail, by key and through a flag handle; each context made from its
 * JSON form and, when it is a plain user context, with {@link Context#of}
 * and the setters.
 */
class ConformanceTest {
    /** The converted files, sorted. */
    static List<Path> files() throws IOException {
        Path dir = Path.of(Fixtures.env("FLAGSTREAM_EVAL_JSON"));
        try (Stream<Path> s = Files.list(dir)) {
            return s.filter(p -> p.toString().endsWith(".json")).sorted().collect(Collectors.toList());
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> read(Path file) throws IOException {
        return (Map<String, Object>) Json.parse(Files.readString(file));
    }

    @Test
    @SuppressWarnings("unchecked")
    void everyCaseOfEveryFileThroughThePublicApi() throws IOException {
        List<String> problems = new ArrayList<>();
        int total = 0;
        for (Path path : files()) {
            Map<String, Object> file = read(path);
            Map<String, Object> set = new LinkedHashMap<>();
            set.put("flags", Objects.requireNonNullElse(file.get("flags"), List.of()));
            set.put("segments", Objects.requireNonNullElse(file.get("segments"), List.of()));
            boolean validate = !Boolean.FALSE.equals(file.get("validate"));
            List<Object> cases = (List<Object>) file.get("cases");
            try (FlagstreamClient client = FlagstreamClient.builder().testData(Json.write(set), validate).build()) {
                for (Object c : cases) {
                    for (String p : runCase(client, (Map<String, Object>) c)) {
                        problems.add(path.getFileName() + ": " + p);
                    }
                }
            }
            total += cases.size();
        }
        assertTrue(problems.isEmpty(), problems.size() + " problems in " + total + " cases:\n"
                + String.join("\n", problems.subList(0, Math.min(problems.size(), 40))));
    }

    @Test
    @SuppressWarnings("unchecked")
    void theSuiteIsWhole() throws IOException {
        List<Path> files = files();
        int cases = 0;
        for (Path p : files) {
            cases += ((List<Object>) read(p).get("cases")).size();
        }
        assertTrue(files.size() >= 20 && cases >= 1000, files.size() + " files, " + cases + " cases");
    }

    @Test
    void errorsAreCountedNotThrown() {
        try (FlagstreamClient client = FlagstreamClient.testData("flags: []"); Context ctx = Context.of("u")) {
            assertEquals(true, client.boolValue("missing", ctx, true));
            EvaluationDetail<String> d = client.stringDetail("missing", ctx, "dflt");
            assertEquals("dflt", d.value());
            assertEquals("ERROR", d.reason());
            assertEquals("FLAG_NOT_FOUND", d.errorKind().orElseThrow());
            assertTrue(d.variation().isEmpty());
            assertEquals(2, client.stats().defaultNotFound());
        }
    }

    /** One case with every context form; the problems found. */
    @SuppressWarnings("unchecked")
    static List<String> runCase(FlagstreamClient client, Map<String, Object> c) {
        String name = (String) c.get("name");
        String type = (String) c.get("type");
        String key = (String) c.get("flag");
        Object def = c.get("default");
        Object now = c.get("now");
        Map<String, Object> want = new LinkedHashMap<>((Map<String, Object>) c.get("expect"));
        if ("".equals(want.get("rule_id"))) {
            want.remove("rule_id");
        }
        Object wantValue = want.get("value");
        if (type.equals("float") && (wantValue instanceof Long || wantValue instanceof BigInteger)) {
            want.put("value", ((Number) wantValue).doubleValue());
        }
        Map<String, Object> ctxJson = (Map<String, Object>) c.get("context");
        List<String> problems = new ArrayList<>();
        try (Context fromJson = Context.fromJson(Json.write(ctxJson)); Context built = built(ctxJson)) {
            for (Context ctx : built == null ? List.of(fromJson) : List.of(fromJson, built)) {
                String label = name + (ctx == built ? " (Context.of + set)" : "");
                if (now != null) {
                    EvaluationDetail<?> d = client.detailAt(valueType(type), key, ctx, def, instant(now));
                    check(problems, label + " [detailAt]", want, observe(d));
                    continue;
                }
                EvaluationDetail<?> d = detail(client, null, type, key, ctx, def);
                check(problems, label, want, observe(d));
                Object plain = value(client, null, type, key, ctx, def);
                if (!same(plain, d.value())) {
                    problems.add(label + ": " + type + "Value() returned " + plain + ", the detail " + d.value());
                }
                Flag flag = client.flag(key);
                check(problems, label + " [flag handle]", want, observe(detail(client, flag, type, key, ctx, def)));
                Object viaFlag = value(client, flag, type, key, ctx, def);
                if (!same(viaFlag, d.value())) {
                    problems.add(label + ": the flag handle's " + type + "Value() returned " + viaFlag);
                }
            }
        } catch (RuntimeException e) {
            problems.add(name + ": threw " + e);
        }
        return problems;
    }

    private static void check(List<String> problems, String label, Map<String, Object> want, Map<String, Object> got) {
        if (!same(want, got)) {
            problems.add(label + ": expected " + want + "\n    got " + got);
        }
    }

    /** The context built with the setters, when the file form is a plain user context; else null. */
    @SuppressWarnings("unchecked")
    static Context built(Map<String, Object> c) {
        Object kind = c.get("kind");
        if (c.containsKey("contexts") || (kind != null && !"user".equals(kind)) || !(c.get("key") instanceof String)) {
            return null;
        }
        Map<String, Object> attrs = (Map<String, Object>) Objects.requireNonNullElse(c.get("attributes"), Map.of());
        if (attrs.values().stream().anyMatch(Objects::isNull)) {
            return null; // a null attribute: the JSON form only (setJson's null removes)
        }
        Context ctx = Context.of((String) c.get("key"));
        attrs.forEach((name, v) -> {
            if (name.equals("key") || name.equals("kind")) {
                return;
            }
            if (v instanceof String) {
                ctx.set(name, (String) v);
            } else if (v instanceof Boolean) {
                ctx.set(name, (boolean) (Boolean) v);
            } else if (v instanceof Double) {
                ctx.set(name, (double) (Double) v);
            } else {
                ctx.setJson(name, Json.write(v)); // integers exactly, lists, objects
            }
        });
        return ctx;
    }

    static ValueType valueType(String type) {
        switch (type) {
            case "bool": return ValueType.BOOL;
            case "int": return ValueType.INT;
            case "float": return ValueType.DOUBLE;
            case "string": return ValueType.STRING;
            case "json": return ValueType.JSON;
            default: throw new IllegalArgumentException("unknown case type " + type);
        }
    }

    static Instant instant(Object now) {
        if (now instanceof Number) {
            return Instant.ofEpochMilli(((Number) now).longValue());
        }
        return OffsetDateTime.parse((String) now).toInstant();
    }

    /** {@code <type>Detail} by key, or through {@code flag} when not null. */
    static EvaluationDetail<?> detail(FlagstreamClient client, Flag flag, String type, String key, Context ctx,
            Object def) {
        switch (type) {
            case "bool":
                return flag == null ? client.boolDetail(key, ctx, (Boolean) def) : flag.boolDetail(ctx, (Boolean) def);
            case "int": {
                long d = ((Number) def).longValue();
                return flag == null ? client.intDetail(key, ctx, d) : flag.intDetail(ctx, d);
            }
            case "float": {
                double d = ((Number) def).doubleValue();
                return flag == null ? client.doubleDetail(key, ctx, d) : flag.doubleDetail(ctx, d);
            }
            case "string":
                return flag == null ? client.stringDetail(key, ctx, (String) def) : flag.stringDetail(ctx, (String) def);
            default:
                return flag == null ? client.jsonDetail(key, ctx, def) : flag.jsonDetail(ctx, def);
        }
    }

    /** {@code <type>Value} by key, or through {@code flag} when not null. */
    static Object value(FlagstreamClient client, Flag flag, String type, String key, Context ctx, Object def) {
        switch (type) {
            case "bool":
                return flag == null ? client.boolValue(key, ctx, (Boolean) def) : flag.boolValue(ctx, (Boolean) def);
            case "int": {
                long d = ((Number) def).longValue();
                return flag == null ? client.intValue(key, ctx, d) : flag.intValue(ctx, d);
            }
            case "float": {
                double d = ((Number) def).doubleValue();
                return flag == null ? client.doubleValue(key, ctx, d) : flag.doubleValue(ctx, d);
            }
            case "string":
                return flag == null ? client.stringValue(key, ctx, (String) def) : flag.stringValue(ctx, (String) def);
            default:
                return flag == null ? client.jsonValue(key, ctx, def) : flag.jsonValue(ctx, def);
        }
    }

    /** The detail in the file's terms (absent fields left out, indices as JSON integers). */
    static Map<String, Object> observe(EvaluationDetail<?> d) {
        Map<String, Object> out = new LinkedHashMap<>();
        out.put("value", d.value());
        out.put("reason", d.reason());
        d.variation().ifPresent(v -> out.put("variation", (long) v));
        d.ruleIndex().ifPresent(v -> out.put("rule_index", (long) v));
        d.ruleId().ifPresent(v -> out.put("rule_id", v));
        d.prerequisiteKey().ifPresent(v -> out.put("prerequisite_key", v));
        d.scheduleStep().ifPresent(v -> out.put("schedule_step", (long) v));
        d.errorKind().ifPresent(v -> out.put("error", v));
        return out;
    }

    /** Equal with the same JSON types (true is not 1, 1 is not 1.0), as the Python suite's {@code same}. */
    static boolean same(Object a, Object b) {
        if (a instanceof Map && b instanceof Map) {
            Map<?, ?> x = (Map<?, ?>) a;
            Map<?, ?> y = (Map<?, ?>) b;
            return x.keySet().equals(y.keySet()) && x.keySet().stream().allMatch(k -> same(x.get(k), y.get(k)));
        }
        if (a instanceof List && b instanceof List) {
            List<?> x = (List<?>) a;
            List<?> y = (List<?>) b;
            if (x.size() != y.size()) {
                return false;
            }
            for (int i = 0; i < x.size(); i++) {
                if (!same(x.get(i), y.get(i))) {
                    return false;
                }
            }
            return true;
        }
        if (a == null || b == null) {
            return a == b;
        }
        if (a instanceof Double && b instanceof Double) {
            return ((Double) a).doubleValue() == ((Double) b).doubleValue();
        }
        return a.getClass() == b.getClass() && a.equals(b);
    }
}
