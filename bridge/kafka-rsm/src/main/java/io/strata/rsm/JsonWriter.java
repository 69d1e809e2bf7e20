package io.strata.rsm;

/**
 * A minimal streaming JSON writer producing compact output (no insignificant whitespace).
 *
 * <p>Strings are escaped per RFC 8259: {@code "} and {@code \} are backslash-escaped, control
 * characters U+0000..U+001F use the short escapes where they exist and {@code \}{@code uXXXX}
 * otherwise, and every other character, including non-ASCII, is written as is (the caller encodes
 * the result as UTF-8). Unpaired surrogates, which UTF-8 cannot carry, are written as
 * {@code \}{@code uXXXX} escapes so that no character is silently replaced.
 *
 * <p>The writer does not check that calls are well nested; callers are a handful of fixed
 * request shapes covered by tests.
 */
final class JsonWriter {
    private static final char[] HEX = "0123456789abcdef".toCharArray();

    private final StringBuilder out = new StringBuilder(512);
    /** True right after an opening bracket or a member name: the next item takes no comma. */
    private boolean first = true;

    JsonWriter beginObject() {
        separate();
        out.append('{');
        first = true;
        return this;
    }

    JsonWriter endObject() {
        out.append('}');
        first = false;
        return this;
    }

    JsonWriter beginArray() {
        separate();
        out.append('[');
        first = true;
        return this;
    }

    JsonWriter endArray() {
        out.append(']');
        first = false;
        return this;
    }

    /** Writes a member name; the next call must write its value. */
    JsonWriter name(String name) {
        separate();
        appendString(out, name);
        out.append(':');
        first = true;
        return this;
    }

    JsonWriter value(String s) {
        separate();
        if (s == null) {
            out.append("null");
        } else {
            appendString(out, s);
        }
        first = false;
        return this;
    }

    JsonWriter value(long n) {
        separate();
        out.append(n);
        first = false;
        return this;
    }

    JsonWriter nullValue() {
        separate();
        out.append("null");
        first = false;
        return this;
    }

    @Override
    public String toString() {
        return out.toString();
    }

    private void separate() {
        if (!first) {
            out.append(',');
        }
    }

    /** Appends {@code s} as a quoted, escaped JSON string. */
    static void appendString(StringBuilder sb, String s) {
        sb.append('"');
        final int n = s.length();
        for (int i = 0; i < n; i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    sb.append("\\\"");
                    break;
                case '\\':
                    sb.append("\\\\");
                    break;
                case '\b':
                    sb.append("\\b");
                    break;
                case '\f':
                    sb.append("\\f");
                    break;
                case '\n':
                    sb.append("\\n");
                    break;
                case '\r':
                    sb.append("\\r");
                    break;
                case '\t':
                    sb.append("\\t");
                    break;
                default:
                    if (c < 0x20) {
                        appendUnicodeEscape(sb, c);
                    } else if (Character.isHighSurrogate(c)) {
                        if (i + 1 < n && Character.isLowSurrogate(s.charAt(i + 1))) {
                            sb.append(c).append(s.charAt(i + 1));
                            i++;
                        } else {
                            appendUnicodeEscape(sb, c);
                        }
                    } else if (Character.isLowSurrogate(c)) {
                        appendUnicodeEscape(sb, c);
                    } else {
                        sb.append(c);
                    }
            }
        }
        sb.append('"');
    }

    static String quote(String s) {
        StringBuilder sb = new StringBuilder(s.length() + 2);
        appendString(sb, s);
        return sb.toString();
    }

    private static void appendUnicodeEscape(StringBuilder sb, char c) {
        sb.append("\\u")
            .append(HEX[(c >> 12) & 0xF])
            .append(HEX[(c >> 8) & 0xF])
            .append(HEX[(c >> 4) & 0xF])
            .append(HEX[c & 0xF]);
    }
}
