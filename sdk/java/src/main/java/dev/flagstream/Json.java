package dev.flagstream;

import java.math.BigDecimal;
import java.math.BigInteger;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * A small, strict JSON reader and writer (RFC 8259), for the option text
 * sent to the library and the JSON values it returns. The JDK has none.
 *
 * <p>Reading: objects become {@link LinkedHashMap} (keys in document
 * order; a key twice is an error), arrays {@link ArrayList}, strings
 * {@link String}, numbers {@link Long} when integral and in range (else
 * {@link BigInteger}), {@link Double} when written with a fraction or an
 * exponent (an out-of-range one is an error), {@code true}/{@code false}
 * {@link Boolean}, {@code null} null. Anything else (comments, trailing
 * commas, leading zeros, single quotes, control characters in strings,
 * lone surrogate escapes, text after the value) is an
 * {@link IllegalArgumentException} naming the offset.
 *
 * <p>Writing: the same types back, plus any {@link Number} of the JDK's
 * integral boxes, {@link Float}, {@link BigDecimal}, any {@link Map} with
 * string keys, any {@link Collection} and {@code Object[]}. NaN, infinities,
 * non-string keys, unpaired surrogates and other types are refused.
 */
final class Json {
    /** Nesting deeper than this is refused (reading and writing). */
    static final int MAX_DEPTH = 512;

    private Json() {}

    /** Parses one JSON value (surrounding whitespace allowed). */
    static Object parse(String text) {
        Reader r = new Reader(text);
        r.skipWhitespace();
        Object v = r.value(0);
        r.skipWhitespace();
        if (r.pos != text.length()) {
            throw r.error("unexpected text after the value");
        }
        return v;
    }

    /** Writes {@code value} as compact JSON text. */
    static String write(Object value) {
        StringBuilder out = new StringBuilder();
        write(out, value, 0);
        return out.toString();
    }

