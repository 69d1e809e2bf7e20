package io.strata.rsm;

import javax.crypto.spec.SecretKeySpec;
import javax.net.ssl.SSLSocket;

import java.io.ByteArrayOutputStream;
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
import java.util.Locale;
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
    /** Largest response head accepted. */
    static final int HEAD_CAP = 64 * 1024;

    final SocketChannel channel;
    /** {@code null} unless the endpoint is https. */
    final SSLSocket ssl;
    final InputStream sslIn;
    final OutputStream sslOut;
    final boolean unix;
    /** Where it goes, for messages. */
    final String peer;
    final byte[] buf = new byte[BUFFER_BYTES];
    final ByteBuffer bufView = ByteBuffer.wrap(buf);
    int pos;
    int lim;
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
     * Writes a request and reads the response head, then its whole body (at most {@code cap}
     * bytes) unless {@code leaveBody} says it stays in the socket. The timer covers all of it.
     */
    Raw exchange(RequestWriter request, long timeoutMs, Predicate<Raw> leaveBody, int cap) throws IOException {
        staleFailure = false;
        boolean gotByte = false;
        Deadline deadline = Deadline.start(timeoutMs, this::close);
        try {
            request.write(out);
            int status;
            while (true) {
                if (fill() < 0) {
                    throw new EOFException("strata tier closed the connection before answering");
                }
                gotByte = true;
                status = parseStatus(line());
                if (status >= 200 || status < 100) {
                    break;
                }
                while (!line().isEmpty()) {
                    // skip the headers of a 1xx interim response
                }
            }
            Raw r = new Raw(status);
            readHeaders(r);
            if (status == 204 || status == 304) {
                r.length = 0;
                r.chunked = false;
            }
            if (!leaveBody.test(r)) {
                r.body = readWhole(r, cap);
            }
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

    private void readHeaders(Raw r) throws IOException {
        int headBytes = 0;
        while (true) {
            String h = line();
            headBytes += h.length() + 2;
            if (headBytes > HEAD_CAP) {
                throw new IOException("strata tier sent a response head larger than " + HEAD_CAP + " bytes");
            }
            if (h.isEmpty()) {
                break;
            }
            int colon = h.indexOf(':');
            if (colon <= 0) {
                throw new IOException("strata tier sent a malformed header line: " + abbreviate(h));
            }
            String name = h.substring(0, colon).trim().toLowerCase(Locale.ROOT);
            String value = h.substring(colon + 1).trim();
            switch (name) {
                case "content-length":
                    long n;
                    try {
                        n = Long.parseLong(value);
                    } catch (NumberFormatException e) {
                        n = -1;
                    }
                    if (n < 0 || (r.length >= 0 && n != r.length)) {
                        throw new IOException("strata tier sent an invalid Content-Length: " + abbreviate(value));
                    }
                    r.length = n;
                    break;
                case "transfer-encoding":
                    r.chunked = value.toLowerCase(Locale.ROOT).endsWith("chunked");
                    break;
                case "connection":
                    r.keepAlive &= !value.toLowerCase(Locale.ROOT).contains("close");
                    break;
                case "strata-auth":
                    r.authRepeated |= r.auth != null;
                    r.auth = value;
                    break;
                case "content-type":
                    int semi = value.indexOf(';');
                    r.contentType = (semi < 0 ? value : value.substring(0, semi)).trim().toLowerCase(Locale.ROOT);
                    break;
                default:
                    break;
            }
        }
        if (r.chunked && r.length >= 0) {
            // Either framing could be the one a signature was made for: refuse to guess.
            throw new IOException("strata tier sent both Content-Length and Transfer-Encoding");
        }
    }

    /** The whole body of {@code r}: by its length, its chunks, or until the connection closes. */
    private byte[] readWhole(Raw r, int cap) throws IOException {
        if (r.length >= 0) {
            if (r.length > cap) {
                throw new IOException("strata tier sent a response body of " + r.length
                    + " bytes, more than the " + cap + " accepted here");
            }
            byte[] b = new byte[(int) r.length];
            readFully(b, 0, b.length);
            return b;
        }
        ByteArrayOutputStream all = new ByteArrayOutputStream();
        byte[] chunk = new byte[BUFFER_BYTES];
        while (true) {
            long size;
            if (r.chunked) {
                size = chunkSize();
                if (size == 0) {
                    while (!line().isEmpty()) {
                        // trailers are ignored
                    }
                    return all.toByteArray();
                }
            } else {
                size = Long.MAX_VALUE;
            }
            while (size > 0) {
                int n = read(chunk, 0, (int) Math.min(chunk.length, size));
                if (n < 0) {
                    if (r.chunked) {
                        throw new EOFException("strata tier closed the connection in the middle of a chunk");
                    }
                    return all.toByteArray();
                }
                if (all.size() + n > cap) {
                    throw new IOException("strata tier sent a response body larger than the " + cap
                        + " bytes accepted here");
                }
                all.write(chunk, 0, n);
                size -= n;
            }
            if (!line().isEmpty()) {
                throw new IOException("strata tier sent a malformed chunked body");
            }
        }
    }

    private long chunkSize() throws IOException {
        String sizeLine = line();
        int semi = sizeLine.indexOf(';');
        String hex = (semi >= 0 ? sizeLine.substring(0, semi) : sizeLine).trim();
        try {
            long size = Long.parseLong(hex, 16);
            if (size >= 0) {
                return size;
            }
        } catch (NumberFormatException e) {
            // reported below
        }
        throw new IOException("strata tier sent a malformed chunk size: " + abbreviate(sizeLine));
    }

    private void readFully(byte[] b, int off, int len) throws IOException {
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
                if (sb.length() > HEAD_CAP) {
                    throw new IOException("strata tier sent a header line longer than " + HEAD_CAP + " bytes");
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

    /** A response as read off the wire, before any check. */
    static final class Raw {
        final int status;
        /** From Content-Length, or -1. */
        long length = -1;
        boolean chunked;
        boolean keepAlive = true;
        /** The Strata-Auth header, or {@code null}. */
        String auth;
        /** The Content-Type header (without parameters), or {@code null}. */
        String contentType;
        boolean authRepeated;
        /** The whole body, or {@code null} when it was left in the socket. */
        byte[] body;

        Raw(int status) {
            this.status = status;
        }

        /** Whether the connection can carry another exchange once this body is read. */
        boolean reusable() {
            return keepAlive && (chunked || length >= 0);
        }
    }

    @FunctionalInterface
    interface RequestWriter {
        void write(OutputStream out) throws IOException;
    }

    static int parseStatus(String line) throws IOException {
        // "HTTP/1.1 200 OK"
        if (!line.startsWith("HTTP/1.") || line.length() < 12 || line.charAt(8) != ' ') {
            throw new IOException("strata tier sent a response that is not HTTP/1.x: " + abbreviate(line));
        }
        try {
            return Integer.parseInt(line.substring(9, 12));
        } catch (NumberFormatException e) {
            throw new IOException("strata tier sent an invalid status line: " + abbreviate(line));
        }
    }

    static String abbreviate(String s) {
        return s.length() > 200 ? s.substring(0, 200) + "..." : s;
    }
}
