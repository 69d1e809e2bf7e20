package io.strata.rsm;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.config.ConfigException;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentId;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.InetAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTimeoutPreemptively;
import static org.junit.jupiter.api.Assertions.assertTrue;

class StrataRemoteStorageManagerTest extends FakeTierTest {

    // Kafka Uuid.toString() is URL-safe base64 without padding: bytes 0x00..0x0f and 0x10..0x1f.
    static final String TOPIC_ID = "AAECAwQFBgcICQoLDA0ODw";
    static final String SEGMENT_ID = "EBESExQVFhcYGRobHB0eHw";

    static final String SEGMENT_JSON = "{\"topic\":\"orders\",\"topic_id\":\"" + TOPIC_ID + "\",\"partition\":3,"
        + "\"segment_id\":\"" + SEGMENT_ID + "\",\"start_offset\":100,\"end_offset\":199,"
        + "\"max_timestamp_ms\":1700000000123,\"event_timestamp_ms\":1700000000456,\"broker_id\":1,"
        + "\"segment_size_bytes\":4096,\"leader_epochs\":[[0,100],[2,150]]}";

    static RemoteLogSegmentMetadata segment(String topic) {
        return segment(topic, 4096);
    }

    /** The test segment with a {@code .log} of {@code sizeBytes}. */
    static RemoteLogSegmentMetadata segment(String topic, int sizeBytes) {
        TopicIdPartition tip = new TopicIdPartition(Uuid.fromString(TOPIC_ID), 3, topic);
        RemoteLogSegmentId id = new RemoteLogSegmentId(tip, Uuid.fromString(SEGMENT_ID));
        Map<Integer, Long> epochs = new HashMap<>();
        epochs.put(2, 150L);
        epochs.put(0, 100L);
        return new RemoteLogSegmentMetadata(id, 100L, 199L, 1_700_000_000_123L, 1, 1_700_000_000_456L, sizeBytes, epochs);
    }

    static RemoteLogSegmentMetadata segment() {
        return segment("orders");
    }

    static LogSegmentData segmentData(Path dir, boolean withTxn, ByteBuffer epochs) {
        return new LogSegmentData(
            dir.resolve("00000000000000000100.log"),
            dir.resolve("00000000000000000100.index"),
            dir.resolve("00000000000000000100.timeindex"),
            withTxn ? Optional.of(dir.resolve("00000000000000000100.txnindex")) : Optional.empty(),
            dir.resolve("00000000000000000200.snapshot"),
            epochs);
    }

    static void assertPost(FakeTier.Recorded r, String path) {
        assertEquals("POST", r.method);
        assertEquals(path, r.path);
        assertEquals("application/json", r.contentType);
    }

    // ------------------------------------------------------------------------------- copy

    @Test
    void copySendsExactJsonAndReturnsEmptyForNullCustomMetadata() throws Exception {
        ByteBuffer epochs = ByteBuffer.wrap(new byte[] {9, 8, 7, 6, 5});
        epochs.position(1); // only the remaining bytes 8,7,6,5 are sent
        LogSegmentData data = segmentData(Path.of("/var/lib/kafka/orders-3"), true, epochs);

        Optional<CustomMetadata> result = rsm.copyLogSegmentData(segment(), data);

        assertEquals(Optional.empty(), result);
        FakeTier.Recorded r = tier.only();
        assertPost(r, "/v1/copy");
        assertEquals("{\"segment\":" + SEGMENT_JSON + ",\"files\":{"
            + "\"log\":\"/var/lib/kafka/orders-3/00000000000000000100.log\","
            + "\"offset_index\":\"/var/lib/kafka/orders-3/00000000000000000100.index\","
            + "\"time_index\":\"/var/lib/kafka/orders-3/00000000000000000100.timeindex\","
            + "\"transaction_index\":\"/var/lib/kafka/orders-3/00000000000000000100.txnindex\","
            + "\"producer_snapshot\":\"/var/lib/kafka/orders-3/00000000000000000200.snapshot\"},"
            + "\"leader_epoch_index\":\"CAcGBQ==\"}", r.bodyText());
        // The broker's buffer is left as it was.
        assertEquals(1, epochs.position());
        assertEquals(5, epochs.limit());
    }

