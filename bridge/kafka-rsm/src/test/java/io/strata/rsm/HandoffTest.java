package io.strata.rsm;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.io.RandomAccessFile;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.regex.Matcher;
import java.util.regex.Pattern;
import java.util.stream.Collectors;
import java.util.zip.CRC32C;

import static io.strata.rsm.StrataRemoteStorageManagerTest.segment;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * Fetches answered with cache files ({@link Handoff}): a fake strata that writes real chunk files
 * and answers with their names and block checksums, as strata tier does over its Unix socket.
 * Whatever happens to the files (evicted, damaged, before or during a read), the broker gets the
 * segment's exact bytes: from the files when they check, else over the socket.
 */
class HandoffTest extends FakeTierTest {
    static final int CHUNK = 300 * 1024;
    static final int BLOCK = 64 * 1024;
    static final int CHUNKS = 4;
    static final Pattern FIELDS = Pattern.compile(
        "\"start_position\":(\\d+),\"end_position\":null,\"max_bytes\":(\\d+)(,\"handoff\":true)?"
        + "(?:,\"handoff_max_bytes\":(\\d+))?(,\"damaged_file\":\"([^\"]+)\")?}$");

    Path dir;
    byte[] segmentBytes;
    final List<String> names = new ArrayList<>();
    /** How each window was answered: "handoff" or "bytes". */
    final List<String> answers = new ArrayList<>();
    final List<String> damagedReported = new ArrayList<>();
    /** Chunks the fake has "on disk" (answers hand off only a run of these). */
    final boolean[] onDisk = new boolean[CHUNKS];
    /** Answer as strata did before handoff_max_bytes: ignore it, and say nothing of it. */
    boolean oldStrata;

    @BeforeEach
    void chunkFiles() throws IOException {
        dir = tmp.resolve("cache").resolve("strata-chunks");
        Files.createDirectories(dir, PosixFilePermissions.asFileAttribute(PosixFilePermissions.fromString("rwx------")));
        Files.setPosixFilePermissions(dir.getParent(), PosixFilePermissions.fromString("rwx------"));
        segmentBytes = new byte[CHUNKS * CHUNK - 1000];
        new Random(7).nextBytes(segmentBytes);
        for (int c = 0; c < CHUNKS; c++) {
            String name = String.format("%016x-%d.chunk", 0xfeedL, c + 1);
            names.add(name);
            Files.write(dir.resolve(name), chunk(c));
            onDisk[c] = true;
        }
        tier.respond(req -> {
            Matcher m = FIELDS.matcher(req.bodyText());
            assertTrue(m.find(), req.bodyText());
            int from = Integer.parseInt(m.group(1));
            int max = Integer.parseInt(m.group(2));
            int ahead = m.group(4) == null || oldStrata ? max : Integer.parseInt(m.group(4));
            if (m.group(6) != null) {
                // As strata tier does: the damaged file is dropped, its chunk no longer on disk.
                damagedReported.add(m.group(6));
                onDisk[names.indexOf(m.group(6))] = false;
            }
            // A handoff covers up to handoff_max_bytes; bytes stay within max_bytes.
            int to = Math.min(segmentBytes.length, from + max);
            String json = m.group(3) == null ? null : handoffJson(from, Math.min(segmentBytes.length, from + ahead));
            if (json != null && !oldStrata) {
                json = json.replace("\"partial\":", "\"max_bytes\":" + ahead + ",\"partial\":");
            }
            if (json == null) {
                answers.add("bytes");
                return FakeTier.Reply.of(200, Arrays.copyOfRange(segmentBytes, from, to));
            }
            answers.add("handoff");
            return FakeTier.Reply.handoff(json);
        });
    }

    byte[] chunk(int c) {
        return Arrays.copyOfRange(segmentBytes, c * CHUNK, Math.min(segmentBytes.length, (c + 1) * CHUNK));
    }

    /** The handoff for bytes from..to: the run of chunks on disk from the first; null if none. */
    String handoffJson(int from, int to) {
        StringBuilder pieces = new StringBuilder();
        int pos = from;
        while (pos < to && onDisk[pos / CHUNK]) {
            int c = pos / CHUNK;
            int offset = pos - c * CHUNK;
            int len = Math.min(to, Math.min(segmentBytes.length, (c + 1) * CHUNK)) - pos;
            byte[] data = chunk(c);
            List<String> crcs = new ArrayList<>();
            for (int b = offset / BLOCK; b <= (offset + len - 1) / BLOCK; b++) {
                CRC32C crc = new CRC32C();
                crc.update(data, b * BLOCK, Math.min(BLOCK, data.length - b * BLOCK));
                crcs.add(Long.toString(crc.getValue()));
            }
            pieces.append(pieces.length() == 0 ? "" : ",")
                .append("{\"file\":\"").append(names.get(c)).append("\",\"size\":").append(data.length)
                .append(",\"offset\":").append(offset).append(",\"len\":").append(len)
                .append(",\"crc32c\":[").append(String.join(",", crcs)).append("]}");
            pos += len;
        }
        if (pos == from) {
            return null;
        }
        return "{\"dir\":\"" + dir + "\",\"block_size\":" + BLOCK + ",\"len\":" + (pos - from)
            + ",\"partial\":" + (pos < to) + ",\"pieces\":[" + pieces + "]}";
    }

