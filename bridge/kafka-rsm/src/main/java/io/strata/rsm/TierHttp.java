package io.strata.rsm;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.SSLSocketFactory;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.net.URI;
import java.net.UnixDomainSocketAddress;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Locale;
import java.util.Objects;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * The bridge's HTTP/1.1 client: one request at a time per connection, connections kept alive in
 * a small pool, response bodies read straight from the socket.
 *
 * <p>Why not {@code java.net.http.HttpClient}: the broker's remote reads are many short
 * exchanges (one per consumer fetch, about 1 MiB each, the stream closed before the end). Through
 * that client each one cost a new connection (a body abandoned mid-way cannot be reused) and
 * every 16 KiB of body crossed its selector and executor threads before reaching the reader;
 * measured on a 2-core host, 7-9 ms per 1 MiB fetch, most of a remote fetch's time. Here a read
 * of the body is a read of the socket (small reads are served from a 64 KiB buffer), and a
 * connection whose body was read to its end, or nearly, goes back to the pool.
 *
 * <p>Unix domain socket: strata tier names the socket it also listens on in a
 * {@value #SOCKET_HEADER} response header. When the endpoint is a plain {@code http} address of
 * this host, new connections go to that socket (bulk reads over it cost a third of loopback
 * TCP's); when it cannot be connected to, the client goes back to TCP and tries the socket again
 * only after {@link #SOCKET_RETRY_NANOS}.
 *
 * <p>Calls block on {@link SocketChannel}s, so a thread interrupted while it waits gets
 * {@link ClosedByInterruptException} (and the connection is dropped). A shared timer closes a
 * connection whose response head is late; the caller then sees {@link HttpTimeoutException}.
 * {@code https} endpoints get TLS over the same TCP channel, with the JVM's default trust
 * settings and host name verification.
 */
final class TierHttp {
    private static final Logger LOG = LoggerFactory.getLogger(TierHttp.class);

    /** Response header in which strata tier names its Unix domain socket. */
    static final String SOCKET_HEADER = "strata-socket";
    /** After a failed connect, the advertised socket is not tried again for this long. */
    static final long SOCKET_RETRY_NANOS = Duration.ofSeconds(30).toNanos();
    /** Idle connections kept; the broker runs about 10 remote reader threads by default. */
    static final int MAX_IDLE = 16;
    /** Idle connections older than this are closed instead of reused (servers drop idle ones). */
    static final long MAX_IDLE_NANOS = Duration.ofSeconds(20).toNanos();
    /** Read buffer per connection: response heads and the small reads Kafka makes (batch headers). */
    static final int BUFFER_BYTES = 64 * 1024;
    /**
     * Largest single read from a socket: the JDK reads through a per-thread direct buffer of the
     * read's size and keeps it, so a reader asking for 50 MiB at once must not set that size.
     */
    static final int MAX_READ = 1 << 20;
    /** Largest response head accepted. */
    static final int HEAD_CAP = 64 * 1024;
    /**
     * A body closed with at most this many bytes unread is read to its end so that its connection
     * can be reused; with more left, the connection is closed (reconnecting is cheaper).
     */
    static final long DRAIN_MAX = 256 * 1024;

    /** Closes connections whose response head is late (one daemon thread for all clients). */
    private static final ScheduledThreadPoolExecutor TIMER = timer();

    private final String host;
    private final int port;
    /** Path prefix of the endpoint, no trailing slash ("" for none). */
    private final String basePath;
    private final String hostHeader;
    private final int connectTimeoutMs;
    /** {@code null} for plain HTTP. */
    private final SSLSocketFactory tls;
    /** Whether an advertised Unix socket may be used (setting on, plain HTTP). */
    private final boolean unixAllowed;
    /** Whether the endpoint is on this host; resolved once, when a socket is first advertised. */
    private volatile Boolean local;
    /** The Unix socket new connections go to, or {@code null} for TCP. */
    private volatile Path socket;
    private volatile Path failedSocket;
    private volatile long failedAt;
    private final ArrayDeque<Conn> idle = new ArrayDeque<>();
    private boolean closed;

    TierHttp(String endpoint, Duration connectTimeout, boolean unixSocket, SSLSocketFactory tlsFactory) {
        URI uri = URI.create(endpoint);
        boolean https = "https".equalsIgnoreCase(uri.getScheme());
        this.host = uri.getHost();
        this.port = uri.getPort() >= 0 ? uri.getPort() : (https ? 443 : 80);
        this.basePath = uri.getRawPath() == null ? "" : uri.getRawPath();
        this.hostHeader = uri.getRawAuthority();
        this.connectTimeoutMs = (int) Math.min(Integer.MAX_VALUE, Math.max(1, connectTimeout.toMillis()));
        this.tls = https ? (tlsFactory != null ? tlsFactory : (SSLSocketFactory) SSLSocketFactory.getDefault()) : null;
        this.unixAllowed = unixSocket && !https;
    }

    private static ScheduledThreadPoolExecutor timer() {
        ScheduledThreadPoolExecutor t = new ScheduledThreadPoolExecutor(1, r -> {
            Thread th = new Thread(r, "strata-rsm-timeouts");
            th.setDaemon(true);
            return th;
        });
        t.setRemoveOnCancelPolicy(true);
        return t;
    }

    /** Closes the idle connections; bodies still open close theirs when they end. */
    void close() {
        ArrayDeque<Conn> drop;
        synchronized (idle) {
            closed = true;
            drop = new ArrayDeque<>(idle);
            idle.clear();
        }
        for (Conn c : drop) {
            c.close();
        }
    }

    /** Connections in the pool now (for tests). */
    int idleCount() {
        synchronized (idle) {
            return idle.size();
        }
    }

    /** The Unix socket new connections go to, or {@code null} (for tests and logs). */
    Path socket() {
        return socket;
    }

    /**
     * Sends one request and reads the response head. {@code body} {@code null} means a GET. The
     * caller must close the returned response's body. {@code headTimeout} bounds the wait for the
     * response head; reading the body has no timeout.
     *
     * @throws HttpConnectTimeoutException when no connection was made within the connect timeout
     * @throws HttpTimeoutException when the head did not arrive within {@code headTimeout}
     * @throws ClosedByInterruptException when the calling thread is (or gets) interrupted
     */
    Response send(String path, byte[] body, Duration headTimeout) throws IOException {
        byte[] request = request(path, body);
        long timeoutMs = Math.max(1, headTimeout.toMillis());
        Conn c = takeIdle();
        if (c != null) {
            try {
                return c.exchange(request, timeoutMs);
            } catch (IOException e) {
                c.close();
                // The server may have dropped the idle connection just before we used it: every
                // request of this protocol is idempotent, so it is sent again, once, on a new one.
                if (!c.staleFailure || Thread.currentThread().isInterrupted()) {
                    throw e;
                }
            }
        }
        c = connect();
        try {
            return c.exchange(request, timeoutMs);
        } catch (IOException | RuntimeException e) {
            c.close();
            throw e;
        }
    }

    private byte[] request(String path, byte[] body) {
        StringBuilder head = new StringBuilder(160);
        head.append(body == null ? "GET " : "POST ").append(basePath).append(path).append(" HTTP/1.1\r\n")
            .append("Host: ").append(hostHeader).append("\r\n");
        if (body != null) {
            head.append("Content-Type: application/json\r\nContent-Length: ").append(body.length).append("\r\n");
        }
        head.append("\r\n");
        byte[] h = head.toString().getBytes(StandardCharsets.UTF_8);
        if (body == null) {
            return h;
        }
        byte[] all = new byte[h.length + body.length];
        System.arraycopy(h, 0, all, 0, h.length);
        System.arraycopy(body, 0, all, h.length, body.length);
        return all;
    }

    private Conn takeIdle() {
        long now = System.nanoTime();
        while (true) {
            Conn c;
            synchronized (idle) {
                c = idle.pollFirst();
            }
            if (c == null) {
                return null;
            }
            // TCP connections are retired once strata tier's Unix socket is known.
            if (now - c.idleSince < MAX_IDLE_NANOS && (c.unix || socket == null)) {
                return c;
            }
            c.close();
        }
    }

    private void release(Conn c) {
        c.idleSince = System.nanoTime();
        synchronized (idle) {
            if (!closed && idle.size() < MAX_IDLE) {
                idle.addFirst(c);
                return;
            }
        }
        c.close();
    }

    private Conn connect() throws IOException {
        Path unix = socket;
        if (unix != null) {
            SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
            try {
                ch.connect(UnixDomainSocketAddress.of(unix));
                return new Conn(ch, null, true);
            } catch (IOException e) {
                ch.close();
                if (e instanceof ClosedByInterruptException) {
                    throw e;
                }
                failedSocket = unix;
                failedAt = System.nanoTime();
                socket = null;
                LOG.info("strata tier's Unix socket {} is not usable ({}); using TCP {}:{}", unix, e.toString(), host, port);
            }
        }
        SocketChannel ch = SocketChannel.open();
        try {
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            try {
                ch.socket().connect(new InetSocketAddress(host, port), connectTimeoutMs);
            } catch (SocketTimeoutException e) {
                HttpConnectTimeoutException t = new HttpConnectTimeoutException(
                    "could not connect to " + host + ":" + port + " within " + connectTimeoutMs + " ms");
                t.initCause(e);
                throw t;
            }
            if (tls == null) {
                return new Conn(ch, null, false);
            }
            SSLSocket ssl = (SSLSocket) tls.createSocket(ch.socket(), host, port, true);
            SSLParameters params = ssl.getSSLParameters();
            params.setEndpointIdentificationAlgorithm("HTTPS");
            ssl.setSSLParameters(params);
            ssl.setSoTimeout(connectTimeoutMs);
            ssl.startHandshake();
            ssl.setSoTimeout(0);
            return new Conn(ch, ssl, false);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    /** A TCP answer named strata tier's Unix socket: use it for new connections if allowed. */
    private void advertised(String value) {
        if (!unixAllowed || value == null || socket != null) {
            return;
        }
        Path p;
        try {
            p = Path.of(value);
        } catch (RuntimeException e) {
            return;
        }
        if (!p.isAbsolute()) {
            return;
        }
        if (p.equals(failedSocket) && System.nanoTime() - failedAt < SOCKET_RETRY_NANOS) {
            return;
        }
        Boolean isLocal = local;
        if (isLocal == null) {
            try {
                isLocal = InetAddress.getByName(host).isLoopbackAddress();
            } catch (IOException e) {
                isLocal = false;
            }
            local = isLocal;
        }
        if (isLocal) {
            if (!p.equals(failedSocket)) {
                LOG.info("strata tier also listens on the Unix socket {}: new connections go there", p);
            }
            socket = p;
        }
    }

    // -------------------------------------------------------------------------------------------

    /** A response: status, what the head said about the body, and the body. */
    static final class Response {
        final int status;
        /** Body length from Content-Length, or -1 (chunked, or until the connection closes). */
        final long length;
        final Body body;

        Response(int status, long length, Body body) {
            this.status = status;
            this.length = length;
            this.body = body;
        }
    }

    /** One connection: the channel, TLS over it if any, and a read buffer. One thread at a time. */
    private final class Conn {
        final SocketChannel channel;
        /** {@code null} unless the endpoint is https. */
        final SSLSocket ssl;
        final InputStream sslIn;
        final OutputStream sslOut;
        final boolean unix;
        final byte[] buf = new byte[BUFFER_BYTES];
        final ByteBuffer bufView = ByteBuffer.wrap(buf);
        int pos;
        int lim;
        long idleSince;
        /** Set when the last exchange failed before any response byte arrived on a reused connection. */
        boolean staleFailure;
        /** Per exchange: 0 waiting for the head, 1 head read, 2 timed out (the timer closed us). */
        final AtomicInteger head = new AtomicInteger();

        Conn(SocketChannel channel, SSLSocket ssl, boolean unix) throws IOException {
            this.channel = channel;
            this.ssl = ssl;
            this.sslIn = ssl == null ? null : ssl.getInputStream();
            this.sslOut = ssl == null ? null : ssl.getOutputStream();
            this.unix = unix;
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

        private void rawWrite(byte[] b) throws IOException {
            if (ssl != null) {
                sslOut.write(b);
                sslOut.flush();
                return;
            }
            ByteBuffer src = ByteBuffer.wrap(b);
            while (src.hasRemaining()) {
                channel.write(src);
            }
        }

        Response exchange(byte[] request, long timeoutMs) throws IOException {
            staleFailure = false;
            boolean gotByte = false;
            head.set(0);
            ScheduledFuture<?> timer = TIMER.schedule(() -> {
                if (head.compareAndSet(0, 2)) {
                    close();
                }
            }, timeoutMs, TimeUnit.MILLISECONDS);
            try {
                rawWrite(request);
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
                long length = -1;
                boolean chunked = false;
                boolean keepAlive = true;
                String advertisedSocket = null;
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
                            try {
                                length = Long.parseLong(value);
                            } catch (NumberFormatException e) {
                                length = -2;
                            }
                            if (length < 0) {
                                throw new IOException("strata tier sent an invalid Content-Length: " + abbreviate(value));
                            }
                            break;
                        case "transfer-encoding":
                            chunked = value.toLowerCase(Locale.ROOT).endsWith("chunked");
                            break;
                        case "connection":
                            keepAlive &= !value.toLowerCase(Locale.ROOT).contains("close");
                            break;
                        case SOCKET_HEADER:
                            advertisedSocket = value;
                            break;
                        default:
                            break;
                    }
                }
                if (!head.compareAndSet(0, 1)) {
                    throw new SocketTimeoutException("the response head came as the timer fired");
                }
                if (!unix && advertisedSocket != null) {
                    advertised(advertisedSocket);
                }
                if (chunked) {
                    length = -1;
                } else if (status == 204 || status == 304) {
                    length = 0;
                }
                boolean untilClose = !chunked && length < 0;
                Body body = new Body(this, length, chunked, keepAlive && !untilClose);
                return new Response(status, length, body);
            } catch (IOException e) {
                if (head.get() == 2) {
                    HttpTimeoutException t = new HttpTimeoutException("no response head within " + timeoutMs + " ms");
                    t.initCause(e);
                    throw t;
                }
                staleFailure = !gotByte && !(e instanceof InterruptedIOException)
                    && !(e instanceof ClosedByInterruptException);
                throw e;
            } finally {
                timer.cancel(false);
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

    private static String abbreviate(String s) {
        return s.length() > 200 ? s.substring(0, 200) + "..." : s;
    }

    // -------------------------------------------------------------------------------------------

    /**
     * A response body. Ends exactly where the head said (a connection that closes earlier is an
     * error, never a short body). Once read to its end, its connection goes back to the pool;
     * closed earlier, it is drained when little is left, else its connection is closed.
     */
    final class Body extends InputStream {
        private Conn conn;
        /** Bytes left of a fixed-length body or of the current chunk. */
        private long left;
        private final boolean chunked;
        private final boolean reusable;
        private final long length;
        private long read;
        private boolean done;
        /** A chunked body's first chunk was read (later size lines follow a CRLF). */
        private boolean sawChunk;

        Body(Conn conn, long length, boolean chunked, boolean reusable) {
            this.conn = conn;
            this.length = length;
            this.chunked = chunked;
            this.reusable = reusable;
            this.left = chunked ? 0 : length;
            if (!chunked && length == 0) {
                finish();
            }
        }

        /** Bytes read so far. */
        long bytesRead() {
            return read;
        }

        /** The body's length from its head, or -1 (chunked, or until the connection closes). */
        long length() {
            return chunked ? -1 : length;
        }

        /** Whether this body came over the Unix socket (for tests). */
        boolean overUnixSocket() {
            return conn != null ? conn.unix : lastUnix;
        }

        private boolean lastUnix;

        @Override
        public int read() throws IOException {
            byte[] one = new byte[1];
            int n = read(one, 0, 1);
            return n < 0 ? -1 : one[0] & 0xff;
        }

        @Override
        public int read(byte[] b, int off, int len) throws IOException {
            Objects.checkFromIndexSize(off, len, b.length);
            if (done) {
                return -1;
            }
            if (conn == null) {
                throw new IOException("strata tier response body is closed");
            }
            if (len == 0) {
                return 0;
            }
            if (chunked && left == 0) {
                if (!nextChunk()) {
                    return -1;
                }
            }
            if (length < 0 && !chunked) {
                int n = conn.read(b, off, len);
                if (n < 0) {
                    finish();
                    return -1;
                }
                read += n;
                return n;
            }
            int n = conn.read(b, off, (int) Math.min(len, left));
            if (n < 0) {
                drop();
                throw new EOFException("strata tier response body ended after " + read + " bytes"
                    + (chunked ? " (in the middle of a chunk)" : " of " + length)
                    + ": strata tier failed while sending it or went away (see its log)");
            }
            left -= n;
            read += n;
            if (left == 0 && !chunked) {
                finish();
            }
            return n;
        }

        /** Reads the next chunk's size line; false after the last chunk (and its trailers). */
        private boolean nextChunk() throws IOException {
            if (sawChunk && !conn.line().isEmpty()) {
                throw new IOException("strata tier sent a malformed chunked body");
            }
            sawChunk = true;
            String sizeLine = conn.line();
            int semi = sizeLine.indexOf(';');
            String hex = (semi >= 0 ? sizeLine.substring(0, semi) : sizeLine).trim();
            long size;
            try {
                size = Long.parseLong(hex, 16);
            } catch (NumberFormatException e) {
                size = -1;
            }
            if (size < 0) {
                throw new IOException("strata tier sent a malformed chunk size: " + abbreviate(sizeLine));
            }
            if (size == 0) {
                while (!conn.line().isEmpty()) {
                    // trailers are ignored
                }
                finish();
                return false;
            }
            left = size;
            return true;
        }

        /** The body ended: its connection goes back to the pool (or is closed). */
        private void finish() {
            done = true;
            Conn c = conn;
            conn = null;
            if (c == null) {
                return;
            }
            lastUnix = c.unix;
            if (reusable) {
                release(c);
            } else {
                c.close();
            }
        }

        private void drop() {
            done = true;
            Conn c = conn;
            conn = null;
            if (c != null) {
                lastUnix = c.unix;
                c.close();
            }
        }

        /** Bytes of a fixed-length body not read yet (-1 when unknown). */
        long remaining() {
            if (done) {
                return 0;
            }
            return chunked || length < 0 ? -1 : left;
        }

        @Override
        public void close() {
            if (done || conn == null) {
                done = true;
                return;
            }
            long rest = remaining();
            if (reusable && rest > 0 && rest <= DRAIN_MAX) {
                try {
                    byte[] sink = new byte[(int) Math.min(rest, 64 * 1024)];
                    while (!done) {
                        if (read(sink, 0, sink.length) < 0) {
                            break;
                        }
                    }
                    return;
                } catch (IOException e) {
                    // fall through: the connection is dropped
                }
            }
            drop();
        }
    }
}
