package dev.flagstream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The package's strict JSON reader and writer. */
class JsonTest {
    @Test
    void readsEveryTypeWithItsJsonType() {
        Object v = Json.parse(" {\"a\": [1, -0, 1.0, 2e3, -1.5E-2, true, false, null, \"x\"], \"b\": {}, \"c\": []} ");
        Map<String, Object> want = new LinkedHashMap<>();
        want.put("a", Arrays.asList(1L, 0L, 1.0, 2000.0, -0.015, true, false, null, "x"));
        want.put("b", Map.of());
        want.put("c", List.of());
        assertEquals(want, v);
        assertEquals(Long.MAX_VALUE, Json.parse("9223372036854775807"));
        assertEquals(new BigInteger("18446744073709551615"), Json.parse("18446744073709551615"));
        assertEquals(Long.MIN_VALUE, Json.parse("-9223372036854775808"));
        // Integral and fractional stay apart: 1 is not 1.0.
        assertTrue(Json.parse("1") instanceof Long);
        assertTrue(Json.parse("1.0") instanceof Double);
    }

    @Test
    void readsStringEscapesAndSurrogatePairs() {
        assertEquals("a\"\\/\b\f\n\r\t\u00e9\u20ac\ud83d\ude00", Json.parse("\"a\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9€\\ud83d\\ude00\""));
        assertEquals("日本", Json.parse("\"日本\""));
        assertEquals("", Json.parse("\"\""));
    }

    @Test
    void refusesWhatIsNotStrictJson() {
        String[] bad = {
            "", " ", "{", "[1,]", "{\"a\":1,}", "[1 2]", "01", "-", "1.", ".5", "1e", "+1", "NaN", "Infinity",
            "'a'", "\"a", "\"\\x\"", "\"\\u12\"", "\"\\ud83d\"", "\"\\ude00\"", "\"a\u0001\"", "tru", "nul",
            "{\"a\" 1}", "{1: 2}", "[1] x", "/* c */ 1", "{\"a\":1,\"a\":2}", "1e400", "-1e400",
        };
        for (String text : bad) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Json.parse(text), text);
            assertTrue(e.getMessage().startsWith("invalid JSON at offset "), e.getMessage());
        }
    }

    @Test
    void refusesNestingBeyondTheLimit() {
        String deep = "[".repeat(Json.MAX_DEPTH + 2) + "]".repeat(Json.MAX_DEPTH + 2);
        assertThrows(IllegalArgumentException.class, () -> Json.parse(deep));
        String ok = "[".repeat(100) + "]".repeat(100);
        assertTrue(Json.parse(ok) instanceof List);
    }

    @Test
    void writesCompactJsonThatReadsBack() {
        Map<String, Object> m = new LinkedHashMap<>();
        m.put("s", "q\"\\\n\u0001é\ud83d\ude00");
        m.put("i", 42);
        m.put("l", -7L);
        m.put("d", 0.5);
        m.put("e", 1e21);
        m.put("f", 1.5f);
        m.put("b", true);
        m.put("n", null);
        m.put("list", List.of(1L, "two", List.of()));
        m.put("array", new Object[] {false});
        String text = Json.write(m);
        assertEquals("{\"s\":\"q\\\"\\\\\\n\\u0001é\ud83d\ude00\",\"i\":42,\"l\":-7,\"d\":0.5,\"e\":1.0E21,\"f\":1.5,"
                + "\"b\":true,\"n\":null,\"list\":[1,\"two\",[]],\"array\":[false]}", text);
        Map<String, Object> back = new LinkedHashMap<>(m);
        back.put("i", 42L);
        back.put("f", 1.5);
        back.put("array", List.of(false));
        assertEquals(back, Json.parse(text));
        assertEquals("\"x\"", Json.write("x"));
        assertEquals("null", Json.write(null));
    }

    @Test
    void refusesWhatJsonCannotHold() {
        assertThrows(IllegalArgumentException.class, () -> Json.write(Double.NaN));
        assertThrows(IllegalArgumentException.class, () -> Json.write(Double.POSITIVE_INFINITY));
        assertThrows(IllegalArgumentException.class, () -> Json.write(Map.of(1, 2)));
        assertThrows(IllegalArgumentException.class, () -> Json.write(new Object()));
        assertThrows(IllegalArgumentException.class, () -> Json.write("\ud83d"));
        List<Object> cycle = new ArrayList<>();
        cycle.add(cycle);
        assertThrows(IllegalArgumentException.class, () -> Json.write(cycle));
    }
}