    @Test
    void copyWithoutTransactionIndexSendsNullAndRelativePathsBecomeAbsolute() throws Exception {
        LogSegmentData data = segmentData(Path.of("rel-dir"), false, ByteBuffer.allocate(0));

        rsm.copyLogSegmentData(segment(), data);

        String cwd = Path.of("").toAbsolutePath().toString();
        String dir = JsonWriter.quote(cwd + "/rel-dir/").replaceAll("\"$", "");
        assertEquals("{\"segment\":" + SEGMENT_JSON + ",\"files\":{"
            + "\"log\":" + dir + "00000000000000000100.log\","
            + "\"offset_index\":" + dir + "00000000000000000100.index\","
            + "\"time_index\":" + dir + "00000000000000000100.timeindex\","
            + "\"transaction_index\":null,"
            + "\"producer_snapshot\":" + dir + "00000000000000000200.snapshot\"},"
            + "\"leader_epoch_index\":\"\"}", tier.only().bodyText());
    }

    @Test
    void copyReturnsDecodedCustomMetadata() throws Exception {
        tier.respond(req -> FakeTier.Reply.of(200, " {\n  \"custom_metadata\" : \"AQID/w==\" }\n"));

        Optional<CustomMetadata> result =
            rsm.copyLogSegmentData(segment(), segmentData(Path.of("/d"), false, ByteBuffer.allocate(0)));

        assertTrue(result.isPresent());
        assertArrayEquals(new byte[] {1, 2, 3, (byte) 0xff}, result.get().value());
        assertEquals(Optional.of(new CustomMetadata(new byte[] {1, 2, 3, (byte) 0xff})), result);
    }

    @Test
    void copyRejectsMalformedResponse() {
        tier.respond(req -> FakeTier.Reply.of(200, "OK"));

        RemoteStorageException e = assertThrows(RemoteStorageException.class,
            () -> rsm.copyLogSegmentData(segment(), segmentData(Path.of("/d"), false, ByteBuffer.allocate(0))));
        assertTrue(e.getMessage().startsWith("strata tier copy returned a body that is not JSON"), e.getMessage());
    }

    @Test
    void copyHttp500CarriesBodyText() {
        tier.respond(req -> FakeTier.Reply.of(500, "upload to bucket failed: AccessDenied\n"));

        RemoteStorageException e = assertThrows(RemoteStorageException.class,
            () -> rsm.copyLogSegmentData(segment(), segmentData(Path.of("/d"), false, ByteBuffer.allocate(0))));
        assertEquals(RemoteStorageException.class, e.getClass());
        assertEquals("strata tier copy failed: HTTP 500: upload to bucket failed: AccessDenied", e.getMessage());
    }

    @Test
    void errorBodyIsCapped() {
        String huge = "x".repeat(20_000);
        tier.respond(req -> FakeTier.Reply.of(502, huge));

        RemoteStorageException e = assertThrows(RemoteStorageException.class,
            () -> rsm.fetchLogSegment(segment(), 0));
        assertEquals("strata tier fetch failed: HTTP 502: " + "x".repeat(StrataRemoteStorageManager.ERROR_BODY_CAP)
            + "... (truncated)", e.getMessage());
    }

    // ------------------------------------------------------------------------------ fetch

    @Test
    void fetchFromStartSendsNullEndAndStreamsBytesUnchanged() throws Exception {
        byte[] payload = new byte[3 * 1024 * 1024 + 17];
        new Random(42).nextBytes(payload);
        tier.respond(req -> FakeTier.Reply.streamed(200, payload.length, out -> {
            for (int off = 0; off < payload.length; off += 65536) {
                out.write(payload, off, Math.min(65536, payload.length - off));
                out.flush();
            }
        }));

        byte[] got;
        try (InputStream in = rsm.fetchLogSegment(segment(), 4242)) {
            got = in.readAllBytes();
        }

        assertArrayEquals(payload, got);
        FakeTier.Recorded r = tier.only();
        assertPost(r, "/v1/fetch");
        assertEquals("{\"segment\":" + SEGMENT_JSON + ",\"start_position\":4242,\"end_position\":null,\"max_bytes\":1048576,\"handoff\":true,\"handoff_max_bytes\":8388608}",
            r.bodyText());
    }

