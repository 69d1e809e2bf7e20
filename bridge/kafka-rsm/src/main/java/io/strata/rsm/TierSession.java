package io.strata.rsm;

import javax.crypto.spec.SecretKeySpec;

import java.io.IOException;
import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.Map;

/**
 * The steps of strata tier's authentication on a connection (README, "Authentication"): the hello,
 * which proves that whoever answers holds the secret and gives the connection its session key,
 * then every request signed with that key and a per-connection {@code seq}, and every response's
 * signature checked before its status or body are used. The values are {@link TierAuth}'s.
 */
final class TierSession {
    /** Largest hello answer accepted (a small JSON object). */
    static final int HELLO_CAP = 64 * 1024;

    private static final byte[] EMPTY = new byte[0];

    private final SecretKeySpec secret;
    /** Path prefix of the endpoint, no trailing slash ("" for none). */
    private final String basePath;
    private final String hostHeader;
    /** The hello is bounded by the connect timeout: it is part of setting a connection up. */
    private final int helloTimeoutMs;

    TierSession(SecretKeySpec secret, String basePath, String hostHeader, int helloTimeoutMs) {
        this.secret = secret;
        this.basePath = basePath;
        this.hostHeader = hostHeader;
        this.helloTimeoutMs = helloTimeoutMs;
    }

    /**
     * The hello on a new connection: nothing else is sent on it before it passed. Sets the
     * connection's session key and returns the Unix socket strata tier named under its proof
     * ("" for none).
     *
     * @throws AuthenticationException when whoever answered did not prove it holds the secret
     * @throws CredentialsRefusedException when strata tier refused the hello
     */
    String hello(TierConnection c) throws IOException {
        String clientNonce = TierAuth.newNonce();
        TierHttp.JsonBody body = new TierHttp.JsonBody(("{\"version\":" + TierAuth.VERSION + ",\"client_nonce\":\""
            + clientNonce + "\"}").getBytes(StandardCharsets.UTF_8));
        byte[] head = head("POST", TierHttp.HELLO_PATH, body, null);
        Http1.Raw r = c.exchange(out -> body.write(out, head, null, 0), helloTimeoutMs, raw -> false, HELLO_CAP);
        Hello answer = checkHello(r, clientNonce, c.peer);
        if (!r.reusable()) {
            throw new IOException(c.peer + " closed the connection after the hello");
        }
        c.session = TierAuth.sessionKey(secret, clientNonce, answer.serverNonce());
        return answer.socket();
    }

    /** A hello answer that passed its checks: strata tier's nonce, and the socket it named ("" for none). */
    record Hello(String serverNonce, String socket) {
    }

    /** Checks a hello answer from {@code peer}: its status, version, nonce and proof. */
    Hello checkHello(Http1.Raw r, String clientNonce, String peer) throws IOException {
        if (r.status == 401) {
            throw new CredentialsRefusedException("HTTP 401 to its hello" + printable(r.body));
        }
        if (r.status != 200) {
            throw new AuthenticationException(peer + " answered the hello with HTTP " + r.status
                + " (is it a strata tier that speaks protocol version " + TierAuth.VERSION + "?)");
        }
        Object parsed;
        try {
            parsed = JsonReader.parse(new String(r.body, StandardCharsets.UTF_8));
        } catch (IllegalArgumentException e) {
            throw new AuthenticationException(peer + " answered the hello with a body that is not JSON");
        }
        Map<?, ?> m = parsed instanceof Map ? (Map<?, ?>) parsed : Map.of();
        Object version = m.get("version");
        Object serverNonce = m.get("server_nonce");
        Object named = m.get("socket");
        Object proof = m.get("proof");
        if (!(version instanceof BigDecimal) || ((BigDecimal) version).compareTo(BigDecimal.valueOf(TierAuth.VERSION)) != 0) {
            throw new AuthenticationException(peer + " answered the hello without protocol version "
                + TierAuth.VERSION);
        }
        if (!(serverNonce instanceof String) || !TierAuth.isNonce((String) serverNonce)
                || !(proof instanceof String) || !(named == null || named instanceof String)) {
            throw new AuthenticationException(peer + " answered the hello without a well-formed server_nonce,"
                + " socket and proof");
        }
        String socketNamed = named == null ? "" : (String) named;
        String expected = TierAuth.proof(secret, clientNonce, (String) serverNonce, socketNamed);
        if (!TierAuth.matches(expected, (String) proof)) {
            throw new AuthenticationException("the hello proof of " + peer + " is wrong: it does not hold the"
                + " bridge's secret (check that strata.secret.file holds the same secret as strata's"
                + " tier.secret_file, and that nothing else listens there)");
        }
        return new Hello((String) serverNonce, socketNamed);
    }

    /**
     * One signed exchange on a connection that passed the hello; the response returned passed its
     * signature check. Its body is read whole, except a {@code 200} answer to {@code /v1/fetch}
     * with the segment's bytes (signed over its length): that one is left in the socket.
     * The caller closes {@code c} on failure.
     *
     * @throws AuthenticationException when the answer's signature is missing or wrong
     * @throws CredentialsRefusedException when strata tier refused the request's signature
     */
    Http1.Raw exchange(TierConnection c, String method, String path, TierHttp.RequestBody body, long timeoutMs,
            int cap) throws IOException {
        long seq = ++c.seq;
        String mac = TierAuth.requestMac(c.session, seq, method, path, body == null ? EMPTY : body.signed());
        byte[] head = head(method, path, body, seq + " " + mac);
        boolean fetch = path.equals(TierHttp.FETCH_PATH);
        Http1.Raw r = c.exchange(out -> {
            if (body == null) {
                out.write(head);
            } else {
                body.write(out, head, c.session, seq);
            }
        }, timeoutMs, raw -> fetch && raw.status == 200 && !TierHttp.HANDOFF_TYPE.equals(raw.contentType), cap);
        checkResponse(c.session, seq, method, path, r);
        return r;
    }

    /** Checks the signature of the answer to request {@code seq}; nothing of it is used before. */
    static void checkResponse(SecretKeySpec session, long seq, String method, String path, Http1.Raw r)
            throws IOException {
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
        if (r.authRepeated || !TierAuth.matches(TierAuth.responseMac(session, seq, r.status, digest), r.auth)) {
            throw new AuthenticationException("its answer to " + method + " " + path + " has a wrong Strata-Auth"
                + " signature");
        }
    }

    private byte[] head(String method, String path, TierHttp.RequestBody body, String auth) {
        return Http1.head(method, basePath + path, hostHeader, body, auth);
    }

    /** An unauthenticated body for a message: short, on one line. */
    private static String printable(byte[] body) {
        if (body == null || body.length == 0) {
            return "";
        }
        String s = new String(body, 0, Math.min(body.length, 200), StandardCharsets.UTF_8).strip();
        return s.isEmpty() ? "" : " (" + s.replaceAll("\\p{Cntrl}", " ") + ")";
    }
}
