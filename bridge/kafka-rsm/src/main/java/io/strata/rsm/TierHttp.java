package io.strata.rsm;

import javax.crypto.spec.SecretKeySpec;

import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.URI;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.SocketChannel;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Objects;

/**
 * The bridge's HTTP/1.1 client to strata tier: authenticated requests in, checked responses out,
 * one request at a time per connection, connections kept alive, a fetch's body read straight
 * from the socket. Each concern has its own class in this package:
 * <ul>
 *   <li>{@link ConnectionPool}: the idle connections kept for reuse;</li>
 *   <li>{@link TcpTransport} and {@link Tls}: TCP connections, with TLS for {@code https};</li>
 *   <li>{@link UnixSocketTransport}: the Unix socket strata tier names, and the fallback to TCP;</li>
 *   <li>{@link TierConnection}: one connection, its read buffer and its timed exchange;</li>
 *   <li>{@link Http1}: request heads and response framing;</li>
 *   <li>{@link TierSession}: the hello and the signatures (values from {@link TierAuth});</li>
 *   <li>{@link Deadline}: the timer that closes a connection whose response is late.</li>
 * </ul>
 * Here: the calls, the one retry of a request that met a stale idle connection, which transport
 * a new connection takes, and the live body of a fetch.
 *
 * <p>Why not {@code java.net.http.HttpClient}: the broker's remote reads are many short
 * exchanges (one per consumer fetch, about 1 MiB each, the stream closed before the end). Through
 * that client each one cost a new connection (a body abandoned mid-way cannot be reused) and
 * every 16 KiB of body crossed its selector and executor threads before reaching the reader,
 * most of a remote fetch's time (README, "The HTTP client", has the figures). Here a read
 * of the body is a read of the socket (small reads are served from a 64 KiB buffer), and a
 * connection whose body was read to its end, or nearly, goes back to the pool.
 *
 * <p>Every body is buffered (bounded by the caller's cap) so that its signature is checked before
 * the caller sees it, except a {@code 200} answer to {@code /v1/fetch}, whose signature covers its
 * length only: that one is handed out live.
 *
 * <p>Calls block on {@link SocketChannel}s, so a thread interrupted while it waits gets
 * {@link ClosedByInterruptException} (and the connection is dropped). A late response closes its
 * connection; the caller then sees {@link HttpTimeoutException}.
 */
final class TierHttp {
    static final String HELLO_PATH = "/v1/hello";
    static final String FETCH_PATH = "/v1/fetch";
    /** The type of a fetch answered with cache files to read instead of bytes ({@link Handoff}). */
    static final String HANDOFF_TYPE = "application/vnd.strata.handoff+json";
    /**
     * A body closed with at most this many bytes unread is read to its end so that its connection
     * can be reused; with more left, the connection is closed (reconnecting is cheaper).
     */
    static final long DRAIN_MAX = 256 * 1024;

    /** A request body: what the request mac covers, and how it is written after the head. */
    interface RequestBody {
        String contentType();

        long length();

        /** The bytes whose digest the request's {@code Strata-Auth} mac covers. */
        byte[] signed();

        /** Writes {@code head}, then the body; {@code session} and {@code seq} are the request's. */
        void write(OutputStream out, byte[] head, SecretKeySpec session, long seq) throws IOException;
    }

    private final TierSession session;
    private final TcpTransport tcp;
    private final UnixSocketTransport unix;
    private final ConnectionPool pool;

    TierHttp(BridgeConfig cfg) {
        URI uri = URI.create(cfg.endpoint);
        int connectTimeoutMs = (int) Math.min(Integer.MAX_VALUE, Math.max(1, cfg.connectTimeout.toMillis()));
        this.session = new TierSession(cfg.secret, uri.getRawPath() == null ? "" : uri.getRawPath(),
            uri.getRawAuthority(), connectTimeoutMs);
        this.tcp = new TcpTransport(uri.getHost(), uri.getPort() >= 0 ? uri.getPort() : (cfg.https ? 443 : 80),
            connectTimeoutMs, Tls.sockets(cfg));
        this.unix = new UnixSocketTransport(cfg.followSocket, cfg.unixSocket, tcp.peer());
        this.pool = new ConnectionPool(unix::keepsTcp);
    }

    /** Closes the idle connections; bodies still open close theirs when they end. */
    void close() {
        pool.close();
    }

    /** The Unix socket strata tier named, which new connections go to, or {@code null} (for tests). */
    Path socket() {
        return unix.named();
    }

    /** {@code GET path}; see {@link #send}. */
    Response get(String path, Duration headTimeout, int cap) throws IOException {
        return send("GET", path, null, headTimeout, cap);
    }

    /** {@code POST path} with a JSON body; see {@link #send}. */
    Response post(String path, byte[] json, Duration headTimeout, int cap) throws IOException {
        return send("POST", path, new JsonBody(json), headTimeout, cap);
    }

    /** {@code POST path} with a segment's bytes; see {@link #send}. */
    Response upload(String path, SegmentUpload body, Duration headTimeout, int cap) throws IOException {
        return send("POST", path, body, headTimeout, cap);
    }

