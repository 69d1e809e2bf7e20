package io.strata.rsm;

import java.util.LinkedHashMap;
import java.util.Map;

/**
 * The latest handoff answer of each recently read segment. The broker reads a segment in one
 * fetch after another (1 MiB each by default), each a new stream from where the last stopped;
 * strata is asked for {@link #AHEAD} bytes of files at once and the fetches inside that answer
 * are handed off without asking again (a request costs about as much as reading its megabyte).
 *
 * <p>Safe to keep: the answer came signed, strata never reuses a cache file's name nor rewrites
 * a file, and every block is still checked against its CRC-32C as it is read. A file evicted
 * since fails to open and the bytes come over the socket; the segment's answer is then
 * forgotten (see the opener in {@link StrataRemoteStorageManager}).
 */
final class HandoffCache {
    /** Bytes of cache files asked for per handoff request. */
    static final long AHEAD = 8L << 20;
    /** Segments whose answers are kept (about 2 KiB each). */
    static final int MAX_SEGMENTS = 256;

    private static final class Known {
        final long start;
        final Handoff answer;

        Known(long start, Handoff answer) {
            this.start = start;
            this.answer = answer;
        }
    }

    private final Map<String, Known> bySegment = new LinkedHashMap<>(16, 0.75f, true) {
        private static final long serialVersionUID = 1L;

        @Override
        protected boolean removeEldestEntry(Map.Entry<String, Known> eldest) {
            return size() > MAX_SEGMENTS;
        }
    };

    /** The window of {@code want} bytes at {@code position} from the segment's kept answer, or null. */
    synchronized Handoff window(String segment, long position, long want) {
        Known k = bySegment.get(segment);
        if (k == null || position < k.start) {
            return null;
        }
        return k.answer.slice(position - k.start, want);
    }

    /** Keeps {@code answer}, a handoff of the segment's bytes from {@code start} (never read itself). */
    synchronized void put(String segment, long start, Handoff answer) {
        bySegment.put(segment, new Known(start, answer));
    }

    synchronized void forget(String segment) {
        bySegment.remove(segment);
    }
}
