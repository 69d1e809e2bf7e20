package io.strata.rsm;

import javax.crypto.spec.SecretKeySpec;
import javax.net.ssl.SSLSocket;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.io.OutputStream;
import java.net.SocketTimeoutException;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.SocketChannel;
import java.util.function.Predicate;

/**
 * One connection to strata tier (TCP, TLS over TCP, or a Unix socket): its channel, a read buffer,
 * and the session the hello gave it. One thread uses it at a time; the timer thread may close it.
 */
final class TierConnection {
    /** Read buffer per connection: response heads and the small reads Kafka makes (batch headers). */
    static final int BUFFER_BYTES = 64 * 1024;
    /**
     * Largest single read from a socket: the JDK reads through a per-thread direct buffer of the
     * read's size and keeps it, so a reader asking for 50 MiB at once must not set that size.
     */
    static final int MAX_READ = 1 << 20;

    final SocketChannel channel;
    /** {@code null} unless the endpoint is https. */
    private final SSLSocket ssl;
    private final InputStream sslIn;
    private final OutputStream sslOut;
    final boolean unix;
    /** Where it goes, for messages. */
    final String peer;
    private final byte[] buf = new byte[BUFFER_BYTES];
    private final ByteBuffer bufView = ByteBuffer.wrap(buf);
    /** The unread bytes of {@code buf} are {@code [pos, lim)}. */
    private int pos;
    private int lim;
    /** When it went back to the pool ({@link System#nanoTime()}). */
    long idleSince;
    /** The session key, set once the hello passed. */
    SecretKeySpec session;
    /** The seq of the last request sent. */
    long seq;
    /** Set when the last exchange failed before any response byte arrived on a reused connection. */
    boolean staleFailure;
    /** Writes go straight to the socket; callers write large pieces. */
    final OutputStream out = new OutputStream() {
        @Override
        public void write(int b) throws IOException {
            write(new byte[] {(byte) b}, 0, 1);
        }

        @Override
        public void write(byte[] b, int off, int len) throws IOException {
            rawWrite(b, off, len);
        }
    };

    TierConnection(SocketChannel channel, SSLSocket ssl, boolean unix, String peer) throws IOException {
        this.channel = channel;
        this.ssl = ssl;
        this.sslIn = ssl == null ? null : ssl.getInputStream();
        this.sslOut = ssl == null ? null : ssl.getOutputStream();
        this.unix = unix;
        this.peer = peer;
    }

    void close() {
        try {
            if (ssl != null) {
                ssl.close();
            }
        } catch (IOException ignored) {
            // the channel is closed below either way
        }
        try {
            channel.close();
        } catch (IOException ignored) {
            // nothing to do: the connection is dropped either way
        }
    }

    private int rawRead(byte[] b, int off, int len) throws IOException {
        int n = Math.min(len, MAX_READ);
        if (ssl != null) {
            return sslIn.read(b, off, n);
        }
        ByteBuffer dst = b == buf ? bufView.limit(off + n).position(off) : ByteBuffer.wrap(b, off, n);
        return channel.read(dst);
    }

    private void rawWrite(byte[] b, int off, int len) throws IOException {
        if (ssl != null) {
            sslOut.write(b, off, len);
            sslOut.flush();
            return;
        }
        ByteBuffer src = ByteBuffer.wrap(b, off, len);
        while (src.hasRemaining()) {
            channel.write(src);
        }
    }

    /**
     * Writes a request and reads the response ({@link Http1#readResponse}); a {@link Deadline}
     * covers all of it and closes the connection when it passes first.
     */
    Http1.Raw exchange(RequestWriter request, long timeoutMs, Predicate<Http1.Raw> leaveBody, int cap)
            throws IOException {
        staleFailure = false;
        boolean gotByte = false;
        Deadline deadline = Deadline.start(timeoutMs, this::close);
        try {
            request.write(out);
            // The first byte is awaited here: a failure before it may be a stale idle connection.
            if (fill() < 0) {
                throw new EOFException("strata tier closed the connection before answering");
            }
            gotByte = true;
            Http1.Raw r = Http1.readResponse(this, leaveBody, cap);
            if (!deadline.meet()) {
                throw new SocketTimeoutException("the response came as the timer fired");
            }
            return r;
        } catch (IOException e) {
            if (deadline.expired()) {
                HttpTimeoutException t = new HttpTimeoutException("no response within " + timeoutMs + " ms");
                t.initCause(e);
                throw t;
            }
            staleFailure = !gotByte && !(e instanceof InterruptedIOException)
                && !(e instanceof ClosedByInterruptException) && !(e instanceof SegmentUpload.SegmentFileException);
            throw e;
        } finally {
            deadline.cancel();
        }
    }

    void readFully(byte[] b, int off, int len) throws IOException {
        while (len > 0) {
            int n = read(b, off, len);
            if (n < 0) {
                throw new EOFException("strata tier closed the connection in the middle of a response body");
            }
            off += n;
            len -= n;
        }
    }

    /** Reads more into the buffer when it is empty; the number of buffered bytes, -1 at EOF. */
    int fill() throws IOException {
        if (pos < lim) {
            return lim - pos;
        }
        int n = rawRead(buf, 0, buf.length);
        if (n < 0) {
            return -1;
        }
        pos = 0;
        lim = n;
        return n;
    }

    /** One CRLF-terminated line of the head, without the line end (a bare LF is accepted). */
    String line() throws IOException {
        StringBuilder sb = new StringBuilder(64);
        while (true) {
            if (fill() < 0) {
                throw new EOFException("strata tier closed the connection in the middle of a response head");
            }
            while (pos < lim) {
                byte b = buf[pos++];
                if (b == '\n') {
                    int len = sb.length();
                    if (len > 0 && sb.charAt(len - 1) == '\r') {
                        sb.setLength(len - 1);
                    }
                    return sb.toString();
                }
                sb.append((char) (b & 0xff));
                if (sb.length() > Http1.HEAD_CAP) {
                    throw new IOException("strata tier sent a header line longer than " + Http1.HEAD_CAP + " bytes");
                }
            }
        }
    }

    /** Body bytes: buffered ones first, then straight from the socket for large reads. */
    int read(byte[] b, int off, int len) throws IOException {
        if (pos < lim) {
            int n = Math.min(len, lim - pos);
            System.arraycopy(buf, pos, b, off, n);
            pos += n;
            return n;
        }
        if (len >= buf.length / 2) {
            return rawRead(b, off, len);
        }
        if (fill() < 0) {
            return -1;
        }
        int n = Math.min(len, lim - pos);
        System.arraycopy(buf, pos, b, off, n);
        pos += n;
        return n;
    }

    @FunctionalInterface
    interface RequestWriter {
        void write(OutputStream out) throws IOException;
    }
}
