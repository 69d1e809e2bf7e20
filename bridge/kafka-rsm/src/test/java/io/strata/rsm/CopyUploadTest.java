package io.strata.rsm;

import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Random;

import static io.strata.rsm.StrataRemoteStorageManagerTest.SEGMENT_JSON;
import static io.strata.rsm.StrataRemoteStorageManagerTest.segment;
import static io.strata.rsm.StrataRemoteStorageManagerTest.segmentData;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** {@code strata.copy.mode=upload}: the body of {@code /v1/copy-upload}, byte for byte, streamed from disk. */
class CopyUploadTest extends FakeTierTest {
    static final ByteBuffer EPOCHS = ByteBuffer.wrap(new byte[] {8, 7, 6, 5});

    Path segDir;

    @BeforeEach
    void uploadMode() throws IOException {
        rsm.configure(config(BridgeConfig.ENDPOINT, tier.endpoint(), BridgeConfig.COPY_MODE, "upload"));
        segDir = Files.createDirectories(tmp.resolve("orders-3"));
    }

    /** Writes the segment's files with random bytes: name in the upload header to content. */
    Map<String, byte[]> writeFiles(LogSegmentData d, int logSize) throws IOException {
        Random rnd = new Random(5);
        Map<String, byte[]> files = new LinkedHashMap<>();
        files.put("offset_index", write(d.offsetIndex(), 800, rnd));
        files.put("time_index", write(d.timeIndex(), 1200, rnd));
        if (d.transactionIndex().isPresent()) {
            files.put("transaction_index", write(d.transactionIndex().get(), 52, rnd));
        }
        files.put("producer_snapshot", write(d.producerSnapshotIndex(), 77, rnd));
        files.put("log", write(d.logSegment(), logSize, rnd));
        return files;
    }

    static byte[] write(Path p, int size, Random rnd) throws IOException {
        byte[] b = new byte[size];
        rnd.nextBytes(b);
        Files.write(p, b);
        return b;
    }

    static long total(Map<String, byte[]> files) {
        return files.values().stream().mapToLong(b -> b.length).sum();
    }

    @Test
    void theBodyIsTheHeaderThenTheFilesInOrderThenTheTag() throws Exception {
        LogSegmentData d = segmentData(segDir, true, EPOCHS);
        Map<String, byte[]> files = writeFiles(d, 4096);

        assertEquals(Optional.empty(), rsm.copyLogSegmentData(segment(), d));

        FakeTier.Recorded r = tier.only();
        assertEquals("POST", r.method);
        assertEquals("/v1/copy-upload", r.path);
        assertEquals("application/vnd.strata.segment-upload", r.contentType);
        String header = "{\"segment\":" + SEGMENT_JSON + ",\"sizes\":{\"offset_index\":800,\"time_index\":1200,"
            + "\"transaction_index\":52,\"producer_snapshot\":77,\"log\":4096},\"leader_epoch_index\":\"CAcGBQ==\"}";
        assertEquals(header, r.bodyText(), "the JSON header, which the request mac covers");
        assertEquals(List.copyOf(files.keySet()), List.copyOf(r.upload.files.keySet()));
        for (Map.Entry<String, byte[]> e : files.entrySet()) {
            assertArrayEquals(e.getValue(), r.upload.files.get(e.getKey()), e.getKey());
        }
        assertEquals(4 + header.length() + total(files) + 32, r.upload.contentLength);
        // The fake checked the tag; a wrong one would be a violation (see FakeTierTest).
    }

    @Test
    void withoutATransactionIndexItsSizeIsNullAndItIsNotSent() throws Exception {
        LogSegmentData d = segmentData(segDir, false, ByteBuffer.allocate(0));
        Map<String, byte[]> files = writeFiles(d, 4096);

        rsm.copyLogSegmentData(segment(), d);

        FakeTier.Recorded r = tier.only();
        assertEquals("{\"segment\":" + SEGMENT_JSON + ",\"sizes\":{\"offset_index\":800,\"time_index\":1200,"
            + "\"transaction_index\":null,\"producer_snapshot\":77,\"log\":4096},\"leader_epoch_index\":\"\"}",
            r.bodyText());
        assertEquals(List.of("offset_index", "time_index", "producer_snapshot", "log"), List.copyOf(r.upload.files.keySet()));
        assertArrayEquals(files.get("log"), r.upload.files.get("log"));
    }