    @Test
    void fetchToTheEndIsAskedInWindowsEachStartingWhereTheLastEnded() throws Exception {
        // A fake that honours max_bytes, as strata tier does: each answer is one window.
        byte[] segmentBytes = new byte[5 * 1024 * 1024 + 123];
        new Random(11).nextBytes(segmentBytes);
        java.util.regex.Pattern field = java.util.regex.Pattern.compile(
            "\"start_position\":(\\d+),\"end_position\":null,\"max_bytes\":(\\d+),\"handoff\":true,\"handoff_max_bytes\":8388608}$");
        tier.respond(req -> {
            java.util.regex.Matcher m = field.matcher(req.bodyText());
            assertTrue(m.find(), req.bodyText());
            int from = Integer.parseInt(m.group(1));
            int max = Integer.parseInt(m.group(2));
            int to = Math.min(segmentBytes.length, from + max);
            return FakeTier.Reply.of(200, Arrays.copyOfRange(segmentBytes, from, to));
        });

        int start = 1000;
        ByteArrayOutputStream got = new ByteArrayOutputStream();
        try (InputStream in = rsm.fetchLogSegment(segment(), start)) {
            byte[] buf = new byte[700 * 1024];
            int n;
            while ((n = in.read(buf, 0, buf.length)) >= 0) {
                got.write(buf, 0, n);
            }
        }

        assertArrayEquals(Arrays.copyOfRange(segmentBytes, start, segmentBytes.length), got.toByteArray());
        long expectedFrom = start;
        for (FakeTier.Recorded r : tier.requests) {
            java.util.regex.Matcher m = field.matcher(r.bodyText());
            assertTrue(m.find(), r.bodyText());
            assertEquals(expectedFrom, Long.parseLong(m.group(1)), "each window starts where the last ended");
            expectedFrom = Math.min(segmentBytes.length, expectedFrom + Long.parseLong(m.group(2)));
        }
        assertTrue(tier.requests.size() > 1, "more than one window: " + tier.requests.size());
        assertEquals("1048576", field.matcher(tier.requests.get(0).bodyText()).results().findFirst()
            .map(x -> x.group(2)).orElse(""), "the first window is 1 MiB");
    }

    @Test
    void fetchRangeSendsInclusiveEnd() throws Exception {
        tier.respond(req -> FakeTier.Reply.of(200, new byte[] {0, 1, 2, (byte) 0xff}));

        byte[] got;
        try (InputStream in = rsm.fetchLogSegment(segment(), 10, 13)) {
            got = in.readAllBytes();
        }

        assertArrayEquals(new byte[] {0, 1, 2, (byte) 0xff}, got);
        FakeTier.Recorded r = tier.only();
        assertPost(r, "/v1/fetch");
        assertEquals("{\"segment\":" + SEGMENT_JSON + ",\"start_position\":10,\"end_position\":13,\"max_bytes\":4,\"handoff\":true}",
            r.bodyText());
    }

    @Test
    void fetchReturnsStreamBeforeBodyIsComplete() {
        CountDownLatch releaseRest = new CountDownLatch(1);
        byte[] head = new byte[64 * 1024];
        byte[] tail = new byte[32 * 1024];
        new Random(7).nextBytes(head);
        new Random(8).nextBytes(tail);
        tier.respond(req -> FakeTier.Reply.streamed(200, head.length + tail.length, out -> {
            out.write(head);
            out.flush();
            // The rest comes only once the client has consumed the head through the stream.
            if (!releaseRest.await(30, TimeUnit.SECONDS)) {
                return;
            }
            out.write(tail);
        }));

        assertTimeoutPreemptively(Duration.ofSeconds(10), () -> {
            try (InputStream in = rsm.fetchLogSegment(segment(), 0)) {
                assertArrayEquals(head, in.readNBytes(head.length));
                releaseRest.countDown();
                assertArrayEquals(tail, in.readAllBytes());
            }
        });
    }

    @Test
    void fetchTimeoutCoversHeadersOnlyNotASlowBody() throws Exception {
        rsm.configure(config(BridgeConfig.ENDPOINT, tier.endpoint(), BridgeConfig.FETCH_TIMEOUT_MS, "400"));
        tier.respond(req -> FakeTier.Reply.streamed(200, 3, out -> {
            out.write(new byte[] {1, 2});
            out.flush();
            Thread.sleep(1200);
            out.write(new byte[] {3});
        }));

        try (InputStream in = rsm.fetchLogSegment(segment(), 0)) {
            assertArrayEquals(new byte[] {1, 2, 3}, in.readAllBytes());
        }
    }

