package io.strata.rsm;

import javax.crypto.Mac;
import javax.crypto.spec.SecretKeySpec;

import java.nio.charset.StandardCharsets;
import java.security.GeneralSecurityException;
import java.security.MessageDigest;
import java.security.SecureRandom;

/**
 * The values of strata tier's authentication protocol, version 1 (README, "Authentication"):
 * every text is HMAC-SHA256 over a label naming what it proves, so that no value computed for
 * one purpose is accepted for another. Keys are held as {@link SecretKeySpec}, whose
 * {@code toString} does not show the key.
 */
final class TierAuth {
    static final int VERSION = 1;
    /** Bytes of a nonce (sent as 64 hex digits) and of a mac or tag. */
    static final int NONCE_BYTES = 32;
    static final int TAG_BYTES = 32;

    private static final String ALGORITHM = "HmacSHA256";
    private static final String PREFIX = "strata-tier/" + VERSION + "/";
    private static final char[] HEX = "0123456789abcdef".toCharArray();
    private static final SecureRandom RANDOM = new SecureRandom();

    private TierAuth() {
    }

    static SecretKeySpec key(byte[] raw) {
        return new SecretKeySpec(raw, ALGORITHM);
    }

    /** A fresh nonce as lowercase hex. */
    static String newNonce() {
        byte[] b = new byte[NONCE_BYTES];
        RANDOM.nextBytes(b);
        return hex(b);
    }

    /** What strata tier answers a hello with: proves it knows {@code secret}; {@code socket} "" for none. */
    static String proof(SecretKeySpec secret, String clientNonce, String serverNonce, String socket) {
        return hex(mac(secret, "server\n" + clientNonce + "\n" + serverNonce + "\n" + socket));
    }

    /** The key of one connection's session. */
    static SecretKeySpec sessionKey(SecretKeySpec secret, String clientNonce, String serverNonce) {
        return key(mac(secret, "session\n" + clientNonce + "\n" + serverNonce));
    }

    /** The mac of a request's {@code Strata-Auth} header; {@code signed} is its body (an upload's JSON header). */
    static String requestMac(SecretKeySpec session, long seq, String method, String path, byte[] signed) {
        return hex(mac(session, "request\n" + seq + "\n" + method + "\n" + path + "\n" + bodyDigest(signed)));
    }

    /** The mac of a response's {@code Strata-Auth} header; {@code digest} from {@link #bodyDigest} or {@link #streamDigest}. */
    static String responseMac(SecretKeySpec session, long seq, int status, String digest) {
        return hex(mac(session, "response\n" + seq + "\n" + status + "\n" + digest));
    }

    static String bodyDigest(byte[] body) {
        try {
            return hex(MessageDigest.getInstance("SHA-256").digest(body));
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("the JVM has no SHA-256", e);
        }
    }

    /** The digest a streamed fetch body is signed with: its length, not its bytes. */
    static String streamDigest(long contentLength) {
        return "stream " + contentLength;
    }

    /** A mac ready for an upload's file bytes; {@code doFinal()} gives the 32-byte tag. */
    static Mac uploadTag(SecretKeySpec session, long seq) {
        Mac m = newMac(session);
        m.update((PREFIX + "upload\n" + seq + "\n").getBytes(StandardCharsets.UTF_8));
        return m;
    }

    /** Compares a received hex value with the expected one in time independent of where they differ. */
    static boolean matches(String expected, String received) {
        return received != null && MessageDigest.isEqual(
            expected.getBytes(StandardCharsets.US_ASCII), received.getBytes(StandardCharsets.US_ASCII));
    }

    /** Whether {@code s} is a nonce as the protocol writes it: 64 lowercase hex digits. */
    static boolean isNonce(String s) {
        if (s.length() != 2 * NONCE_BYTES) {
            return false;
        }
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (!(c >= '0' && c <= '9') && !(c >= 'a' && c <= 'f')) {
                return false;
            }
        }
        return true;
    }

    static String hex(byte[] b) {
        char[] out = new char[b.length * 2];
        for (int i = 0; i < b.length; i++) {
            out[2 * i] = HEX[(b[i] >> 4) & 0xf];
            out[2 * i + 1] = HEX[b[i] & 0xf];
        }
        return new String(out);
    }

    private static byte[] mac(SecretKeySpec key, String text) {
        return newMac(key).doFinal((PREFIX + text).getBytes(StandardCharsets.UTF_8));
    }

    private static Mac newMac(SecretKeySpec key) {
        try {
            Mac m = Mac.getInstance(ALGORITHM);
            m.init(key);
            return m;
        } catch (GeneralSecurityException e) {
            throw new IllegalStateException("the JVM has no " + ALGORITHM, e);
        }
    }
}