    /** Reads the segment from {@code start} to its end in reads of {@code size}, running {@code after} after the first. */
    byte[] readAll(int start, int size, Runnable after) throws Exception {
        ByteArrayOutputStream got = new ByteArrayOutputStream();
        try (InputStream in = rsm.fetchLogSegment(segment("orders", segmentBytes.length), start)) {
            byte[] buf = new byte[size];
            int n;
            boolean first = true;
            while ((n = in.read(buf, 0, buf.length)) >= 0) {
                got.write(buf, 0, n);
                if (first) {
                    after.run();
                    first = false;
                }
            }
        }
        return got.toByteArray();
    }

    byte[] expected(int start) {
        return Arrays.copyOfRange(segmentBytes, start, segmentBytes.length);
    }

    void flipByte(int chunk, long at) {
        try (RandomAccessFile f = new RandomAccessFile(dir.resolve(names.get(chunk)).toFile(), "rw")) {
            f.seek(at);
            int b = f.read();
            f.seek(at);
            f.write(b ^ 0x40);
        } catch (IOException e) {
            throw new RuntimeException(e);
        }
    }

    @Test
    void handedOffFilesAreReadByteExactWithoutBytesOnTheSocket() throws Exception {
        for (int size : new int[] {17, 4096, 700 * 1024, 8 << 20}) {
            assertArrayEquals(expected(12345), readAll(12345, size, () -> { }), "reads of " + size);
        }
        // One answer covered the segment; the later reads took it from the bridge's memory.
        assertEquals(List.of("handoff"), answers);
        assertEquals(List.of(), damagedReported);
    }

    /** Reads {@code len} bytes from {@code start} in a stream of its own, as one broker fetch does. */
    byte[] fetchOnce(int start, int len) throws Exception {
        try (InputStream in = rsm.fetchLogSegment(segment("orders", segmentBytes.length), start)) {
            return in.readNBytes(len);
        }
    }

    @Test
    void fetchesInsideAnEarlierAnswerAskStrataNothing() throws Exception {
        ByteArrayOutputStream got = new ByteArrayOutputStream();
        int fetch = 100 * 1024;
        for (int pos = 0; pos < segmentBytes.length; pos += fetch) {
            got.write(fetchOnce(pos, Math.min(fetch, segmentBytes.length - pos)));
        }
        assertArrayEquals(expected(0), got.toByteArray());
        assertEquals(List.of("handoff"), answers, "one answer of 8 MiB ahead served every fetch");
        assertTrue(tier.requests.get(0).bodyText().contains("\"max_bytes\":1048576,\"handoff\":true,\"handoff_max_bytes\":8388608"),
            tier.requests.get(0).bodyText());
    }

    @Test
    void aStrataThatAnswersOnlyMaxBytesIsReadOnPastEachAnswer() throws Exception {
        // Strata before handoff_max_bytes answers at most max_bytes and does not say so: an
        // answer as long as max_bytes does not end the segment.
        oldStrata = true;
        ByteArrayOutputStream got = new ByteArrayOutputStream();
        int fetch = 100 * 1024;
        for (int pos = 0; pos < segmentBytes.length; pos += fetch) {
            got.write(fetchOnce(pos, Math.min(fetch, segmentBytes.length - pos)));
        }
        assertArrayEquals(expected(0), got.toByteArray());
        assertTrue(answers.size() > 1 && answers.stream().allMatch("handoff"::equals), answers.toString());
    }

