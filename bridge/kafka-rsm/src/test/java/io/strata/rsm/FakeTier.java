package io.strata.rsm;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLServerSocket;

import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayOutputStream;
import java.io.Closeable;
import java.io.EOFException;
import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.math.BigDecimal;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.ServerSocket;
import java.net.Socket;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.Channels;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * A stand-in for {@code strata tier} that implements the server side of the README's protocol on
 * its own HTTP/1.1 server, over TCP, TLS or a Unix socket: per connection it answers one hello
 * with its proof, checks every request's {@code Strata-Auth} mac and seq (a bad one is answered
 * 401 without a signature and closes the connection, as strata tier does), parses copy-upload
 * bodies and checks their tag, and signs every response. It shares only {@link TierAuth} with the
 * bridge, whose values the README's test vectors pin. Every protocol deviation it sees from the
 * client lands in {@link #violations}; switches make it misbehave as an impostor or a broken
 * server would.
 */
final class FakeTier implements AutoCloseable {
    /** The secret the bridge's tests share with the fake (at least 32 bytes). */
    static final byte[] SECRET = "fake-strata-tier-shared-secret-0123456789".getBytes(StandardCharsets.US_ASCII);

    /** How the hello is answered. */
    enum Hello {
        HONEST,
        /** A proof with one digit changed. */
        WRONG_PROOF,
        /** A proof made for no socket while the answer names one (a substituted socket member). */
        SOCKET_NOT_IN_PROOF,
        /** Not strata at all: every request, the hello too, gets the responder's reply, unsigned. */
        NOT_STRATA
    }

    /** How responses are signed. */
    enum Signature { VALID, MISSING, TAMPERED, OTHER_BODY, OTHER_STATUS, OTHER_SEQ }

    /** One authenticated request as the fake saw it. */
    static final class Recorded {
        final String transport;
        final int connection;
        final long seq;
        final String method;
        final String path;
        final String contentType;
        /** The JSON body, or an upload's JSON header. */
        final byte[] body;
        /** The parsed upload body, for {@code /v1/copy-upload}. */
        final Upload upload;

        Recorded(String transport, int connection, long seq, String method, String path, String contentType,
                 byte[] body, Upload upload) {
            this.transport = transport;
            this.connection = connection;
            this.seq = seq;
            this.method = method;
            this.path = path;
            this.contentType = contentType;
            this.body = body;
            this.upload = upload;
        }

        String bodyText() {
            return new String(body, StandardCharsets.UTF_8);
        }
    }

    /** A copy-upload body, checked against its header, its Content-Length and its tag. */
    static final class Upload {
        final long contentLength;
        /** File name in the header's {@code sizes} to the bytes received, in body order. */
        final Map<String, byte[]> files;

        Upload(long contentLength, Map<String, byte[]> files) {
            this.contentLength = contentLength;
            this.files = files;
        }
    }

    /** Writes a streamed body. */
    @FunctionalInterface
    interface BodyWriter {
        void write(OutputStream out) throws Exception;
    }

    /** What to answer. */
    static final class Reply {
        final int status;
        final byte[] body;
        /** Writes the body of {@link #length} bytes instead of {@link #body}. */
        final BodyWriter writer;
        final long length;
        final boolean chunked;
        /** The Content-Type header, or {@code null} for none. */
        final String contentType;

        private Reply(int status, byte[] body, BodyWriter writer, long length, boolean chunked, String contentType) {
            this.status = status;
            this.body = body;
            this.writer = writer;
            this.length = length;
            this.chunked = chunked;
            this.contentType = contentType;
        }

        private Reply(int status, byte[] body, BodyWriter writer, long length, boolean chunked) {
            this(status, body, writer, length, chunked, null);
        }

        /** A fetch answered with cache files: a signed JSON body of strata's handoff type. */
        static Reply handoff(String json) {
            byte[] body = json.getBytes(StandardCharsets.UTF_8);
            return new Reply(200, body, null, body.length, false, TierHttp.HANDOFF_TYPE);
        }

        static Reply of(int status, String text) {
            return of(status, text.getBytes(StandardCharsets.UTF_8));
        }

        static Reply of(int status, byte[] body) {
            return new Reply(status, body, null, body.length, false);
        }

        /** A body with Transfer-Encoding: chunked, in 1000-byte chunks. */
        static Reply chunked(int status, byte[] body) {
            return new Reply(status, body, null, -1, true);
        }

        /** A fetch answer of {@code length} bytes written by {@code writer}. */
        static Reply streamed(int status, long length, BodyWriter writer) {
            return new Reply(status, null, writer, length, false);
        }
    }

    @FunctionalInterface
    interface Responder {
        Reply respond(Recorded request) throws Exception;
    }

    /** Authenticated requests, in arrival order. */
    final List<Recorded> requests = new CopyOnWriteArrayList<>();
    /** The transport of each hello answered. */
    final List<String> hellos = new CopyOnWriteArrayList<>();
    /** Everything the client did against the protocol. */
    final List<String> violations = new CopyOnWriteArrayList<>();

    volatile Hello hello = Hello.HONEST;
    volatile Signature signature = Signature.VALID;
    /** Answer every authenticated request 401, unsigned, as if its mac did not check. */
    volatile boolean refuseRequests;
    /** The Unix socket the hello names, or {@code null}. */
    volatile String socketNamed;
    /** Runs once an upload's header was read, before its files are. */
    volatile Runnable onUploadHeader;

    private volatile Responder responder = r -> Reply.of(200, "{\"custom_metadata\":null}");
    private final SecretKeySpec secret;
    private final List<Closeable> listeners = new CopyOnWriteArrayList<>();
    private final Set<Closeable> open = ConcurrentHashMap.newKeySet();
    private final List<Path> socketFiles = new CopyOnWriteArrayList<>();
    private final AtomicInteger connections = new AtomicInteger();
    private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "fake-strata-tier");
        t.setDaemon(true);
        return t;
    });
    private volatile String endpoint;

    /** A fake on a loopback TCP port, holding {@link #SECRET}. */
    FakeTier() throws IOException {
        this(SECRET);
    }

    /** A fake on a loopback TCP port, holding {@code secret}. */
    FakeTier(byte[] secret) throws IOException {
        this.secret = TierAuth.key(secret);
        ServerSocketChannel server = ServerSocketChannel.open();
        server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        endpoint = "http://127.0.0.1:" + ((InetSocketAddress) server.getLocalAddress()).getPort();
        accept(server, "tcp");
    }

    private FakeTier(byte[] secret, boolean unused) {
        this.secret = TierAuth.key(secret);
    }

    /** A fake only on the Unix socket {@code path}. */
    static FakeTier unixOnly(Path path, byte[] secret) throws IOException {
        FakeTier t = new FakeTier(secret, false);
        t.listenUnix(path);
        return t;
    }

    /** A fake speaking TLS with {@code ctx}'s key on a loopback TCP port, holding {@link #SECRET}. */
    static FakeTier tls(SSLContext ctx) throws IOException {
        FakeTier t = new FakeTier(SECRET, false);
        SSLServerSocket server = (SSLServerSocket) ctx.getServerSocketFactory()
            .createServerSocket(0, 50, InetAddress.getLoopbackAddress());
        t.endpoint = "https://127.0.0.1:" + server.getLocalPort();
        t.accept(server);
        return t;
    }

    /** Also listens on the Unix socket {@code path}. */
    FakeTier listenUnix(Path path) throws IOException {
        ServerSocketChannel server = ServerSocketChannel.open(StandardProtocolFamily.UNIX);
        server.bind(UnixDomainSocketAddress.of(path));
        socketFiles.add(path);
        accept(server, "unix");
        return this;
    }

    String endpoint() {
        return endpoint;
    }

    void respond(Responder r) {
        this.responder = r;
    }

    /** The one authenticated request made. */
    Recorded only() {
        if (requests.size() != 1) {
            throw new AssertionError("expected exactly one request, got " + requests.size());
        }
        return requests.get(0);
    }

    /** Waits up to 5 s for the fake to have seen a violation (it may notice after the client gave up). */
    String awaitViolation() throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (violations.isEmpty() && System.nanoTime() < deadline) {
            Thread.sleep(10);
        }
        if (violations.size() != 1) {
            throw new AssertionError("expected one violation, got " + violations);
        }
        return violations.remove(0);
    }

    /** Writes {@code secret} to a file of mode 0600 in {@code dir}. */
    static Path writeSecret(Path dir, String name, byte[] secret) throws IOException {
        Path p = dir.resolve(name);
        Files.write(p, secret);
        Files.setPosixFilePermissions(p, PosixFilePermissions.fromString("rw-------"));
        return p;
    }

    // ------------------------------------------------------------------------------ serving

    private void accept(ServerSocketChannel server, String transport) {
        listeners.add(server);
        pool.execute(() -> {
            while (true) {
                SocketChannel ch;
                try {
                    ch = server.accept();
                } catch (IOException e) {
                    return;
                }
                open.add(ch);
                pool.execute(() -> serve(Channels.newInputStream(ch), Channels.newOutputStream(ch), transport, ch));
            }
        });
    }

    private void accept(ServerSocket server) {
        listeners.add(server);
        pool.execute(() -> {
            while (true) {
                Socket s;
                try {
                    s = server.accept();
                } catch (IOException e) {
                    return;
                }
                open.add(s);
                pool.execute(() -> {
                    try {
                        serve(s.getInputStream(), s.getOutputStream(), "tls", s);
                    } catch (IOException e) {
                        closeQuietly(s);
                    }
                });
            }
        });
    }

    /** What the fake knows about one connection. */
    private static final class Session {
        final int id;
        final String transport;
        SecretKeySpec key;
        long nextSeq = 1;

        Session(int id, String transport) {
            this.id = id;
            this.transport = transport;
        }
    }

    private void serve(InputStream rawIn, OutputStream rawOut, String transport, Closeable conn) {
        Session s = new Session(connections.incrementAndGet(), transport);
        InputStream in = new BufferedInputStream(rawIn, 64 * 1024);
        OutputStream out = new BufferedOutputStream(rawOut, 64 * 1024);
        try {
            while (serveOne(in, out, s)) {
                out.flush();
            }
            out.flush();
        } catch (Exception e) {
            // The client hung up, or the test is closing the fake.
        } finally {
            closeQuietly(conn);
            open.remove(conn);
        }
    }

    /** Serves one request; false when the connection is to be closed. */
    private boolean serveOne(InputStream in, OutputStream out, Session s) throws Exception {
        Head h = readHead(in);
        if (h == null) {
            return false;
        }
        String api = h.path.contains("/v1/") ? h.path.substring(h.path.indexOf("/v1/")) : h.path;
        if (hello == Hello.NOT_STRATA) {
            Recorded r = new Recorded(s.transport, s.id, 0, h.method, h.path, h.contentType, readBody(in, h), null);
            requests.add(r);
            writeReply(out, responder.respond(r), null, 0, api);
            return true;
        }
        if (api.equals(TierHttp.HELLO_PATH)) {
            byte[] body = readBody(in, h);
            if (s.key != null) {
                return refuse(out, "a second hello on connection " + s.id);
            }
            return answerHello(out, body, s);
        }
        if (s.key == null) {
            return refuse(out, h.method + " " + h.path + " before any hello");
        }
        String[] auth = h.header("strata-auth") == null ? new String[0] : h.header("strata-auth").split(" ", -1);
        long seq;
        try {
            seq = auth.length == 2 ? Long.parseLong(auth[0]) : -1;
        } catch (NumberFormatException e) {
            seq = -1;
        }
        if (seq < 0) {
            return refuse(out, h.method + " " + h.path + " without a well-formed Strata-Auth: " + h.header("strata-auth"));
        }
        boolean upload = api.equals("/v1/copy-upload");
        if (upload && !SegmentUpload.CONTENT_TYPE.equals(h.contentType)) {
            return refuse(out, "an upload with Content-Type " + h.contentType);
        }
        byte[] signed = upload ? readUploadHeader(in) : readBody(in, h);
        if (seq != s.nextSeq) {
            return refuse(out, "seq " + seq + " where " + s.nextSeq + " was due on connection " + s.id);
        }
        if (!TierAuth.matches(TierAuth.requestMac(s.key, seq, h.method, api, signed), auth[1])) {
            return refuse(out, "a wrong request mac for " + h.method + " " + api);
        }
        s.nextSeq++;
        if (refuseRequests) {
            writeUnsigned401(out);
            return false;
        }
        String wanted = upload ? SegmentUpload.CONTENT_TYPE : h.method.equals("GET") ? null : "application/json";
        if (!Objects.equals(wanted, h.contentType)) {
            violations.add(h.method + " " + api + " with Content-Type " + h.contentType);
            writeReply(out, Reply.of(415, "unsupported content type"), s.key, seq, api);
            return true;
        }
        Upload up = null;
        if (upload) {
            up = readUpload(in, h, signed, s.key, seq);
            if (up == null) {
                writeReply(out, Reply.of(400, "bad upload"), s.key, seq, api);
                return false;
            }
        }
        Recorded r = new Recorded(s.transport, s.id, seq, h.method, h.path, h.contentType, signed, up);
        requests.add(r);
        writeReply(out, responder.respond(r), s.key, seq, api);
        return true;
    }

    private boolean answerHello(OutputStream out, byte[] body, Session s) throws IOException {
        Object parsed = JsonReader.parse(new String(body, StandardCharsets.UTF_8));
        Map<?, ?> m = parsed instanceof Map ? (Map<?, ?>) parsed : Map.of();
        Object cn = m.get("client_nonce");
        if (!BigDecimal.ONE.equals(m.get("version")) || !(cn instanceof String) || !TierAuth.isNonce((String) cn)
                || m.size() != 2) {
            violations.add("a malformed hello: " + new String(body, StandardCharsets.UTF_8));
            writeUnsigned401(out);
            return false;
        }
        hellos.add(s.transport);
        String clientNonce = (String) cn;
        String serverNonce = TierAuth.newNonce();
        String named = socketNamed;
        String proof = TierAuth.proof(secret, clientNonce, serverNonce,
            hello == Hello.SOCKET_NOT_IN_PROOF || named == null ? "" : named);
        if (hello == Hello.WRONG_PROOF) {
            proof = flipLast(proof);
        }
        s.key = TierAuth.sessionKey(secret, clientNonce, serverNonce);
        byte[] answer = ("{\"version\":1,\"server_nonce\":\"" + serverNonce + "\",\"socket\":"
            + (named == null ? "null" : JsonWriter.quote(named)) + ",\"proof\":\"" + proof + "\"}")
            .getBytes(StandardCharsets.UTF_8);
        out.write(("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " + answer.length
            + "\r\n\r\n").getBytes(StandardCharsets.US_ASCII));
        out.write(answer);
        return true;
    }

    /** Records a protocol violation and answers as strata tier does: 401, unsigned, connection closed. */
    private boolean refuse(OutputStream out, String what) throws IOException {
        violations.add(what);
        writeUnsigned401(out);
        return false;
    }

    private static void writeUnsigned401(OutputStream out) throws IOException {
        byte[] body = "credentials refused".getBytes(StandardCharsets.US_ASCII);
        out.write(("HTTP/1.1 401 Unauthorized\r\nContent-Length: " + body.length + "\r\nConnection: close\r\n\r\n")
            .getBytes(StandardCharsets.US_ASCII));
        out.write(body);
    }

    private static byte[] readUploadHeader(InputStream in) throws IOException {
        byte[] n = readExactly(in, 4);
        int len = ByteBuffer.wrap(n).getInt();
        if (len < 0 || len > 1024 * 1024) {
            throw new IOException("upload header of " + len + " bytes");
        }
        return readExactly(in, len);
    }

    /** The files and tag of an upload after its header; {@code null} (and a violation) when wrong. */
    private Upload readUpload(InputStream in, Head h, byte[] header, SecretKeySpec key, long seq) throws IOException {
        Map<?, ?> json = (Map<?, ?>) JsonReader.parse(new String(header, StandardCharsets.UTF_8));
        Map<?, ?> sizes = (Map<?, ?>) json.get("sizes");
        Map<?, ?> segment = (Map<?, ?>) json.get("segment");
        if (sizes == null || segment == null || !(json.get("leader_epoch_index") instanceof String) || json.size() != 3) {
            violations.add("an upload header without segment, sizes and leader_epoch_index: " + json);
            return null;
        }
        Map<String, Long> want = new LinkedHashMap<>();
        long sum = 0;
        for (String name : List.of("offset_index", "time_index", "transaction_index", "producer_snapshot", "log")) {
            Object v = sizes.get(name);
            if (v == null && name.equals("transaction_index") && sizes.containsKey(name)) {
                continue;
            }
            long n = ((BigDecimal) v).longValueExact();
            want.put(name, n);
            sum += n;
        }
        if (sizes.size() != 5) {
            violations.add("upload sizes with other members: " + sizes);
            return null;
        }
        if (want.get("log") != ((BigDecimal) segment.get("segment_size_bytes")).longValueExact()) {
            violations.add("sizes.log " + want.get("log") + " is not segment_size_bytes");
            return null;
        }
        long expected = 4 + header.length + sum + TierAuth.TAG_BYTES;
        if (h.contentLength != expected) {
            violations.add("upload Content-Length " + h.contentLength + " where the sizes make " + expected);
            return null;
        }
        Runnable hook = onUploadHeader;
        if (hook != null) {
            hook.run();
        }
        Mac tag = TierAuth.uploadTag(key, seq);
        Map<String, byte[]> files = new LinkedHashMap<>();
        for (Map.Entry<String, Long> e : want.entrySet()) {
            byte[] b = in.readNBytes(Math.toIntExact(e.getValue()));
            if (b.length < e.getValue()) {
                violations.add("the upload ended in " + e.getKey() + " after " + b.length + " of " + e.getValue() + " bytes");
                return null;
            }
            tag.update(b);
            files.put(e.getKey(), b);
        }
        byte[] got = in.readNBytes(TierAuth.TAG_BYTES);
        if (!MessageDigest.isEqual(tag.doFinal(), got)) {
            violations.add("a wrong upload tag");
            return null;
        }
        return new Upload(h.contentLength, files);
    }

    private void writeReply(OutputStream out, Reply r, SecretKeySpec key, long seq, String api) throws Exception {
        boolean streamed = api.equals(TierHttp.FETCH_PATH) && r.status == 200 && !r.chunked && r.contentType == null;
        StringBuilder head = new StringBuilder("HTTP/1.1 ").append(r.status).append(" X\r\n");
        if (r.contentType != null) {
            head.append("Content-Type: ").append(r.contentType).append("\r\n");
        }
        if (r.chunked) {
            head.append("Transfer-Encoding: chunked\r\n");
        } else if (r.status != 204) {
            head.append("Content-Length: ").append(r.length).append("\r\n");
        }
        if (key != null && signature != Signature.MISSING) {
            String digest = streamed ? TierAuth.streamDigest(r.length) : TierAuth.bodyDigest(r.body);
            int status = r.status;
            long signedSeq = seq;
            switch (signature) {
                case OTHER_BODY:
                    digest = streamed ? TierAuth.streamDigest(r.length + 1) : TierAuth.bodyDigest(concat(r.body, "x"));
                    break;
                case OTHER_STATUS:
                    status = status == 200 ? 500 : 200;
                    break;
                case OTHER_SEQ:
                    signedSeq = seq + 1;
                    break;
                default:
                    break;
            }
            String mac = TierAuth.responseMac(key, signedSeq, status, digest);
            head.append("Strata-Auth: ").append(signature == Signature.TAMPERED ? flipLast(mac) : mac).append("\r\n");
        }
        head.append("\r\n");
        out.write(head.toString().getBytes(StandardCharsets.US_ASCII));
        if (r.writer != null) {
            out.flush();
            r.writer.write(out);
        } else if (r.chunked) {
            for (int off = 0; off < r.body.length; off += 1000) {
                int n = Math.min(1000, r.body.length - off);
                out.write((Integer.toHexString(n) + "\r\n").getBytes(StandardCharsets.US_ASCII));
                out.write(r.body, off, n);
                out.write("\r\n".getBytes(StandardCharsets.US_ASCII));
            }
            out.write("0\r\n\r\n".getBytes(StandardCharsets.US_ASCII));
        } else {
            out.write(r.body);
        }
        out.flush();
    }

    private static byte[] concat(byte[] a, String b) {
        ByteArrayOutputStream o = new ByteArrayOutputStream();
        o.writeBytes(a);
        o.writeBytes(b.getBytes(StandardCharsets.UTF_8));
        return o.toByteArray();
    }

    private static String flipLast(String hex) {
        char last = hex.charAt(hex.length() - 1);
        return hex.substring(0, hex.length() - 1) + (last == '0' ? '1' : '0');
    }

    // ---------------------------------------------------------------------------- HTTP parsing

    private static final class Head {
        final String method;
        final String path;
        final Map<String, String> headers;
        final String contentType;
        final long contentLength;

        Head(String method, String path, Map<String, String> headers) {
            this.method = method;
            this.path = path;
            this.headers = headers;
            this.contentType = headers.get("content-type");
            this.contentLength = headers.containsKey("content-length") ? Long.parseLong(headers.get("content-length")) : 0;
        }

        String header(String name) {
            return headers.get(name);
        }
    }

    /** The next request's head, or {@code null} when the client closed the connection between requests. */
    private static Head readHead(InputStream in) throws IOException {
        String requestLine = readLine(in);
        if (requestLine == null) {
            return null;
        }
        String[] parts = requestLine.split(" ");
        if (parts.length != 3 || !parts[2].equals("HTTP/1.1")) {
            throw new IOException("bad request line: " + requestLine);
        }
        Map<String, String> headers = new LinkedHashMap<>();
        while (true) {
            String line = readLine(in);
            if (line == null) {
                throw new EOFException("the client closed the connection in a request head");
            }
            if (line.isEmpty()) {
                break;
            }
            int colon = line.indexOf(':');
            String name = line.substring(0, colon).trim().toLowerCase(Locale.ROOT);
            if (headers.put(name, line.substring(colon + 1).trim()) != null) {
                throw new IOException("repeated header " + name);
            }
        }
        return new Head(parts[0], parts[1], headers);
    }

    private static String readLine(InputStream in) throws IOException {
        StringBuilder sb = new StringBuilder();
        while (true) {
            int b = in.read();
            if (b < 0) {
                if (sb.length() == 0) {
                    return null;
                }
                throw new EOFException("the client closed the connection in a line");
            }
            if (b == '\n') {
                if (sb.length() == 0 || sb.charAt(sb.length() - 1) != '\r') {
                    throw new IOException("a line not ended by CRLF");
                }
                sb.setLength(sb.length() - 1);
                return sb.toString();
            }
            sb.append((char) b);
        }
    }

    private static byte[] readBody(InputStream in, Head h) throws IOException {
        return readExactly(in, Math.toIntExact(h.contentLength));
    }

    private static byte[] readExactly(InputStream in, int n) throws IOException {
        byte[] b = in.readNBytes(n);
        if (b.length < n) {
            throw new EOFException("the client sent " + b.length + " of " + n + " body bytes");
        }
        return b;
    }

    private static void closeQuietly(Closeable c) {
        try {
            c.close();
        } catch (IOException ignored) {
            // closing anyway
        }
    }

    @Override
    public void close() {
        for (Closeable l : listeners) {
            closeQuietly(l);
        }
        for (Closeable c : new ArrayList<>(open)) {
            closeQuietly(c);
        }
        pool.shutdownNow();
        try {
            pool.awaitTermination(5, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        for (Path p : socketFiles) {
            try {
                Files.deleteIfExists(p);
            } catch (IOException ignored) {
                // a temp dir is removed by the test anyway
            }
        }
    }
}
