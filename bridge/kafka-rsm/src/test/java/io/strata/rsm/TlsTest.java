package io.strata.rsm;

import org.apache.kafka.server.log.remote.storage.RemoteStorageException;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

import javax.net.ssl.KeyManagerFactory;
import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLHandshakeException;

import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.security.KeyStore;
import java.util.Base64;
import java.util.List;
import java.util.stream.Collectors;

import static io.strata.rsm.StrataRemoteStorageManagerTest.segment;
import static io.strata.rsm.StrataRemoteStorageManagerTest.segmentData;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/**
 * {@code https} with {@code strata.tls.trust.file}: certificates made at test time with the JDK's
 * keytool (none is checked in). {@code a} is for 127.0.0.1, {@code b} for another host name.
 */
class TlsTest extends FakeTierTest {
    static final char[] PASSWORD = "test-only".toCharArray();

    @TempDir
    static Path certs;
    static Path storeA;
    static Path storeB;
    static Path pemA;
    static Path pemB;

    @BeforeAll
    static void makeCertificates() throws Exception {
        Process a = keytool("a", "ip:127.0.0.1");
        Process b = keytool("b", "dns:elsewhere.invalid");
        storeA = finish(a, "a");
        storeB = finish(b, "b");
        pemA = pem(storeA);
        pemB = pem(storeB);
    }

    private static Process keytool(String name, String san) throws Exception {
        return new ProcessBuilder(System.getProperty("java.home") + "/bin/keytool", "-genkeypair", "-alias", "tier",
            "-keyalg", "EC", "-groupname", "secp256r1", "-dname", "CN=strata-tier-test-" + name, "-ext", "SAN=" + san,
            "-validity", "2", "-storetype", "PKCS12", "-keystore", certs.resolve(name + ".p12").toString(),
            "-storepass", new String(PASSWORD), "-keypass", new String(PASSWORD))
            .redirectErrorStream(true).start();
    }

    private static Path finish(Process p, String name) throws Exception {
        String output = new String(p.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
        assertEquals(0, p.waitFor(), output);
        return certs.resolve(name + ".p12");
    }

    private static KeyStore load(Path store) throws Exception {
        KeyStore ks = KeyStore.getInstance("PKCS12");
        try (InputStream in = Files.newInputStream(store)) {
            ks.load(in, PASSWORD);
        }
        return ks;
    }

    /** The keystore's certificate as a PEM file, what an operator would export from strata tier. */
    private static Path pem(Path store) throws Exception {
        byte[] der = load(store).getCertificate("tier").getEncoded();
        Path p = Path.of(store.toString().replace(".p12", ".pem"));
        Files.writeString(p, "-----BEGIN CERTIFICATE-----\n" + Base64.getMimeEncoder(64, "\n".getBytes(StandardCharsets.US_ASCII))
            .encodeToString(der) + "\n-----END CERTIFICATE-----\n");
        return p;
    }

    static FakeTier tlsTier(Path store) throws Exception {
        KeyManagerFactory kmf = KeyManagerFactory.getInstance(KeyManagerFactory.getDefaultAlgorithm());
        kmf.init(load(store), PASSWORD);
        SSLContext ctx = SSLContext.getInstance("TLS");
        ctx.init(kmf.getKeyManagers(), null, null);
        return FakeTier.tls(ctx);
    }

    static List<String> transports(FakeTier t) {
        return t.requests.stream().map(r -> r.transport).collect(Collectors.toList());
    }

    @Test
    void aPinnedCertificateIsTrustedAndTheProtocolRunsInsideTls() throws Exception {
        try (FakeTier tls = tlsTier(storeA)) {
            byte[] bytes = "segment bytes over tls".getBytes(StandardCharsets.UTF_8);
            tls.respond(r -> r.path.equals("/v1/fetch") ? FakeTier.Reply.of(200, bytes) : FakeTier.Reply.of(200, "{}"));
            rsm.configure(config(BridgeConfig.ENDPOINT, tls.endpoint(), BridgeConfig.TLS_TRUST_FILE, pemA.toString()));

            rsm.copyLogSegmentData(segment(), segmentData(Path.of("/d"), false, ByteBuffer.allocate(0)));
            try (InputStream in = rsm.fetchLogSegment(segment(), 0)) {
                assertArrayEquals(bytes, in.readAllBytes());
            }

            assertEquals(List.of("tls"), tls.hellos);
            assertEquals(List.of("tls", "tls"), transports(tls));
            assertEquals("/v1/copy", tls.requests.get(0).path, "copy.mode auto: 127.0.0.1 is this host");
            assertEquals(List.of(), tls.violations);
        }
    }

    @Test
    void anotherCertificateThanThePinnedOneIsRefused() throws Exception {
        try (FakeTier tls = tlsTier(storeA)) {
            rsm.configure(config(BridgeConfig.ENDPOINT, tls.endpoint(), BridgeConfig.TLS_TRUST_FILE, pemB.toString()));

            RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.deleteLogSegmentData(segment()));
            assertTrue(e.getMessage().startsWith("strata tier delete at " + tls.endpoint() + " failed: "), e.getMessage());
            assertInstanceOf(SSLHandshakeException.class, e.getCause());
            assertTrue(e.getCause().getMessage().startsWith("PKIX path building failed"), e.getCause().getMessage());
            assertEquals(List.of(), tls.hellos);
        }
    }

    @Test
    void thePinnedCertificateMustNameTheEndpointsHost() throws Exception {
        try (FakeTier tls = tlsTier(storeB)) {
            rsm.configure(config(BridgeConfig.ENDPOINT, tls.endpoint(), BridgeConfig.TLS_TRUST_FILE, pemB.toString()));

            RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.deleteLogSegmentData(segment()));
            assertInstanceOf(SSLHandshakeException.class, e.getCause());
            // Trusted, but issued for another name: refused by host name verification (the JDK's words).
            assertEquals("No subject alternative names matching IP address 127.0.0.1 found", e.getCause().getMessage());
            assertEquals(List.of(), tls.hellos);
        }
    }

    @Test
    void aSocketNamedOverHttpsIsNotFollowed() throws Exception {
        Path sock = tmp.resolve("tier.sock");
        try (FakeTier tls = tlsTier(storeA)) {
            tls.listenUnix(sock);
            tls.socketNamed = sock.toString();
            rsm.configure(config(BridgeConfig.ENDPOINT, tls.endpoint(), BridgeConfig.TLS_TRUST_FILE, pemA.toString()));

            rsm.deleteLogSegmentData(segment());
            rsm.deleteLogSegmentData(segment());

            assertEquals(List.of("tls", "tls"), transports(tls));
            assertNull(rsm.unixSocket());
        }
    }
}