    @Test
    void aKeptAnswerWhoseFileWasEvictedIsAskedForAgain() throws Exception {
        assertArrayEquals(Arrays.copyOfRange(segmentBytes, 0, 1000), fetchOnce(0, 1000));
        Files.delete(dir.resolve(names.get(2)));
        int inChunk2 = 2 * CHUNK + 50;
        assertArrayEquals(Arrays.copyOfRange(segmentBytes, inChunk2, inChunk2 + 1000), fetchOnce(inChunk2, 1000));
        assertEquals(List.of("handoff", "bytes"), answers, "the vanished file's bytes came over the socket");
        int inChunk3 = 3 * CHUNK + 50;
        assertArrayEquals(Arrays.copyOfRange(segmentBytes, inChunk3, inChunk3 + 1000), fetchOnce(inChunk3, 1000));
        assertEquals(List.of("handoff", "bytes", "handoff"), answers, "the kept answer was forgotten: strata asked again");
        assertEquals(List.of(), damagedReported);
    }

    @Test
    void aSliceOfAnAnswerKeepsTheChecksumsOfItsBlocksAndWhetherTheRangeGoesOn() throws Exception {
        Handoff whole = Handoff.parse(handoffJson(1000, 2 * CHUNK).getBytes(java.nio.charset.StandardCharsets.UTF_8),
            8L << 20, 8L << 20);
        assertTrue(whole.endsRange(), "asked for more than the 2 chunks the answer holds, and not partial");
        long skip = CHUNK - 1000 + 3 * BLOCK + 7;
        Handoff s = whole.slice(skip, 100_000);
        assertEquals(100_000, s.len);
        assertEquals(1, s.pieces.size());
        Handoff.Piece p = s.pieces.get(0);
        assertEquals(names.get(1), p.file);
        assertEquals(3 * BLOCK + 7, p.offset);
        assertEquals(2, p.crcs.length, "blocks 3 and 4 of chunk 1");
        assertEquals(whole.pieces.get(1).crcs[3], p.crcs[0]);
        byte[] buf = new byte[100_000];
        int n = 0;
        while (n < buf.length) {
            n += s.read(buf, n, buf.length - n);
        }
        s.close();
        assertArrayEquals(Arrays.copyOfRange(segmentBytes, 1000 + (int) skip, 1000 + (int) skip + 100_000), buf);
        // The answer's tail: shorter than wanted, and the range ended there as the answer said.
        Handoff tail = whole.slice(whole.len - 10, 1 << 20);
        assertEquals(10, tail.len);
        assertTrue(tail.endsRange());
        // A full answer's tail is partial: the range may go on after it.
        Handoff full = Handoff.parse(handoffJson(0, CHUNK).getBytes(java.nio.charset.StandardCharsets.UTF_8), CHUNK, CHUNK);
        assertTrue(!full.endsRange() && !full.slice(CHUNK - 10, 100).endsRange());
        assertEquals(null, whole.slice(whole.len, 1));
    }

    @Test
    void aChunkNotOnDiskComesOverTheSocketAndTheNextIsHandedOffAgain() throws Exception {
        onDisk[1] = false;
        assertArrayEquals(expected(0), readAll(0, 256 * 1024, () -> { }));
        assertTrue(answers.contains("bytes") && answers.get(0).equals("handoff")
            && answers.get(answers.size() - 1).equals("handoff"), answers.toString());
    }

    @Test
    void aFileEvictedBeforeItIsOpenedIsReadOverTheSocket() throws Exception {
        Files.delete(dir.resolve(names.get(0)));
        assertArrayEquals(expected(100), readAll(100, 64 * 1024, () -> { }));
        assertEquals("handoff", answers.get(0));
        assertEquals("bytes", answers.get(1), "the bytes of the vanished file came over the socket");
        assertEquals(List.of(), damagedReported, "a vanished file is not damaged");
    }

    @Test
    void aFileEvictedWhileItIsReadStillGivesItsBytes() throws Exception {
        // Unlinked after the first read opened it: the open file keeps its bytes.
        byte[] got = readAll(0, 1000, () -> {
            try {
                Files.delete(dir.resolve(names.get(0)));
            } catch (IOException e) {
                throw new RuntimeException(e);
            }
        });
        assertArrayEquals(expected(0), got);
        assertEquals(List.of(), damagedReported);
    }

    @Test
    void aFileDamagedBeforeTheReadIsNeverServedAndIsReported() throws Exception {
        flipByte(2, 5);
        assertArrayEquals(expected(0), readAll(0, 128 * 1024, () -> { }));
        assertEquals(List.of(names.get(2)), damagedReported, "strata is told which file to drop");
        assertTrue(answers.contains("bytes"), answers.toString());
    }

