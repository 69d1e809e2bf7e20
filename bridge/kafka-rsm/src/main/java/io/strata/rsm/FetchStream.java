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

    /**
     * Opens the window of at most {@code maxBytes} bytes starting at {@code position}: strata's
     * cache files when {@code handoff} and strata grants it, else bytes over the socket.
     * {@code damagedFile} names a handed-off file whose bytes failed their check, or is null.
     */
    @FunctionalInterface
    interface Opener {
        Window open(long position, long maxBytes, boolean handoff, String damagedFile) throws RemoteStorageException;
    }

    /** One window's bytes: a response body, or a {@link Handoff}. */
    interface Window {
        /** Like {@link InputStream#read(byte[], int, int)}: -1 once the window's bytes are all read. */
        int read(byte[] b, int off, int len) throws IOException;

        /** Once read to its end: whether the requested range ended with this window. */
        boolean endsRange();

        void close();
    }

    /**
     * A handoff answer that cannot be used: its first read throws {@code why}, and the stream
     * reads the window's bytes over the socket instead.
     */
    static Window unusable(Handoff.Unusable why) {
        return new Window() {
            @Override
            public int read(byte[] b, int off, int len) throws IOException {
                throw why;
            }

            @Override
            public boolean endsRange() {
                return false;
            }

            @Override
            public void close() {
            }
        };
    }

    /** A window of bytes over the socket: any other count than asked for means the range ended. */
    static Window bytes(TierHttp.Body body, long asked) {
        return new Window() {
            @Override
            public int read(byte[] b, int off, int len) throws IOException {
                return body.read(b, off, len);
            }

            @Override
            public boolean endsRange() {
                return body.bytesRead() != asked;
            }

            @Override
            public void close() {
                body.close();
            }
        };
    }

    private final Opener opener;
    /** The segment's id, for logs. */
    private final String segment;
    private final long start;
    /** Inclusive end of the requested range, or -1 for "to the end of the segment". */
    private final long endInclusive;
    /** Segment position of the next byte this stream returns. */
    private long position;
    private Window window;
    /** Whether windows are asked for as handoffs (see {@link Handoff}). */
    private boolean handoff;
    private int handoffs;
    private boolean eof;
    private boolean closed;
    private int windows;
    private final long openedAt = System.nanoTime();
    private long firstWindowAt;

    FetchStream(Opener opener, String segment, long start, long endInclusive, boolean handoff) {
        this.opener = opener;
        this.handoff = handoff;
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

    /** Windows answered as handoffs so far (for tests and logs). */
    int handoffs() {
        return handoffs;
    }

    private void openWindow(long maxBytes) throws RemoteStorageException {
        openWindow(maxBytes, handoff, null);
    }

    private void openWindow(long maxBytes, boolean asHandoff, String damagedFile) throws RemoteStorageException {
        long ask = maxBytes;
        if (endInclusive >= 0) {
            ask = Math.min(ask, endInclusive - position + 1);
        }
        window = opener.open(position, ask, asHandoff, damagedFile);
        windows++;
        if (window instanceof Handoff) {
            handoffs++;
        }
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
        long next = Math.min(MAX_WINDOW, Math.max(MIN_WINDOW, len));
        while (true) {
            if (window != null) {
                int n;
                try {
                    n = window.read(b, off, len);
                } catch (Handoff.Unusable e) {
                    // Nothing of this read reached b's caller: the same bytes come over the socket.
                    window.close();
                    window = null;
                    if (e.damagedFile != null) {
                        LOG.warn("strata tier fetch of {}: {}; reading these bytes over the socket", segment, e.getMessage());
                    } else {
                        LOG.debug("strata tier fetch of {}: {}; reading these bytes over the socket", segment, e.getMessage());
                    }
                    handoff &= !e.permanent;
                    open(next, false, e.damagedFile);
                    continue;
                }
                if (n > 0) {
                    position += n;
                    return n;
                }
                // The window ended (a short body throws instead of ending).
                boolean ends = window.endsRange();
                window.close();
                window = null;
                if (ends) {
                    eof = true;
                }
            }
            if (eof || (endInclusive >= 0 && position > endInclusive)) {
                eof = true;
                return -1;
            }
            open(next, handoff, null);
        }
    }

    /** Opens the next window, failures as the {@link IOException} a reader expects. */
    private void open(long maxBytes, boolean asHandoff, String damagedFile) throws IOException {
        try {
            openWindow(maxBytes, asHandoff, damagedFile);
        } catch (RemoteStorageException e) {
            throw new IOException("strata tier fetch of the bytes from position " + position
                + " failed: " + e.getMessage(), e);
        }
    }

    @Override
    public void close() {
        if (closed) {
            return;
        }
        closed = true;
        Window w = window;
        window = null;
        if (w != null) {
            w.close();
        }
        if (LOG.isDebugEnabled()) {
            long now = System.nanoTime();
            LOG.debug("strata tier fetch of {} from {}: {} bytes in {} window(s), {} handed off; first window after {} us, closed after {} us",
                segment, start, position - start, windows, handoffs, (firstWindowAt - openedAt) / 1000, (now - openedAt) / 1000);
        }
    }
}
