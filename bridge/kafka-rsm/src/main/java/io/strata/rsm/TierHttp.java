package io.strata.rsm;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import javax.crypto.spec.SecretKeySpec;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.SSLSocketFactory;

import java.io.ByteArrayOutputStream;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.InterruptedIOException;
import java.io.OutputStream;
import java.math.BigDecimal;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardProtocolFamily;
import java.net.StandardSocketOptions;
import java.net.URI;
import java.net.UnixDomainSocketAddress;
import java.net.UnknownHostException;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayDeque;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Predicate;

/**
 * The bridge's HTTP/1.1 client: one request at a time per connection, connections kept alive in
 * a small pool, response bodies read straight from the socket.
 *
 * <p>Why not {@code java.net.http.HttpClient}: the broker's remote reads are many short
 * exchanges (one per consumer fetch, about 1 MiB each, the stream closed before the end). Through
 * that client each one cost a new connection (a body abandoned mid-way cannot be reused) and
 * every 16 KiB of body crossed its selector and executor threads before reaching the reader,
 * most of a remote fetch's time (README, "The HTTP client", has the figures). Here a read
 * of the body is a read of the socket (small reads are served from a 64 KiB buffer), and a
 * connection whose body was read to its end, or nearly, goes back to the pool.
 *
 * <p>Authentication (README, "Authentication"): every new connection starts with the hello, and
 * is used only once strata tier's proof checked; each request is signed with the connection's
 * session key and a per-connection {@code seq}, and each response's signature is checked before
 * its status or body reach the caller. So the client buffers every body (bounded by the caller's
 * cap) except a {@code 200} answer to {@code /v1/fetch}, whose signature covers its length only:
 * that one is handed out live.
 *
 * <p>Unix domain socket: strata tier names the socket it also listens on in its hello, under its
 * proof. When allowed ({@code auto}, plain http), new connections go to that socket (bulk reads
 * over it cost a third of loopback TCP's) and run the hello again there; when it cannot be
 * connected to, or whoever listens there fails the hello, the client goes back to TCP and tries
 * the socket again only after {@link #SOCKET_RETRY_NANOS}.
 *
 * <p>Calls block on {@link SocketChannel}s, so a thread interrupted while it waits gets
 * {@link ClosedByInterruptException} (and the connection is dropped). A shared timer closes a
 * connection whose response is late; the caller then sees {@link HttpTimeoutException}.
 * {@code https} endpoints get TLS over the same TCP channel, with host name verification.
 */
final class TierHttp {
    private static final Logger LOG = LoggerFactory.getLogger(TierHttp.class);

    static final String HELLO_PATH = "/v1/hello";
    static final String FETCH_PATH = "/v1/fetch";
    /** The type of a fetch answered with cache files to read instead of bytes ({@link Handoff}). */
    static final String HANDOFF_TYPE = "application/vnd.strata.handoff+json";
    /** Largest hello answer accepted (a small JSON object). */
    static final int HELLO_CAP = 64 * 1024;
    /** After a failed connect or hello, the named socket is not tried again for this long. */
    static final long SOCKET_RETRY_NANOS = Duration.ofSeconds(5).toNanos();
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

    private static final byte[] EMPTY = new byte[0];

    /** Closes connections whose response is late (one daemon thread for all clients). */
    private static final ScheduledThreadPoolExecutor TIMER = timer();

    /** A request body: what the request mac covers, and how it is written after the head. */
    interface RequestBody {
        String contentType();

        long length();

        /** The bytes whose digest the request's {@code Strata-Auth} mac covers. */
        byte[] signed();

        /** Writes {@code head}, then the body; {@code session} and {@code seq} are the request's. */
        void write(OutputStream out, byte[] head, SecretKeySpec session, long seq) throws IOException;
    }

    private final String host;
    private final int port;
    /** Path prefix of the endpoint, no trailing slash ("" for none). */
    private final String basePath;
    private final String hostHeader;
    private final int connectTimeoutMs;
    /** {@code null} for plain HTTP. */
    private final SSLSocketFactory tls;
    private final SecretKeySpec secret;
    /** Whether the socket strata tier names in its hello is used. */
    private final boolean followSocket;
    /** The socket every connection goes to, or {@code null} ({@code strata.unix.socket} set to a path). */
    private final Path fixedSocket;
    /** The socket strata tier named, new connections go there; {@code null} for TCP. */
    private volatile Path socket;
    private volatile Path failedSocket;
    private volatile long failedAt;
    private final ArrayDeque<Conn> idle = new ArrayDeque<>();
    private boolean closed;