    private static void write(StringBuilder out, Object v, int depth) {
        if (depth > MAX_DEPTH) {
            throw new IllegalArgumentException("JSON: nested deeper than " + MAX_DEPTH + " (a cycle?)");
        }
        if (v == null) {
            out.append("null");
        } else if (v instanceof String) {
            writeString(out, (String) v);
        } else if (v instanceof Boolean) {
            out.append(((Boolean) v) ? "true" : "false");
        } else if (v instanceof Long || v instanceof Integer || v instanceof Short || v instanceof Byte
                || v instanceof BigInteger) {
            out.append(v);
        } else if (v instanceof Double || v instanceof Float) {
            double d = ((Number) v).doubleValue();
            if (Double.isNaN(d) || Double.isInfinite(d)) {
                throw new IllegalArgumentException("JSON: " + v + " is not a JSON number");
            }
            // Double.toString writes "1.0", "1.0E10", "1.0E-5": all JSON numbers.
            out.append(v instanceof Float ? Float.toString((Float) v) : Double.toString(d));
        } else if (v instanceof BigDecimal) {
            out.append(v);
        } else if (v instanceof Map) {
            out.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : ((Map<?, ?>) v).entrySet()) {
                if (!(e.getKey() instanceof String)) {
                    throw new IllegalArgumentException("JSON: an object key must be a String, not " + e.getKey());
                }
                if (!first) {
                    out.append(',');
                }
                first = false;
                writeString(out, (String) e.getKey());
                out.append(':');
                write(out, e.getValue(), depth + 1);
            }
            out.append('}');
        } else if (v instanceof Collection || v instanceof Object[]) {
            Iterable<?> items = v instanceof Object[] ? List.of((Object[]) v) : (Collection<?>) v;
            out.append('[');
            boolean first = true;
            for (Object item : items) {
                if (!first) {
                    out.append(',');
                }
                first = false;
                write(out, item, depth + 1);
            }
            out.append(']');
        } else {
            throw new IllegalArgumentException("JSON: cannot write a " + v.getClass().getName());
        }
    }

    private static void writeString(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                case '\b': out.append("\\b"); break;
                case '\f': out.append("\\f"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else if (Character.isHighSurrogate(c) && i + 1 < s.length()
                            && Character.isLowSurrogate(s.charAt(i + 1))) {
                        out.append(c).append(s.charAt(++i));
                    } else if (Character.isSurrogate(c)) {
                        throw new IllegalArgumentException("JSON: an unpaired surrogate at index " + i + " of a string");
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }

    /** A cursor over the text being read. */
    private static final class Reader {
        final String s;
        int pos;

        Reader(String s) {
            this.s = s;
        }

        IllegalArgumentException error(String what) {
            return new IllegalArgumentException("invalid JSON at offset " + pos + ": " + what);
        }

        void skipWhitespace() {
            while (pos < s.length()) {
                char c = s.charAt(pos);
                if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
                    return;
                }
                pos++;
            }
        }

        Object value(int depth) {
            if (depth > MAX_DEPTH) {
                throw error("nested deeper than " + MAX_DEPTH);
            }
            if (pos >= s.length()) {
                throw error("a value expected, the text ended");
            }
            char c = s.charAt(pos);
            switch (c) {
                case '{': return object(depth);
                case '[': return array(depth);
                case '"': return string();
                case 't': return literal("true", Boolean.TRUE);
                case 'f': return literal("false", Boolean.FALSE);
                case 'n': return literal("null", null);
                default:
                    if (c == '-' || (c >= '0' && c <= '9')) {
                        return number();
                    }
                    throw error("unexpected character '" + c + "'");
            }
        }

        private Object literal(String word, Object v) {
            if (!s.startsWith(word, pos)) {
                throw error("unexpected text (expected " + word + ")");
            }
            pos += word.length();
            return v;
        }

        private Map<String, Object> object(int depth) {
            pos++; // {
            Map<String, Object> m = new LinkedHashMap<>();
            skipWhitespace();
            if (pos < s.length() && s.charAt(pos) == '}') {
                pos++;
                return m;
            }
            while (true) {
                skipWhitespace();
                if (pos >= s.length() || s.charAt(pos) != '"') {
                    throw error("a string key expected");
                }
                int at = pos;
                String key = string();
                skipWhitespace();
                expect(':');
                skipWhitespace();
                Object v = value(depth + 1);
                if (m.containsKey(key)) {
                    pos = at;
                    throw error("the key \"" + key + "\" appears twice");
                }
                m.put(key, v);
                skipWhitespace();
                if (pos < s.length() && s.charAt(pos) == ',') {
                    pos++;
                    continue;
                }
                expect('}');
                return m;
            }
        }

        private List<Object> array(int depth) {
            pos++; // [
            List<Object> list = new ArrayList<>();
            skipWhitespace();
            if (pos < s.length() && s.charAt(pos) == ']') {
                pos++;
                return list;
            }
            while (true) {
                skipWhitespace();
                list.add(value(depth + 1));
                skipWhitespace();
                if (pos < s.length() && s.charAt(pos) == ',') {
                    pos++;
                    continue;
                }
                expect(']');
                return list;
            }
        }

        private void expect(char c) {
            if (pos >= s.length() || s.charAt(pos) != c) {
                throw error("'" + c + "' expected");
            }
            pos++;
        }

        private String string() {
            pos++; // "
            StringBuilder b = null;
            int start = pos;
            while (true) {
                if (pos >= s.length()) {
                    throw error("an unterminated string");
                }
                char c = s.charAt(pos);
                if (c == '"') {
                    String tail = s.substring(start, pos++);
                    return b == null ? tail : b.append(tail).toString();
                }
                if (c < 0x20) {
                    throw error("a control character in a string");
                }
                if (c != '\\') {
                    pos++;
                    continue;
                }
                if (b == null) {
                    b = new StringBuilder();
                }
                b.append(s, start, pos);
                pos++; // backslash
                if (pos >= s.length()) {
                    throw error("an unterminated escape");
                }
                char e = s.charAt(pos++);
                switch (e) {
                    case '"': b.append('"'); break;
                    case '\\': b.append('\\'); break;
                    case '/': b.append('/'); break;
                    case 'b': b.append('\b'); break;
                    case 'f': b.append('\f'); break;
                    case 'n': b.append('\n'); break;
                    case 'r': b.append('\r'); break;
                    case 't': b.append('\t'); break;
                    case 'u': {
                        char u = hex4();
                        if (Character.isHighSurrogate(u)) {
                            if (!s.startsWith("\\u", pos)) {
                                throw error("a lone surrogate escape");
                            }
                            pos += 2;
                            char low = hex4();
                            if (!Character.isLowSurrogate(low)) {
                                throw error("a lone surrogate escape");
                            }
                            b.append(u).append(low);
                        } else if (Character.isLowSurrogate(u)) {
                            throw error("a lone surrogate escape");
                        } else {
                            b.append(u);
                        }
                        break;
                    }
                    default:
                        pos--;
                        throw error("an invalid escape \\" + e);
                }
                start = pos;
            }
        }

        private char hex4() {
            if (pos + 4 > s.length()) {
                throw error("a \\u escape needs four hex digits");
            }
            int v = 0;
            for (int i = 0; i < 4; i++) {
                int d = Character.digit(s.charAt(pos + i), 16);
                if (d < 0) {
                    throw error("a \\u escape needs four hex digits");
                }
                v = v * 16 + d;
            }
            pos += 4;
            return (char) v;
        }

        private Object number() {
            int start = pos;
            if (s.charAt(pos) == '-') {
                pos++;
            }
            if (pos >= s.length() || !isDigit(s.charAt(pos))) {
                throw error("a digit expected");
            }
            if (s.charAt(pos) == '0') {
                pos++;
                if (pos < s.length() && isDigit(s.charAt(pos))) {
                    throw error("a leading zero");
                }
            } else {
                digits();
            }
            boolean integral = true;
            if (pos < s.length() && s.charAt(pos) == '.') {
                integral = false;
                pos++;
                if (pos >= s.length() || !isDigit(s.charAt(pos))) {
                    throw error("a digit expected after '.'");
                }
                digits();
            }
            if (pos < s.length() && (s.charAt(pos) == 'e' || s.charAt(pos) == 'E')) {
                integral = false;
                pos++;
                if (pos < s.length() && (s.charAt(pos) == '+' || s.charAt(pos) == '-')) {
                    pos++;
                }
                if (pos >= s.length() || !isDigit(s.charAt(pos))) {
                    throw error("a digit expected in the exponent");
                }
                digits();
            }
            String text = s.substring(start, pos);
            if (integral) {
                try {
                    return Long.parseLong(text);
                } catch (NumberFormatException tooBig) {
                    return new BigInteger(text);
                }
            }
            double d = Double.parseDouble(text);
            if (Double.isInfinite(d)) {
                pos = start;
                throw error("the number " + text + " is out of range");
            }
            return d;
        }

        private void digits() {
            while (pos < s.length() && isDigit(s.charAt(pos))) {
                pos++;
            }
        }

        private static boolean isDigit(char c) {
            return c >= '0' && c <= '9';
        }
    }
}