    @Test
    void fetchTimeoutOnHeaders() {
        rsm.configure(config(BridgeConfig.ENDPOINT, tier.endpoint(), BridgeConfig.FETCH_TIMEOUT_MS, "300"));
        tier.respond(req -> {
            Thread.sleep(3000);
            return FakeTier.Reply.of(200, "late");
        });

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.fetchLogSegment(segment(), 0));
        assertInstanceOf(HttpTimeoutException.class, e.getCause());
        assertEquals("strata tier fetch at " + tier.endpoint() + " failed: no response within 300 ms"
            + " (is `strata tier` running on this host?)", e.getMessage());
    }

    @Test
    void fetch404IsRemoteResourceNotFound() {
        tier.respond(req -> FakeTier.Reply.of(404, "segment EBESExQVFhcYGRobHB0eHw not found"));

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.fetchLogSegment(segment(), 0, 99));
        assertEquals(RemoteResourceNotFoundException.class, e.getClass());
        assertEquals("segment EBESExQVFhcYGRobHB0eHw not found", e.getMessage());
    }

    @Test
    void fetch500IsRemoteStorageExceptionWithBody() {
        tier.respond(req -> FakeTier.Reply.of(500, "boom"));

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.fetchLogSegment(segment(), 0));
        assertEquals(RemoteStorageException.class, e.getClass());
        assertEquals("strata tier fetch failed: HTTP 500: boom", e.getMessage());
    }

    @Test
    void fetchRejectsBadPositionsWithoutCallingTheService() {
        assertThrows(IllegalArgumentException.class, () -> rsm.fetchLogSegment(segment(), -1));
        assertThrows(IllegalArgumentException.class, () -> rsm.fetchLogSegment(segment(), -1, 5));
        assertThrows(IllegalArgumentException.class, () -> rsm.fetchLogSegment(segment(), 10, 9));
        assertEquals(List.of(), tier.requests);
    }

    // ------------------------------------------------------------------------ fetch-index

    @ParameterizedTest
    @EnumSource(IndexType.class)
    void fetchIndexSendsEnumNameAndStreamsBytes(IndexType type) throws Exception {
        byte[] bytes = ("index-bytes-" + type).getBytes(StandardCharsets.UTF_8);
        tier.respond(req -> FakeTier.Reply.of(200, bytes));

        byte[] got;
        try (InputStream in = rsm.fetchIndex(segment(), type)) {
            got = in.readAllBytes();
        }

        assertArrayEquals(bytes, got);
        FakeTier.Recorded r = tier.only();
        assertPost(r, "/v1/fetch-index");
        assertEquals("{\"segment\":" + SEGMENT_JSON + ",\"index\":\"" + type.name() + "\"}", r.bodyText());
    }

    @Test
    void missingTransactionIndexIsRemoteResourceNotFound() {
        tier.respond(req -> FakeTier.Reply.of(404, "no transaction index"));

        RemoteStorageException e = assertThrows(RemoteStorageException.class,
            () -> rsm.fetchIndex(segment(), IndexType.TRANSACTION));
        assertEquals(RemoteResourceNotFoundException.class, e.getClass());
        assertEquals("no transaction index", e.getMessage());
    }

    @Test
    void notFoundWithEmptyBodyGetsAMessage() {
        tier.respond(req -> FakeTier.Reply.of(404, ""));

        RemoteStorageException e = assertThrows(RemoteStorageException.class,
            () -> rsm.fetchIndex(segment(), IndexType.TRANSACTION));
        assertEquals(RemoteResourceNotFoundException.class, e.getClass());
        assertEquals("strata tier fetch-index: not found (HTTP 404)", e.getMessage());
    }

    // ----------------------------------------------------------------------------- delete

    @Test
    void deleteSendsExactJsonAndAccepts204() throws Exception {
        tier.respond(req -> FakeTier.Reply.of(204, ""));

        rsm.deleteLogSegmentData(segment());

        FakeTier.Recorded r = tier.only();
        assertPost(r, "/v1/delete");
        assertEquals("{\"segment\":" + SEGMENT_JSON + "}", r.bodyText());
    }

    @Test
    void deleteAccepts200WithBody() throws Exception {
        tier.respond(req -> FakeTier.Reply.of(200, "{\"deleted\":true}"));

        rsm.deleteLogSegmentData(segment());

        assertEquals(1, tier.requests.size());
    }

    @Test
    void delete404IsAnErrorButNeverRemoteResourceNotFound() {
        tier.respond(req -> FakeTier.Reply.of(404, "no such route"));

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.deleteLogSegmentData(segment()));
        assertEquals(RemoteStorageException.class, e.getClass());
        assertEquals("strata tier delete failed: HTTP 404: no such route", e.getMessage());
    }

    @Test
    void delete500CarriesBody() {
        tier.respond(req -> FakeTier.Reply.of(500, "bucket unreachable"));

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.deleteLogSegmentData(segment()));
        assertEquals(RemoteStorageException.class, e.getClass());
        assertEquals("strata tier delete failed: HTTP 500: bucket unreachable", e.getMessage());
    }

    // -------------------------------------------------------------- transport & lifecycle

    static int closedPort() throws IOException {
        try (ServerSocket s = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            return s.getLocalPort();
        }
    }

    @Test
    void connectionRefusedNamesEndpointAndHint() throws Exception {
        String endpoint = "http://127.0.0.1:" + closedPort();
        StrataRemoteStorageManager down = new StrataRemoteStorageManager();
        down.configure(config(BridgeConfig.ENDPOINT, endpoint)); // must not contact the service
        try {
            RemoteStorageException e = assertThrows(RemoteStorageException.class,
                () -> down.copyLogSegmentData(segment(), segmentData(Path.of("/d"), false, ByteBuffer.allocate(0))));
            assertEquals(RemoteStorageException.class, e.getClass());
            assertTrue(e.getMessage().startsWith("strata tier copy at " + endpoint + " failed: could not connect ("),
                e.getMessage());
            assertTrue(e.getMessage().endsWith("(is `strata tier` running on this host?)"), e.getMessage());
            assertInstanceOf(ConnectException.class, e.getCause());

            RemoteStorageException f = assertThrows(RemoteStorageException.class, () -> down.fetchLogSegment(segment(), 0));
            assertTrue(f.getMessage().startsWith("strata tier fetch at " + endpoint + " failed: "), f.getMessage());
            assertTrue(f.getMessage().contains("is `strata tier` running on this host?"), f.getMessage());
            assertFalse(down.healthy());
        } finally {
            down.close();
        }
    }

    @Test
    void connectTimeoutNamesEndpointAndHint() throws Exception {
        // A listener that never accepts, with its accept queue filled, leaves new SYNs unanswered.
        try (ServerSocket stuck = new ServerSocket(0, 1, InetAddress.getLoopbackAddress())) {
            List<Socket> fillers = new ArrayList<>();
            try {
                for (int i = 0; i < 4; i++) {
                    Socket s = new Socket();
                    try {
                        s.connect(stuck.getLocalSocketAddress(), 200);
                        fillers.add(s);
                    } catch (IOException full) {
                        s.close();
                        break;
                    }
                }
                String endpoint = "http://127.0.0.1:" + stuck.getLocalPort();
                StrataRemoteStorageManager slow = new StrataRemoteStorageManager();
                slow.configure(config(BridgeConfig.ENDPOINT, endpoint, BridgeConfig.CONNECT_TIMEOUT_MS, "250"));
                try {
                    RemoteStorageException e = assertThrows(RemoteStorageException.class,
                        () -> slow.deleteLogSegmentData(segment()));
                    assertEquals("strata tier delete at " + endpoint + " failed: could not connect within 250 ms"
                        + " (is `strata tier` running on this host?)", e.getMessage());
                    assertInstanceOf(HttpConnectTimeoutException.class, e.getCause());
                } finally {
                    slow.close();
                }
            } finally {
                for (Socket s : fillers) {
                    s.close();
                }
            }
        }
    }

    @Test
    void configureDoesNotContactTheService() throws Exception {
        StrataRemoteStorageManager other = new StrataRemoteStorageManager();
        other.configure(config(BridgeConfig.ENDPOINT, tier.endpoint(), "broker.id", 7));
        Thread.sleep(200);
        other.close();
        assertEquals(List.of(), tier.hellos);
        assertEquals(List.of(), tier.requests);
    }

    @Test
    void interruptedCallRestoresFlag() {
        tier.respond(req -> {
            Thread.sleep(5000);
            return FakeTier.Reply.of(200, "late");
        });
        Thread.currentThread().interrupt();
        try {
            RemoteStorageException e = assertThrows(RemoteStorageException.class,
                () -> rsm.fetchIndex(segment(), IndexType.OFFSET));
            assertInstanceOf(InterruptedException.class, e.getCause());
            assertTrue(e.getMessage().startsWith("interrupted while waiting for strata tier fetch-index at "), e.getMessage());
            assertTrue(Thread.currentThread().isInterrupted());
        } finally {
            Thread.interrupted(); // clear for the next test
        }
    }

    @Test
    void healthUsesGet() throws Exception {
        tier.respond(req -> FakeTier.Reply.of(200, "ok"));

        assertTrue(rsm.healthy());

        FakeTier.Recorded r = tier.only();
        assertEquals("GET", r.method);
        assertEquals("/v1/health", r.path);
        assertNull(r.contentType);
    }

    @Test
    void endpointPathPrefixIsKept() throws Exception {
        rsm.configure(config(BridgeConfig.ENDPOINT, tier.endpoint() + "/strata/"));
        tier.respond(req -> FakeTier.Reply.of(204, ""));

        rsm.deleteLogSegmentData(segment());

        assertEquals("/strata/v1/delete", tier.only().path);
    }

    @Test
    void callsBeforeConfigureOrAfterCloseFail() {
        StrataRemoteStorageManager fresh = new StrataRemoteStorageManager();
        assertThrows(IllegalStateException.class, () -> fresh.fetchLogSegment(segment(), 0));
        fresh.configure(config(BridgeConfig.ENDPOINT, tier.endpoint()));
        fresh.close();
        fresh.close(); // idempotent
        assertThrows(IllegalStateException.class, () -> fresh.deleteLogSegmentData(segment()));
        assertEquals(List.of(), tier.hellos);
        assertEquals(List.of(), tier.requests);
    }

    @Test
    void configureRejectsBadValuesNamingTheKey() {
        StrataRemoteStorageManager fresh = new StrataRemoteStorageManager();
        ConfigException e = assertThrows(ConfigException.class,
            () -> fresh.configure(config(BridgeConfig.COPY_TIMEOUT_MS, "five minutes")));
        assertTrue(e.getMessage().contains("strata.copy.timeout.ms"), e.getMessage());
        ConfigException f = assertThrows(ConfigException.class,
            () -> fresh.configure(config(BridgeConfig.ENDPOINT, "127.0.0.1:9190")));
        assertTrue(f.getMessage().contains("strata.endpoint"), f.getMessage());
    }

    // ---------------------------------------------------------------------- JSON escaping

    @Test
    void oddTopicNamesAndPathsAreEscaped() throws Exception {
        String topic = "we\"ird\\topic\n\t\u0001\u007fé😀/ü";
        Path dir = Path.of("/data/kafka dir/\"quoted\"\\back\\slash\u0007/ünï");
        rsm.copyLogSegmentData(segment(topic), segmentData(dir, false, ByteBuffer.wrap(new byte[] {1})));

        FakeTier.Recorded r = tier.only();
        String expectedTopic = "\"topic\":\"we\\\"ird\\\\topic\\n\\t\\u0001\u007fé😀/ü\"";
        String expectedLog = "\"log\":\"/data/kafka dir/\\\"quoted\\\"\\\\back\\\\slash\\u0007/ünï/00000000000000000100.log\"";
        String body = r.bodyText();
        assertTrue(body.startsWith("{\"segment\":{" + expectedTopic + ",\"topic_id\":"), body);
        assertTrue(body.contains(",\"files\":{" + expectedLog + ","), body);
        // Sent as UTF-8, byte for byte.
        assertArrayEquals(body.getBytes(StandardCharsets.UTF_8), r.body);
        assertTrue(new String(r.body, StandardCharsets.ISO_8859_1).contains("\u00c3\u00a9"), "é must be UTF-8 encoded");

        // And it round-trips through a JSON parser to the original strings.
        @SuppressWarnings("unchecked")
        Map<String, Object> parsed = (Map<String, Object>) JsonReader.parse(body);
        @SuppressWarnings("unchecked")
        Map<String, Object> seg = (Map<String, Object>) parsed.get("segment");
        @SuppressWarnings("unchecked")
        Map<String, Object> files = (Map<String, Object>) parsed.get("files");
        assertEquals(topic, seg.get("topic"));
        assertEquals(dir.resolve("00000000000000000100.log").toString(), files.get("log"));
        assertSame(null, files.get("transaction_index"));
        assertTrue(files.containsKey("transaction_index"));
        assertEquals("AQ==", parsed.get("leader_epoch_index"));
    }
}