    TierHttp(BridgeConfig cfg) {
        URI uri = URI.create(cfg.endpoint);
        this.host = uri.getHost();
        this.port = uri.getPort() >= 0 ? uri.getPort() : (cfg.https ? 443 : 80);
        this.basePath = uri.getRawPath() == null ? "" : uri.getRawPath();
        this.hostHeader = uri.getRawAuthority();
        this.connectTimeoutMs = (int) Math.min(Integer.MAX_VALUE, Math.max(1, cfg.connectTimeout.toMillis()));
        this.tls = !cfg.https ? null : cfg.trust != null ? cfg.trust : (SSLSocketFactory) SSLSocketFactory.getDefault();
        this.secret = cfg.secret;
        this.followSocket = cfg.followSocket;
        this.fixedSocket = cfg.unixSocket;
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

    /** The Unix socket strata tier named, which new connections go to, or {@code null} (for tests). */
    Path socket() {
        return socket;
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
        Conn c = takeIdle();
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
    private Response exchange(Conn c, String method, String path, RequestBody body, long timeoutMs, int cap)
            throws IOException {
        long seq = ++c.seq;
        String mac = TierAuth.requestMac(c.session, seq, method, path, body == null ? EMPTY : body.signed());
        byte[] head = head(method, path, body, seq + " " + mac);
        boolean fetch = path.equals(FETCH_PATH);
        Raw r = c.exchange(out -> {
            if (body == null) {
                out.write(head);
            } else {
                body.write(out, head, c.session, seq);
            }
        }, timeoutMs, raw -> fetch && raw.status == 200 && !HANDOFF_TYPE.equals(raw.contentType), cap);
        if (r.status == 401 && r.auth == null) {
            throw new CredentialsRefusedException("HTTP 401 to " + method + " " + path + printable(r.body));
        }
        String digest;
        if (r.body != null) {
            digest = TierAuth.bodyDigest(r.body);
        } else if (r.length >= 0 && !r.chunked) {
            digest = TierAuth.streamDigest(r.length);
        } else {
            throw new AuthenticationException("its 200 answer to " + path + " has no Content-Length, which its"
                + " signature must cover");
        }
        if (r.auth == null) {
            // The status is named for diagnosis only (strata tier refuses some requests unsigned
            // before it checks them); nothing else of the answer is used.
            throw new AuthenticationException("its answer to " + method + " " + path + " has no Strata-Auth"
                + " signature (an unsigned HTTP " + r.status + ", not trusted)");
        }
        if (r.authRepeated || !TierAuth.matches(TierAuth.responseMac(c.session, seq, r.status, digest), r.auth)) {
            throw new AuthenticationException("its answer to " + method + " " + path + " has a wrong Strata-Auth"
                + " signature");
        }
        if (r.body == null) {
            return new Response(r.status, null, new Body(c, r.length, r.keepAlive), r.contentType);
        }
        if (r.reusable()) {
            release(c);
        } else {
            c.close();
        }
        return new Response(r.status, r.body, null, r.contentType);
    }

    /**
     * The hello: proves that whoever answers on {@code c} holds the secret, and gives the
     * connection its session key. Nothing else is sent on a connection before it passed.
     */
    private void hello(Conn c) throws IOException {
        String clientNonce = TierAuth.newNonce();
        JsonBody body = new JsonBody(("{\"version\":" + TierAuth.VERSION + ",\"client_nonce\":\"" + clientNonce + "\"}")
            .getBytes(StandardCharsets.UTF_8));
        byte[] head = head("POST", HELLO_PATH, body, null);
        Raw r = c.exchange(out -> body.write(out, head, null, 0), connectTimeoutMs, raw -> false, HELLO_CAP);
        if (r.status == 401) {
            throw new CredentialsRefusedException("HTTP 401 to its hello" + printable(r.body));
        }
        if (r.status != 200) {
            throw new AuthenticationException(c.peer + " answered the hello with HTTP " + r.status
                + " (is it a strata tier that speaks protocol version " + TierAuth.VERSION + "?)");
        }
        Object parsed;
        try {
            parsed = JsonReader.parse(new String(r.body, StandardCharsets.UTF_8));
        } catch (IllegalArgumentException e) {
            throw new AuthenticationException(c.peer + " answered the hello with a body that is not JSON");
        }
        Map<?, ?> m = parsed instanceof Map ? (Map<?, ?>) parsed : Map.of();
        Object version = m.get("version");
        Object serverNonce = m.get("server_nonce");
        Object named = m.get("socket");
        Object proof = m.get("proof");
        if (!(version instanceof BigDecimal) || ((BigDecimal) version).compareTo(BigDecimal.valueOf(TierAuth.VERSION)) != 0) {
            throw new AuthenticationException(c.peer + " answered the hello without protocol version "
                + TierAuth.VERSION);
        }
        if (!(serverNonce instanceof String) || !TierAuth.isNonce((String) serverNonce)
                || !(proof instanceof String) || !(named == null || named instanceof String)) {
            throw new AuthenticationException(c.peer + " answered the hello without a well-formed server_nonce,"
                + " socket and proof");
        }
        String socketNamed = named == null ? "" : (String) named;
        String expected = TierAuth.proof(secret, clientNonce, (String) serverNonce, socketNamed);
        if (!TierAuth.matches(expected, (String) proof)) {
            throw new AuthenticationException("the hello proof of " + c.peer + " is wrong: it does not hold the"
                + " bridge's secret (check that strata.secret.file holds the same secret as strata's"
                + " tier.secret_file, and that nothing else listens there)");
        }
        if (!r.reusable()) {
            throw new IOException(c.peer + " closed the connection after the hello");
        }
        c.session = TierAuth.sessionKey(secret, clientNonce, (String) serverNonce);
        if (!c.unix && socketNamed.isEmpty()) {
            failedSocket = null;
        } else if (!c.unix) {
            named(socketNamed);
        }
    }

    private byte[] head(String method, String path, RequestBody body, String auth) {
        StringBuilder h = new StringBuilder(200);
        h.append(method).append(' ').append(basePath).append(path).append(" HTTP/1.1\r\n")
            .append("Host: ").append(hostHeader).append("\r\n");
        if (body != null) {
            h.append("Content-Type: ").append(body.contentType()).append("\r\n")
                .append("Content-Length: ").append(body.length()).append("\r\n");
        }
        if (auth != null) {
            h.append("Strata-Auth: ").append(auth).append("\r\n");
        }
        h.append("\r\n");
        return h.toString().getBytes(StandardCharsets.UTF_8);
    }

    /** A JSON body, written with its head in one write. */
    private static final class JsonBody implements RequestBody {
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

    /** An unauthenticated body for a message: short, on one line. */
    private static String printable(byte[] body) {
        if (body == null || body.length == 0) {
            return "";
        }
        String s = new String(body, 0, Math.min(body.length, 200), StandardCharsets.UTF_8).strip();
        return s.isEmpty() ? "" : " (" + s.replaceAll("\\p{Cntrl}", " ") + ")";
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
            // TCP connections are retired once strata tier's Unix socket is known, and once a
            // failed socket is due for another try (a new connection's hello names it again:
            // busy TCP connections would otherwise keep the bridge off the socket for good).
            if (now - c.idleSince < MAX_IDLE_NANOS && (c.unix || (socket == null && !socketRetryDue(now)))) {
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

    /** A new connection that passed the hello: to the fixed socket, the named one, or TCP. */
    private Conn connect() throws IOException {
        if (fixedSocket != null) {
            return greeted(openUnix(fixedSocket));
        }
        Path unix = socket;
        if (unix != null) {
            Conn c = null;
            try {
                c = openUnix(unix);
                hello(c);
                return c;
            } catch (AuthenticationException | CredentialsRefusedException e) {
                // An impostor on the socket path: this call fails loudly, later ones use TCP.
                c.close();
                forgetSocket(unix, e);
                throw e;
            } catch (IOException e) {
                if (c != null) {
                    c.close();
                }
                if (e instanceof ClosedByInterruptException || Thread.currentThread().isInterrupted()) {
                    throw e;
                }
                forgetSocket(unix, e);
            }
        }
        return greeted(openTcp());
    }

    private Conn greeted(Conn c) throws IOException {
        try {
            hello(c);
            return c;
        } catch (IOException | RuntimeException e) {
            c.close();
            throw e;
        }
    }

    /** A socket strata tier named failed, long enough ago to be tried again. */
    private boolean socketRetryDue(long now) {
        return followSocket && failedSocket != null && now - failedAt >= SOCKET_RETRY_NANOS;
    }

    private void forgetSocket(Path unix, IOException why) {
        failedSocket = unix;
        failedAt = System.nanoTime();
        socket = null;
        LOG.info("strata tier's Unix socket {} is not usable ({}); using TCP {}:{} for {} s", unix, why.toString(),
            host, port, TimeUnit.NANOSECONDS.toSeconds(SOCKET_RETRY_NANOS));
    }

    private static Conn openUnix(Path path) throws IOException {
        SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        try {
            ch.connect(UnixDomainSocketAddress.of(path));
            return new Conn(ch, null, true, "the Unix socket " + path);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    private Conn openTcp() throws IOException {
        InetSocketAddress addr = new InetSocketAddress(host, port);
        if (addr.isUnresolved()) {
            throw new UnknownHostException(host);
        }
        if (tls == null && !addr.getAddress().isLoopbackAddress()) {
            // The configuration allows only loopback names; this catches one that resolves elsewhere.
            throw new IOException(host + " resolves to " + addr.getAddress().getHostAddress()
                + ", not a loopback address: plain http is only used on this host");
        }
        SocketChannel ch = SocketChannel.open();
        try {
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            try {
                ch.socket().connect(addr, connectTimeoutMs);
            } catch (SocketTimeoutException e) {
                HttpConnectTimeoutException t = new HttpConnectTimeoutException(
                    "could not connect to " + host + ":" + port + " within " + connectTimeoutMs + " ms");
                t.initCause(e);
                throw t;
            }
            String peer = host + ":" + port;
            if (tls == null) {
                return new Conn(ch, null, false, peer);
            }
            SSLSocket ssl = (SSLSocket) tls.createSocket(ch.socket(), host, port, true);
            SSLParameters params = ssl.getSSLParameters();
            params.setEndpointIdentificationAlgorithm("HTTPS");
            ssl.setSSLParameters(params);
            ssl.setSoTimeout(connectTimeoutMs);
            ssl.startHandshake();
            ssl.setSoTimeout(0);
            return new Conn(ch, ssl, false, peer);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    /** An authenticated TCP hello named strata tier's Unix socket: use it for new connections if allowed. */
    private void named(String value) {
        if (!followSocket || socket != null) {
            return;
        }
        Path p;
        try {
            p = Path.of(value);
        } catch (InvalidPathException e) {
            return;
        }
        if (!p.isAbsolute()) {
            return;
        }
        if (p.equals(failedSocket) && System.nanoTime() - failedAt < SOCKET_RETRY_NANOS) {
            return;
        }
        if (!p.equals(failedSocket)) {
            LOG.info("strata tier also listens on the Unix socket {}: new connections go there", p);
        }
        failedSocket = null;
        socket = p;
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

    /** A response as read off the wire, before any check. */
    private static final class Raw {
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
    private interface RequestWriter {
        void write(OutputStream out) throws IOException;
    }

    /** One connection: the channel, TLS over it if any, a read buffer and its session. One thread at a time. */
    private static final class Conn {
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
        /** Per exchange: 0 waiting for the response, 1 read, 2 timed out (the timer closed us). */
        final AtomicInteger phase = new AtomicInteger();
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

        Conn(SocketChannel channel, SSLSocket ssl, boolean unix, String peer) throws IOException {
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
            phase.set(0);
            ScheduledFuture<?> timer = TIMER.schedule(() -> {
                if (phase.compareAndSet(0, 2)) {
                    close();
                }
            }, timeoutMs, TimeUnit.MILLISECONDS);
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
                if (!phase.compareAndSet(0, 1)) {
                    throw new SocketTimeoutException("the response came as the timer fired");
                }
                return r;
            } catch (IOException e) {
                if (phase.get() == 2) {
                    HttpTimeoutException t = new HttpTimeoutException("no response within " + timeoutMs + " ms");
                    t.initCause(e);
                    throw t;
                }
                staleFailure = !gotByte && !(e instanceof InterruptedIOException)
                    && !(e instanceof ClosedByInterruptException) && !(e instanceof SegmentUpload.SegmentFileException);
                throw e;
            } finally {
                timer.cancel(false);
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
     * The live body of a fetch: exactly Content-Length bytes (a connection that closes earlier is
     * an error, never a short body). Once read to its end, its connection goes back to the pool;
     * closed earlier, it is drained when little is left, else its connection is closed.
     */
    final class Body extends InputStream {
        private Conn conn;
        private final long length;
        private final boolean reusable;
        private long read;
        private boolean done;

        Body(Conn conn, long length, boolean reusable) {
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
            Conn c = conn;
            conn = null;
            if (c == null) {
                return;
            }
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
