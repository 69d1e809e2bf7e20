package io.strata.rsm;

import org.junit.jupiter.api.Test;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import java.nio.charset.StandardCharsets;
import java.util.HashSet;
import java.util.Set;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The README's test vectors ("Authentication (protocol version 1)"), which strata tier checks too. */
class TierAuthTest {
    static final SecretKeySpec K = TierAuth.key("0123456789abcdef0123456789abcdef-test-secret".getBytes(StandardCharsets.UTF_8));
    static final String CLIENT_NONCE = "00".repeat(31) + "01";
    static final String SERVER_NONCE = "ff".repeat(31) + "fe";
    static final SecretKeySpec S = TierAuth.sessionKey(K, CLIENT_NONCE, SERVER_NONCE);

    @Test
    void proofWithASocket() {
        assertEquals("a944daf4be5952c8cc1fce27ba5dfa9b67625dd23536f3a706bf10123722d0db",
            TierAuth.proof(K, CLIENT_NONCE, SERVER_NONCE, "/run/strata-tier/tier.sock"));
    }

    @Test
    void proofWithoutASocket() {
        assertEquals("83ae2fa6017ca5a74c2ad8e4efd16d3d7fb237d720327954d2d92e7585d21a60",
            TierAuth.proof(K, CLIENT_NONCE, SERVER_NONCE, ""));
    }

    @Test
    void sessionKey() {
        assertEquals("c60e584e9a3fb815e5d4ffd13a684e8048462f642eeb4fd30e1531de1b934195", TierAuth.hex(S.getEncoded()));
    }

    @Test
    void requestMac() {
        assertEquals("3eb923d002a152e7d80a413b6480fac9de28e3975bc74030caceaaeceb4acb69",
            TierAuth.requestMac(S, 1, "POST", "/v1/fetch", "{\"segment\":{}}".getBytes(StandardCharsets.UTF_8)));
    }

    @Test
    void responseMacOfAnEmptyBody() {
        assertEquals("b2b62e7a3afcf0897e4756af3f7462d4a5d900533f6f28c0dd4c908bd35797b2",
            TierAuth.responseMac(S, 1, 200, TierAuth.bodyDigest(new byte[0])));
    }

    @Test
    void responseMacOfAStreamedBody() {
        assertEquals("79bf37e474ce7ab279aacd360a87fab16fa88648cce76ad2b4c65d472181e27c",
            TierAuth.responseMac(S, 2, 200, TierAuth.streamDigest(1048576)));
    }

    @Test
    void uploadTag() {
        Mac tag = TierAuth.uploadTag(S, 3);
        tag.update("abc".getBytes(StandardCharsets.UTF_8));
        assertEquals("df05c93f8aeb883a49be4e88c8278ac9440471e544ec1df43a327ccff1b3c93d", TierAuth.hex(tag.doFinal()));
    }

    @Test
    void noncesAreFreshLowercaseHex() {
        Set<String> seen = new HashSet<>();
        for (int i = 0; i < 100; i++) {
            String n = TierAuth.newNonce();
            assertTrue(TierAuth.isNonce(n), n);
            assertTrue(seen.add(n), "nonce repeated: " + n);
        }
        assertFalse(TierAuth.isNonce("AB".repeat(32)), "upper case is not the protocol's hex");
        assertFalse(TierAuth.isNonce("ab".repeat(31)), "31 bytes");
        assertFalse(TierAuth.isNonce("ab".repeat(33)), "33 bytes");
    }

    @Test
    void matchesIsExact() {
        String mac = TierAuth.responseMac(S, 1, 200, TierAuth.bodyDigest(new byte[0]));
        assertTrue(TierAuth.matches(mac, mac));
        assertFalse(TierAuth.matches(mac, mac.toUpperCase()));
        assertFalse(TierAuth.matches(mac, mac.substring(1)));
        assertFalse(TierAuth.matches(mac, mac + "0"));
        assertFalse(TierAuth.matches(mac, null));
    }
}