    /**
     * Sends one authenticated request and returns its checked response. {@code headTimeout} bounds
     * the wait for the response (for a buffered body, until its end); a streamed fetch body has no
     * timeout and the caller must close it. A buffered body larger than {@code cap} fails the call.
     *
     * @throws AuthenticationException when whoever answered did not prove it holds the secret
     * @throws CredentialsRefusedException when strata tier refused the request's signature
     * @throws HttpConnectTimeoutException when no connection was made within the connect timeout
     * @throws HttpTimeoutException when the response did not arrive within {@code headTimeout}
     * @throws ClosedByInterruptException when the calling thread is (or gets) interrupted
     */
    private Response send(String method, String path, RequestBody body, Duration headTimeout, int cap)
            throws IOException {
        long timeoutMs = Math.max(1, headTimeout.toMillis());
        TierConnection c = pool.take();
        if (c != null) {
            try {
                return exchange(c, method, path, body, timeoutMs, cap);
            } catch (IOException e) {
                c.close();
                // The server may have dropped the idle connection just before we used it: every
                // request of this protocol is idempotent, so it is sent again, once, on a new one.
                // staleFailure is never set once an answer arrived, so a failed signature check
                // is never retried.
                if (!c.staleFailure || Thread.currentThread().isInterrupted()) {
                    throw e;
                }
            } catch (RuntimeException e) {
                c.close();
                throw e;
            }
        }
        c = connect();
        try {
            return exchange(c, method, path, body, timeoutMs, cap);
        } catch (IOException | RuntimeException e) {
            c.close();
            throw e;
        }
    }

    /** One signed exchange on a connection that passed the hello. The caller closes {@code c} on failure. */
    private Response exchange(TierConnection c, String method, String path, RequestBody body, long timeoutMs, int cap)
            throws IOException {
        Http1.Raw r = session.exchange(c, method, path, body, timeoutMs, cap);
        if (r.body == null) {
            return new Response(r.status, null, new Body(c, r.length, r.keepAlive), r.contentType);
        }
        if (r.reusable()) {
            pool.release(c);
        } else {
            c.close();
        }
        return new Response(r.status, r.body, null, r.contentType);
    }

    /** A JSON body, written with its head in one write. */
    static final class JsonBody implements RequestBody {
        private final byte[] json;

        JsonBody(byte[] json) {
            this.json = json;
        }

        @Override
        public String contentType() {
            return "application/json";
        }

        @Override
        public long length() {
            return json.length;
        }

        @Override
        public byte[] signed() {
            return json;
        }

        @Override
        public void write(OutputStream out, byte[] head, SecretKeySpec session, long seq) throws IOException {
            out.write(ByteBuffer.allocate(head.length + json.length).put(head).put(json).array());
        }
    }

    /** A new connection that passed the hello: to the fixed socket, the named one, or TCP. */
    private TierConnection connect() throws IOException {
        if (unix.fixed() != null) {
            return greeted(UnixSocketTransport.open(unix.fixed()));
        }
        Path named = unix.named();
        if (named != null) {
            TierConnection c = null;
            try {
                c = UnixSocketTransport.open(named);
                session.hello(c);
                return c;
            } catch (AuthenticationException | CredentialsRefusedException e) {
                // An impostor on the socket path: this call fails loudly, later ones use TCP.
                c.close();
                unix.failed(named, e);
                throw e;
            } catch (IOException e) {
                if (c != null) {
                    c.close();
                }
                if (e instanceof ClosedByInterruptException || Thread.currentThread().isInterrupted()) {
                    throw e;
                }
                unix.failed(named, e);
            }
        }
        return greeted(tcp.open());
    }

    /** {@code c} once it passed the hello; a TCP hello may name strata tier's Unix socket. */
    private TierConnection greeted(TierConnection c) throws IOException {
        try {
            String named = session.hello(c);
            if (!c.unix) {
                unix.helloNamed(named);
            }
            return c;
        } catch (IOException | RuntimeException e) {
            c.close();
            throw e;
        }
    }

    // -------------------------------------------------------------------------------------------

    /** A checked response: its status and either its whole body or, for a fetch, its live body. */
    static final class Response {
        final int status;
        /** The whole body, covered by the checked signature; {@code null} when streamed. */
        final byte[] body;
        /** The live body of a 200 answer to /v1/fetch (its length is signed, its bytes are not); else null. */
        final Body stream;
        /** The Content-Type header, or {@code null}. */
        final String contentType;

        Response(int status, byte[] body, Body stream, String contentType) {
            this.status = status;
            this.body = body;
            this.stream = stream;
            this.contentType = contentType;
        }
    }

    // -------------------------------------------------------------------------------------------

    /**
     * The live body of a fetch: exactly Content-Length bytes (a connection that closes earlier is
     * an error, never a short body). Once read to its end, its connection goes back to the pool;
     * closed earlier, it is drained when little is left, else its connection is closed.
     */
    final class Body extends InputStream {
        private TierConnection conn;
        private final long length;
        private final boolean reusable;
        private long read;
        private boolean done;

        Body(TierConnection conn, long length, boolean reusable) {
            this.conn = conn;
            this.length = length;
            this.reusable = reusable;
            if (length == 0) {
                finish();
            }
        }

        /** Bytes read so far. */
        long bytesRead() {
            return read;
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
            if (done) {
                return -1;
            }
            if (conn == null) {
                throw new IOException("strata tier response body is closed");
            }
            if (len == 0) {
                return 0;
            }
            int n = conn.read(b, off, (int) Math.min(len, length - read));
            if (n < 0) {
                drop();
                throw new EOFException("strata tier response body ended after " + read + " bytes of " + length
                    + ": strata tier failed while sending it or went away (see its log)");
            }
            read += n;
            if (read == length) {
                finish();
            }
            return n;
        }

        /** The body ended: its connection goes back to the pool (or is closed). */
        private void finish() {
            done = true;
            TierConnection c = conn;
            conn = null;
            if (c == null) {
                return;
            }
            if (reusable) {
                pool.release(c);
            } else {
                c.close();
            }
        }

        private void drop() {
            done = true;
            TierConnection c = conn;
            conn = null;
            if (c != null) {
                c.close();
            }
        }

        @Override
        public void close() {
            if (done || conn == null) {
                done = true;
                return;
            }
            long rest = length - read;
            if (reusable && rest <= DRAIN_MAX) {
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
