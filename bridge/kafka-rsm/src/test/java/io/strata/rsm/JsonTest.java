package io.strata.rsm;

import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

import java.math.BigDecimal;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class JsonTest {

    @Test
    void writerProducesCompactNestedJson() {
        String json = new JsonWriter().beginObject()
            .name("a").value(1)
            .name("b").beginArray().beginArray().value(0).value(-5).endArray().beginArray().endArray().endArray()
            .name("c").beginObject().endObject()
            .name("d").value((String) null)
            .name("e").nullValue()
            .name("f").value(Long.MIN_VALUE)
            .name("g").value("x")
            .endObject().toString();
        assertEquals("{\"a\":1,\"b\":[[0,-5],[]],\"c\":{},\"d\":null,\"e\":null,\"f\":-9223372036854775808,\"g\":\"x\"}", json);
    }

    @Test
    void everyControlCharacterIsEscaped() {
        StringBuilder in = new StringBuilder();
        for (char c = 0; c < 0x20; c++) {
            in.append(c);
        }
        assertEquals("\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007"
                + "\\b\\t\\n\\u000b\\f\\r\\u000e\\u000f"
                + "\\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017"
                + "\\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\"",
            JsonWriter.quote(in.toString()));
    }

    @Test
    void quotesBackslashesAndNonAscii() {
        assertEquals("\"a\\\"b\\\\c/d\u007f é ☃ 😀\"", JsonWriter.quote("a\"b\\c/d\u007f é ☃ 😀"));
        assertEquals("\"\"", JsonWriter.quote(""));
    }

    @Test
    void loneSurrogatesAreEscapedNotReplaced() {
        assertEquals("\"x\\ud800y\\udc00z\"", JsonWriter.quote("x\ud800y\udc00z"));
        assertEquals("\"\\ud83d\"", JsonWriter.quote("\ud83d"));
    }

    @Test
    void writerOutputRoundTripsThroughReader() {
        StringBuilder all = new StringBuilder();
        for (char c = 0; c < 0x300; c++) {
            all.append(c);
        }
        all.append("😀\ud800");
        assertEquals(all.toString(), JsonReader.parse(JsonWriter.quote(all.toString())));
    }

    @Test
    void readerParsesAllValueKinds() {
        Object v = JsonReader.parse(" {\"s\":\"a\\u00e9\\ud83d\\ude00\\/\\n\",\"n\":-12.5e1,\"z\":0,\"t\":true,\"f\":false,"
            + "\"nul\":null,\"arr\":[1,[],{}],\"o\":{\"k\":\"v\"}} ");
        Map<String, Object> expected = new LinkedHashMap<>();
        expected.put("s", "aé😀/\n");
        expected.put("n", new BigDecimal("-12.5e1"));
        expected.put("z", new BigDecimal("0"));
        expected.put("t", true);
        expected.put("f", false);
        expected.put("nul", null);
        expected.put("arr", Arrays.asList(new BigDecimal("1"), List.of(), Map.of()));
        expected.put("o", Map.of("k", "v"));
        assertEquals(expected, v);
    }

    @ParameterizedTest
    @ValueSource(strings = {"", " ", "{", "{\"a\"}", "{\"a\":}", "{\"a\":1,}", "[1,]", "[1 2]", "\"abc",
        "\"a\\x\"", "\"a\u0001\"", "01", "-", "1.", "1e", "tru", "nul", "{} {}", "{'a':1}", "\"\\u12\"",
        "{\"a\":1]"})
    void readerRejectsInvalidJson(String text) {
        assertThrows(IllegalArgumentException.class, () -> JsonReader.parse(text));
    }

    @Test
    void readerLimitsNesting() {
        String deep = "[".repeat(100) + "]".repeat(100);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> JsonReader.parse(deep));
        assertTrue(e.getMessage().contains("nesting"), e.getMessage());
        assertEquals(List.of(), JsonReader.parse("[]"));
    }

    // -------------------------------------------------------------- copy response parsing

    @Test
    void copyResponseNullMissingOrBlankIsEmpty() throws Exception {
        assertEquals(Optional.empty(), StrataRemoteStorageManager.parseCopyResponse("{\"custom_metadata\":null}"));
        assertEquals(Optional.empty(), StrataRemoteStorageManager.parseCopyResponse("{}"));
        assertEquals(Optional.empty(), StrataRemoteStorageManager.parseCopyResponse(" \n"));
        assertEquals(Optional.empty(),
            StrataRemoteStorageManager.parseCopyResponse("{\"other\":[1,2],\"custom_metadata\":null}"));
    }

    @Test
    void copyResponseBase64IsDecoded() throws Exception {
        Optional<CustomMetadata> cm = StrataRemoteStorageManager.parseCopyResponse("{\"custom_metadata\":\"\"}");
        assertArrayEquals(new byte[0], cm.orElseThrow().value());
        cm = StrataRemoteStorageManager.parseCopyResponse("{\"custom_metadata\":\"c3RyYXRh\"}");
        assertArrayEquals("strata".getBytes(), cm.orElseThrow().value());
    }

    @ParameterizedTest
    @ValueSource(strings = {"[]", "\"x\"", "{\"custom_metadata\":5}", "{\"custom_metadata\":\"!!!\"}",
        "{\"custom_metadata\":\"c3RyYXRh\"", "null"})
    void copyResponseRejectsNonsense(String text) {
        RemoteStorageException e = assertThrows(RemoteStorageException.class,
            () -> StrataRemoteStorageManager.parseCopyResponse(text));
        assertTrue(e.getMessage().startsWith("strata tier copy returned "), e.getMessage());
    }
}
