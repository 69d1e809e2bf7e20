package io.strata.rsm;

import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.io.InputStream;
import java.util.Objects;

/**
 * What {@code fetchLogSegment} returns: the requested bytes of a segment, asked of strata tier in
 * windows of at most {@code max_bytes} each, on kept-alive connections.
 *
 * <p>Why windows: the broker asks for a segment "from this position to the end", reads what one
 * consumer fetch needs (1 MiB by default), and closes the stream. A response for the whole rest
 * of the segment would have to be abandoned mid-way, and with it the connection (HTTP/1.1 has no
 * other way to stop a body), after strata tier had pushed megabytes nobody reads into the socket
 * buffers. A window the broker reads to its end, or nearly, leaves the connection reusable. The
 * first window is {@link #FIRST_WINDOW}; when the reader goes past a window, the next one is
 * opened transparently, sized by what the reader asks for in that read (the broker fills its
 * fetch buffer with one {@code read} call, so the next window is exactly the rest it needs).
 *
 * <p>A window answered with fewer bytes than asked for is the last one (the range ended). A later
 * window that fails surfaces as an {@link IOException} from {@code read} (with the
 * {@link RemoteStorageException} as its cause); a body cut short is an error too, never an end.
 */
final class FetchStream extends InputStream {
    private static final Logger LOG = LoggerFactory.getLogger(FetchStream.class);

    /** The first window: the default fetch size of Kafka's Java consumer and of librdkafka. */
    static final long FIRST_WINDOW = 1L << 20;
    /** Smallest later window (a reader crossing a window edge with a small read wants more). */
    static final long MIN_WINDOW = 256L << 10;
    /** Largest window asked for at once. */
    static final long MAX_WINDOW = 64L << 20;

    /** Opens the window of at most {@code maxBytes} bytes starting at {@code position}. */
    @FunctionalInterface
    interface Opener {
        TierHttp.Body open(long position, long maxBytes) throws RemoteStorageException;
    }

    private final Opener opener;
    /** The segment's id, for logs. */
    private final String segment;
    private final long start;
    /** Inclusive end of the requested range, or -1 for "to the end of the segment". */
    private final long endInclusive;
    /** Segment position of the next byte this stream returns. */
    private long position;
    private TierHttp.Body window;
    private long windowAsked;
    private boolean eof;
    private boolean closed;
    private int windows;
    private final long openedAt = System.nanoTime();
    private long firstWindowAt;

    FetchStream(Opener opener, String segment, long start, long endInclusive) {
        this.opener = opener;
        this.segment = segment;
        this.start = start;
        this.position = start;
        this.endInclusive = endInclusive;
    }

    /** Opens the first window; errors (not found, service down) surface here, before any read. */
    FetchStream open() throws RemoteStorageException {
        openWindow(FIRST_WINDOW);
        firstWindowAt = System.nanoTime();
        return this;
    }

    /** Windows opened so far (for tests and logs). */
    int windows() {
        return windows;
    }

    private void openWindow(long maxBytes) throws RemoteStorageException {
        long ask = maxBytes;
        if (endInclusive >= 0) {
            ask = Math.min(ask, endInclusive - position + 1);
        }
        windowAsked = ask;
        window = opener.open(position, ask);
        windows++;
    }

    @Override
    public int read() throws IOException {
        byte[] one = new byte[1];
        int n = read(one, 0, 1);
        return n < 0 ? -1 : one[0] & 0xff;
    }

    @Override
    public int read(byte[] b, int off, int len) throws IOException {
        Objects.checkFromIndexSize(off, len, b.length);
        if (closed) {
            throw new IOException("strata tier fetch stream is closed");
        }
        if (len == 0) {
            return 0;
        }
        while (true) {
            if (window != null) {
                int n = window.read(b, off, len);
                if (n > 0) {
                    position += n;
                    return n;
                }
                // The window's body ended (a short body throws instead of ending).
                boolean full = window.bytesRead() == windowAsked;
                window = null;
                if (!full) {
                    eof = true;
                }
            }
            if (eof || (endInclusive >= 0 && position > endInclusive)) {
                eof = true;
                return -1;
            }
            try {
                openWindow(Math.min(MAX_WINDOW, Math.max(MIN_WINDOW, len)));
            } catch (RemoteStorageException e) {
                throw new IOException("strata tier fetch of the bytes from position " + position
                    + " failed: " + e.getMessage(), e);
            }
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        TierHttp.Body w = window;
        window = null;
        if (w != null) {
            w.close();
        }
        if (LOG.isDebugEnabled()) {
            long now = System.nanoTime();
            LOG.debug("strata tier fetch of {} from {}: {} bytes in {} window(s); first window after {} us, closed after {} us",
                segment, start, position - start, windows, (firstWindowAt - openedAt) / 1000, (now - openedAt) / 1000);
        }
    }
}
