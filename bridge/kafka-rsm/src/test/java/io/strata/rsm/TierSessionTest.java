package io.strata.rsm;

import org.junit.jupiter.api.Test;

import javax.crypto.spec.SecretKeySpec;

import java.nio.charset.StandardCharsets;

import static io.strata.rsm.TierAuthTest.CLIENT_NONCE;
import static io.strata.rsm.TierAuthTest.K;
import static io.strata.rsm.TierAuthTest.S;
import static io.strata.rsm.TierAuthTest.SERVER_NONCE;
import static org.junit.jupiter.api.Assertions.assertDoesNotThrow;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The checks of hello answers and signed responses, on responses built by hand (no socket). */
class TierSessionTest {
    static final String SOCK = "/run/strata-tier/tier.sock";
    final TierSession session = new TierSession(K, "", "127.0.0.1:9190", 1000);

    static Http1.Raw raw(int status, String body) {
        Http1.Raw r = new Http1.Raw(status);
        r.body = body.getBytes(StandardCharsets.UTF_8);
        r.length = r.body.length;
        return r;
    }

    static Http1.Raw hello(String socketJson, String proof) {
        return raw(200, "{\"version\":1,\"server_nonce\":\"" + SERVER_NONCE + "\",\"socket\":" + socketJson
            + ",\"proof\":\"" + proof + "\"}");
    }

    @Test
    void aProvenHelloGivesTheServerNonceAndTheSocket() throws Exception {
        TierSession.Hello h = session.checkHello(hello("\"" + SOCK + "\"",
            TierAuth.proof(K, CLIENT_NONCE, SERVER_NONCE, SOCK)), CLIENT_NONCE, "peer");
        assertEquals(new TierSession.Hello(SERVER_NONCE, SOCK), h);
        h = session.checkHello(hello("null", TierAuth.proof(K, CLIENT_NONCE, SERVER_NONCE, "")), CLIENT_NONCE, "peer");
        assertEquals("", h.socket());
    }

    @Test
    void aHelloIsRefusedUnlessProven() {
        SecretKeySpec other = TierAuth.key("another-secret-another-secret-another".getBytes(StandardCharsets.UTF_8));
        AuthenticationException wrong = assertThrows(AuthenticationException.class, () -> session.checkHello(
            hello("null", TierAuth.proof(other, CLIENT_NONCE, SERVER_NONCE, "")), CLIENT_NONCE, "peer"));
        assertTrue(wrong.getMessage().contains("strata.secret.file"), wrong.getMessage());
        // The proof covers the socket: one named after the proof was made is refused.
        assertThrows(AuthenticationException.class, () -> session.checkHello(
            hello("\"/tmp/elsewhere.sock\"", TierAuth.proof(K, CLIENT_NONCE, SERVER_NONCE, SOCK)), CLIENT_NONCE, "peer"));
        assertThrows(AuthenticationException.class, () -> session.checkHello(
            raw(200, "{\"version\":2}"), CLIENT_NONCE, "peer"));
        assertThrows(AuthenticationException.class, () -> session.checkHello(
            raw(200, "{\"version\":1,\"server_nonce\":\"short\",\"proof\":\"x\"}"), CLIENT_NONCE, "peer"));
        assertThrows(AuthenticationException.class, () -> session.checkHello(raw(200, "not json"), CLIENT_NONCE, "peer"));
        assertThrows(AuthenticationException.class, () -> session.checkHello(raw(404, ""), CLIENT_NONCE, "peer"));
        assertThrows(CredentialsRefusedException.class, () -> session.checkHello(raw(401, "no"), CLIENT_NONCE, "peer"));
    }

    static Http1.Raw signed(int status, String body, long seq, int signedStatus) {
        Http1.Raw r = raw(status, body);
        r.auth = TierAuth.responseMac(S, seq, signedStatus, TierAuth.bodyDigest(r.body));
        return r;
    }

    @Test
    void aSignedAnswerPasses() {
        assertDoesNotThrow(() -> TierSession.checkResponse(S, 3, "POST", "/v1/delete", signed(404, "gone", 3, 404)));
        Http1.Raw live = new Http1.Raw(200);
        live.length = 5;
        live.auth = TierAuth.responseMac(S, 1, 200, TierAuth.streamDigest(5));
        assertDoesNotThrow(() -> TierSession.checkResponse(S, 1, "POST", TierHttp.FETCH_PATH, live));
    }

    @Test
    void anAnswerIsRefusedUnlessSignedForThisRequest() {
        assertThrows(AuthenticationException.class,
            () -> TierSession.checkResponse(S, 4, "POST", "/v1/delete", signed(200, "ok", 3, 200)), "another seq");
        assertThrows(AuthenticationException.class,
            () -> TierSession.checkResponse(S, 3, "POST", "/v1/delete", signed(200, "ok", 3, 404)), "another status");
        Http1.Raw twice = signed(200, "ok", 3, 200);
        twice.authRepeated = true;
        assertThrows(AuthenticationException.class, () -> TierSession.checkResponse(S, 3, "POST", "/v1/delete", twice));
        AuthenticationException unsigned = assertThrows(AuthenticationException.class,
            () -> TierSession.checkResponse(S, 3, "POST", "/v1/delete", raw(500, "oops")));
        assertTrue(unsigned.getMessage().contains("HTTP 500"), unsigned.getMessage());
        assertThrows(CredentialsRefusedException.class,
            () -> TierSession.checkResponse(S, 3, "POST", "/v1/delete", raw(401, "bad mac")));
        Http1.Raw chunkedLive = new Http1.Raw(200);
        chunkedLive.chunked = true;
        chunkedLive.auth = "anything";
        assertThrows(AuthenticationException.class,
            () -> TierSession.checkResponse(S, 1, "POST", TierHttp.FETCH_PATH, chunkedLive), "a live body needs a length");
    }
}