    @Test
    void filesDamagedDuringTheReadAreNeverServed() throws Exception {
        // After the first read: chunk 0 is open and its blocks verified and buffered (all of its
        // 300 KiB fit the buffer), chunk 1 is not opened yet. Both get a byte flipped.
        AtomicInteger flips = new AtomicInteger();
        byte[] got = readAll(0, 17, () -> {
            flipByte(0, CHUNK - 10);
            flipByte(1, 3 * BLOCK + 1);
            flips.incrementAndGet();
        });
        assertEquals(1, flips.get());
        assertArrayEquals(expected(0), got, "chunk 0 from its verified copy, chunk 1 over the socket");
        assertEquals(List.of(names.get(1)), damagedReported);
        // The next read of chunk 0's file finds its damage.
        assertArrayEquals(expected(0), readAll(0, 100_000, () -> { }));
        assertEquals(List.of(names.get(1), names.get(0)), damagedReported);
    }

    @Test
    void aCacheDirectoryOthersCanWriteIsNotUsed() throws Exception {
        Files.setPosixFilePermissions(dir, PosixFilePermissions.fromString("rwxrwx---"));
        assertArrayEquals(expected(0), readAll(0, 1 << 20, () -> { }));
        assertEquals("handoff", answers.get(0));
        assertTrue(answers.subList(1, answers.size()).stream().allMatch("bytes"::equals),
            "after the refusal, no more handoffs are asked for: " + answers);
    }

    /** From now on, every request for a handoff is answered with {@code json}; others with bytes. */
    void answerHandoffsWith(String json) {
        tier.respond(req -> {
            Matcher m = FIELDS.matcher(req.bodyText());
            assertTrue(m.find(), req.bodyText());
            int from = Integer.parseInt(m.group(1));
            int max = Integer.parseInt(m.group(2));
            if (m.group(3) != null) {
                answers.add("handoff");
                return FakeTier.Reply.handoff(json);
            }
            answers.add("bytes");
            return FakeTier.Reply.of(200, Arrays.copyOfRange(segmentBytes, from, Math.min(segmentBytes.length, from + max)));
        });
    }

    @Test
    void answersTheBridgeCannotUseAreReadOverTheSocket() throws Exception {
        String good = handoffJson(0, 1000);
        for (String bad : new String[] {
            good.replace(names.get(0), "../../etc/passwd"),
            good.replace(names.get(0), "0000000000000001-1.chunk/x"),
            good.replace("\"dir\":\"" + dir, "\"dir\":\"" + dir + "/../strata-chunks"),
            // What a strata tier whose tier.cache_dir was relative or had "." in it answered.
            good.replace("\"dir\":\"" + dir, "\"dir\":\"cache/strata-chunks"),
            good.replace("\"dir\":\"" + dir, "\"dir\":\"" + dir.getParent() + "/./strata-chunks"),
            good.replace("\"len\":1000,\"partial\"", "\"len\":999,\"partial\""),
            good.replace("\"size\":" + CHUNK, "\"size\":10"),
            good.replace("\"block_size\":" + BLOCK, "\"block_size\":1000"),
            good.replace("\"crc32c\":[", "\"crc32c\":[1,"),
            "not JSON",
            "[]",
        }) {
            answers.clear();
            answerHandoffsWith(bad);
            assertArrayEquals(Arrays.copyOfRange(segmentBytes, 0, 5000), fetchOnce(0, 5000), bad);
            assertArrayEquals(expected(777), readAll(777, 256 * 1024, () -> { }), bad);
            // Each stream tried a handoff once, then read every byte over the socket.
            assertEquals("handoff", answers.get(0), bad);
            assertEquals("bytes", answers.get(1), bad);
            assertEquals(2, answers.stream().filter("handoff"::equals).count(), bad + ": " + answers);
        }
        assertEquals(List.of(), damagedReported);
        // A usable answer is used again.
        answers.clear();
        answerHandoffsWith(good);
        assertArrayEquals(Arrays.copyOfRange(segmentBytes, 0, 1000), fetchOnce(0, 1000));
        assertEquals(List.of("handoff"), answers);
    }

    @Test
    void aChunkFileThatIsNotAFileIsReadOverTheSocket() throws Exception {
        Files.delete(dir.resolve(names.get(1)));
        Files.createDirectory(dir.resolve(names.get(1)));
        assertArrayEquals(expected(0), readAll(0, 256 * 1024, () -> { }));
        assertTrue(answers.contains("bytes"), answers.toString());
    }

    @Test
    void handoffsCanBeTurnedOff() throws Exception {
        rsm.configure(config(BridgeConfig.ENDPOINT, tier.endpoint(), BridgeConfig.FETCH_HANDOFF, "false"));
        assertArrayEquals(expected(5), readAll(5, 1 << 20, () -> { }));
        assertEquals(List.of("bytes"), answers.stream().distinct().collect(Collectors.toList()));
    }
}