    @Test
    void theTagIsKeyedByTheRequestsSeqOnAReusedConnection() throws Exception {
        LogSegmentData d = segmentData(segDir, true, EPOCHS);
        writeFiles(d, 4096);

        rsm.deleteLogSegmentData(segment());
        rsm.copyLogSegmentData(segment(), d);
        rsm.copyLogSegmentData(segment(), d);

        assertEquals(List.of(1L, 2L, 3L), tier.requests.stream().map(r -> r.seq).collect(java.util.stream.Collectors.toList()));
        assertEquals(List.of("tcp"), tier.hellos);
    }

    @Test
    void aLogOfAnotherSizeThanTheMetadataDeclaresIsNotSent() throws Exception {
        LogSegmentData d = segmentData(segDir, false, EPOCHS);
        writeFiles(d, 4000);

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.copyLogSegmentData(segment(), d));
        assertEquals("strata tier copy failed before sending: " + d.logSegment() + " holds 4000 bytes but the"
            + " segment's metadata declares 4096 (segment_size_bytes)", e.getMessage());
        assertEquals(List.of(), tier.hellos, "nothing was sent");
    }

    @Test
    void anIndexLargerThanStrataAcceptsIsNotSent() throws Exception {
        LogSegmentData d = segmentData(segDir, false, EPOCHS);
        writeFiles(d, 4096);
        try (RandomAccessFile f = new RandomAccessFile(d.timeIndex().toFile(), "rw")) {
            f.setLength(StrataRemoteStorageManager.INDEX_CAP + 1L); // sparse: no 64 MiB written
        }

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.copyLogSegmentData(segment(), d));
        assertTrue(e.getMessage().startsWith("strata tier copy failed before sending: " + d.timeIndex() + " holds 67108865"
            + " bytes, more than the 67108864"), e.getMessage());
        assertEquals(List.of(), tier.hellos);
    }

    @Test
    void aMissingFileIsReportedBeforeSending() {
        LogSegmentData d = segmentData(segDir, false, EPOCHS);

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.copyLogSegmentData(segment(), d));
        assertTrue(e.getMessage().startsWith("strata tier copy failed before sending: cannot read the size of "
            + d.offsetIndex()), e.getMessage());
        assertEquals(List.of(), tier.hellos);
    }

    /**
     * The files are read while they are sent: a {@code .log} cut short once the fake has the
     * header, while the bridge is still writing (the log is far larger than any socket buffer),
     * fails the call. A bridge that had read the files before sending would copy successfully.
     */
    @Test
    void filesAreStreamedFromDiskAndOneFoundShorterFailsTheCall() throws Exception {
        int logSize = 64 << 20;
        LogSegmentData d = segmentData(segDir, false, EPOCHS);
        writeFiles(d, 16);
        try (RandomAccessFile f = new RandomAccessFile(d.logSegment().toFile(), "rw")) {
            f.setLength(logSize);
        }
        tier.onUploadHeader = () -> {
            try (FileChannel ch = FileChannel.open(d.logSegment(), StandardOpenOption.WRITE)) {
                ch.truncate(1 << 20);
            } catch (IOException e) {
                throw new AssertionError(e);
            }
        };

        RemoteStorageException e = assertThrows(RemoteStorageException.class,
            () -> rsm.copyLogSegmentData(segment("orders", logSize), d));
        assertTrue(e.getMessage().startsWith("strata tier copy failed: " + d.logSegment() + " ended after "),
            e.getMessage());
        assertTrue(e.getMessage().endsWith(" of its " + logSize + " bytes: it changed while it was being copied"),
            e.getMessage());
        assertInstanceOf(SegmentUpload.SegmentFileException.class, e.getCause());
        assertEquals(List.of(), tier.requests, "the fake kept nothing");
        String violation = tier.awaitViolation();
        assertTrue(violation.startsWith("the upload ended in log after "), violation);
    }
}
