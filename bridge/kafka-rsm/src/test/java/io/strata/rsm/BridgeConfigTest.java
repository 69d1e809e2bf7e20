package io.strata.rsm;

import org.apache.kafka.common.config.ConfigException;

import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;
import org.junit.jupiter.params.provider.ValueSource;

import java.io.IOException;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.attribute.PosixFilePermissions;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class BridgeConfigTest {

    @TempDir
    static Path shared;
    static Path secretFile;

    @BeforeAll
    static void writeSecret() throws IOException {
        secretFile = FakeTier.writeSecret(shared, "tier.secret", FakeTier.SECRET);
    }

    /** The settings {@code keyValues} (pairs) with the test's secret file unless they name one. */
    static Map<String, Object> settings(Object... keyValues) {
        Map<String, Object> m = new HashMap<>();
        m.put(BridgeConfig.SECRET_FILE, secretFile.toString());
        for (int i = 0; i < keyValues.length; i += 2) {
            m.put((String) keyValues[i], keyValues[i + 1]);
        }
        return m;
    }

    static BridgeConfig parse(Object... keyValues) {
        return BridgeConfig.parse(settings(keyValues));
    }

    @Test
    void defaults() {
        BridgeConfig c = parse();
        assertEquals("http://127.0.0.1:9190", c.endpoint);
        assertEquals(Duration.ofMillis(2000), c.connectTimeout);
        assertEquals(Duration.ofMillis(300000), c.copyTimeout);
        assertEquals(Duration.ofMillis(30000), c.fetchTimeout);
        assertEquals(URI.create("http://127.0.0.1:9190/v1/copy"), c.uri("/v1/copy"));
        assertArrayEquals(FakeTier.SECRET, c.secret.getEncoded());
        assertNull(c.trust);
        assertNull(c.unixSocket);
        assertTrue(c.followSocket);
        assertFalse(c.copyUpload);
    }

    @Test
    void explicitValuesAsStringsOrNumbersAndUnknownKeysIgnored() {
        Map<String, Object> m = settings();
        m.put("strata.endpoint", "  https://tier.local:8443/base//  ");
        m.put("strata.connect.timeout.ms", " 150 ");
        m.put("strata.copy.timeout.ms", 600000);
        m.put("strata.fetch.timeout.ms", 45000L);
        m.put("broker.id", 3);
        m.put("something.else", new Object());
        BridgeConfig c = BridgeConfig.parse(m);
        assertEquals("https://tier.local:8443/base", c.endpoint);
        assertEquals(Duration.ofMillis(150), c.connectTimeout);
        assertEquals(Duration.ofMillis(600000), c.copyTimeout);
        assertEquals(Duration.ofMillis(45000), c.fetchTimeout);
        assertEquals(URI.create("https://tier.local:8443/base/v1/fetch"), c.uri("/v1/fetch"));
    }

    @Test
    void endpointTrailingSlashAndIpv6() {
        assertEquals("http://127.0.0.1:9190", parse("strata.endpoint", "http://127.0.0.1:9190/").endpoint);
        assertEquals("http://[::1]:9190", parse("strata.endpoint", "HTTP://[::1]:9190").endpoint);
    }

    static Stream<Arguments> badValues() {
        return Stream.of(
            Arguments.of("strata.endpoint", ""),
            Arguments.of("strata.endpoint", "   "),
            Arguments.of("strata.endpoint", "127.0.0.1:9190"),
            Arguments.of("strata.endpoint", "localhost"),
            Arguments.of("strata.endpoint", "ftp://127.0.0.1:9190"),
            Arguments.of("strata.endpoint", "http://"),
            Arguments.of("strata.endpoint", "http:///v1"),
            Arguments.of("strata.endpoint", "http://bad host:1"),
            Arguments.of("strata.endpoint", "http://127.0.0.1:9190/?x=1"),
            Arguments.of("strata.endpoint", "http://127.0.0.1:9190/#frag"),
            Arguments.of("strata.endpoint", 9190),
            Arguments.of("strata.connect.timeout.ms", "abc"),
            Arguments.of("strata.connect.timeout.ms", ""),
            Arguments.of("strata.connect.timeout.ms", "0"),
            Arguments.of("strata.connect.timeout.ms", "-1"),
            Arguments.of("strata.connect.timeout.ms", "1.5"),
            Arguments.of("strata.copy.timeout.ms", "99999999999999999999"),
            Arguments.of("strata.copy.timeout.ms", 0),
            Arguments.of("strata.copy.timeout.ms", 2.5d),
            Arguments.of("strata.fetch.timeout.ms", -30000L),
            Arguments.of("strata.fetch.timeout.ms", "30s"),
            Arguments.of("strata.fetch.timeout.ms", true),
            Arguments.of("strata.unix.socket", "relative/tier.sock"),
            Arguments.of("strata.unix.socket", ""),
            Arguments.of("strata.unix.socket", true),
            Arguments.of("strata.copy.mode", "fast"),
            Arguments.of("strata.copy.mode", ""),
            Arguments.of("strata.secret.file", ""),
            Arguments.of("strata.secret.file", 5));
    }

    @ParameterizedTest
    @MethodSource("badValues")
    void badValuesAreRejectedNamingTheKey(String key, Object value) {
        ConfigException e = assertThrows(ConfigException.class, () -> parse(key, value));
        assertTrue(e.getMessage().contains("for configuration " + key), e.getMessage());
        assertTrue(e.getMessage().contains(String.valueOf(value)), e.getMessage());
        assertTrue(e instanceof RuntimeException);
    }

    // ------------------------------------------------------------------------- endpoint rule

    @ParameterizedTest
    @ValueSource(strings = {"http://10.0.0.1:9190", "http://tier.example:9190", "http://0.0.0.0:9190",
        "http://[::2]:9190", "http://127.0.0.1.example:9190", "http://128.0.0.1:9190",
        "http://localhost.example:9190"})
    void plainHttpToAnotherHostIsRefused(String endpoint) {
        ConfigException e = assertThrows(ConfigException.class, () -> parse(BridgeConfig.ENDPOINT, endpoint));
        assertTrue(e.getMessage().startsWith("Invalid value " + endpoint + " for configuration strata.endpoint: plain"
            + " http is only allowed to a loopback address"), e.getMessage());
        assertTrue(e.getMessage().contains("use https"), e.getMessage());
    }

    @ParameterizedTest
    @ValueSource(strings = {"http://127.0.0.1:9190", "http://127.8.9.10:1", "http://localhost:9190",
        "http://LOCALHOST:9190", "http://[::1]:9190", "https://tier.example:8443", "https://10.0.0.1"})
    void plainHttpToLoopbackAndHttpsToAnyHostAreAccepted(String endpoint) {
        assertEquals(endpoint, parse(BridgeConfig.ENDPOINT, endpoint).endpoint);
    }

    // ------------------------------------------------------------------- socket and copy mode

    @Test
    void unixSocketSetting() {
        BridgeConfig fixed = parse(BridgeConfig.UNIX_SOCKET, " /run/strata-tier/tier.sock ");
        assertEquals(Path.of("/run/strata-tier/tier.sock"), fixed.unixSocket);
        assertFalse(fixed.followSocket);
        BridgeConfig off = parse(BridgeConfig.UNIX_SOCKET, "OFF");
        assertNull(off.unixSocket);
        assertFalse(off.followSocket);
        assertTrue(parse(BridgeConfig.UNIX_SOCKET, "auto").followSocket);
        assertFalse(parse(BridgeConfig.ENDPOINT, "https://127.0.0.1:8443").followSocket, "never away from TLS");
    }

    static Stream<Arguments> copyModes() {
        return Stream.of(
            Arguments.of("http://127.0.0.1:9190", "auto", null, false),
            Arguments.of("http://[::1]:9190", null, null, false),
            Arguments.of("https://localhost:8443", "auto", null, false),
            Arguments.of("https://127.0.0.1:8443", "auto", null, false),
            Arguments.of("https://tier.example:8443", "auto", null, true),
            Arguments.of("https://10.1.2.3:8443", null, null, true),
            Arguments.of("https://tier.example:8443", "auto", "/run/strata-tier/tier.sock", false),
            Arguments.of("https://tier.example:8443", "paths", null, false),
            Arguments.of("http://127.0.0.1:9190", "upload", null, true),
            Arguments.of("http://127.0.0.1:9190", " Upload ", "/run/strata-tier/tier.sock", true));
    }

    @ParameterizedTest
    @MethodSource("copyModes")
    void copyModeAutoUploadsOnlyToAnotherHost(String endpoint, String mode, String socket, boolean upload) {
        Map<String, Object> m = settings(BridgeConfig.ENDPOINT, endpoint);
        if (mode != null) {
            m.put(BridgeConfig.COPY_MODE, mode);
        }
        if (socket != null) {
            m.put(BridgeConfig.UNIX_SOCKET, socket);
        }
        BridgeConfig c = BridgeConfig.parse(m);
        assertEquals(upload, c.copyUpload);
        assertTrue(c.toString().contains("strata.copy.mode=" + (mode == null ? "auto" : mode.trim().toLowerCase(java.util.Locale.ROOT))
            + " (" + (upload ? "upload" : "paths") + ")"), c.toString());
    }

    // ------------------------------------------------------------------------- secret file

    static final String SECRET_TEXT = "s3cr3t-value-that-must-never-be-printed-0123456789";

    Path secret(String name, String content, String mode) throws IOException {
        Path p = shared.resolve(name);
        Files.writeString(p, content, StandardCharsets.UTF_8);
        Files.setPosixFilePermissions(p, PosixFilePermissions.fromString(mode));
        return p;
    }

    static ConfigException secretRefused(Path p) {
        ConfigException e = assertThrows(ConfigException.class, () -> parse(BridgeConfig.SECRET_FILE, p.toString()));
        assertTrue(e.getMessage().startsWith("Invalid value " + p + " for configuration strata.secret.file: "), e.getMessage());
        assertFalse(e.getMessage().contains(SECRET_TEXT.substring(0, 12)), "the secret leaked: " + e.getMessage());
        return e;
    }

    @Test
    void theSecretFileIsRequired() {
        Map<String, Object> m = settings();
        m.remove(BridgeConfig.SECRET_FILE);
        ConfigException e = assertThrows(ConfigException.class, () -> BridgeConfig.parse(m));
        assertTrue(e.getMessage().startsWith("Invalid value null for configuration strata.secret.file: is required"),
            e.getMessage());
        assertThrows(ConfigException.class, () -> BridgeConfig.parse(null));
    }

    @Test
    void aMissingSecretFileIsNamedWithTheFix() {
        Path p = shared.resolve("no-such.secret");
        assertTrue(secretRefused(p).getMessage().endsWith("the file does not exist: copy strata's tier.secret_file"
            + " there, then chmod 0640 " + p));
    }

    @ParameterizedTest
    @ValueSource(strings = {"rw-r--r--", "rw-rw----", "rw----r--", "rw-----w-", "rw------x", "rwxrwxrwx"})
    void aSecretFileOthersCanUseOrTheGroupCanWriteIsRefused(String mode) throws IOException {
        Path p = secret("open-" + mode + ".secret", SECRET_TEXT + "\n", mode);
        String octal = String.format("0%03o", PosixFilePermissions.fromString(mode).stream()
            .mapToInt(x -> 1 << (8 - x.ordinal())).sum());
        assertTrue(secretRefused(p).getMessage().endsWith("mode " + octal + " lets other users read or change the"
            + " secret: chmod 0640 " + p + " (or 0600)"), octal);
    }

    @ParameterizedTest
    @ValueSource(strings = {"rw-------", "rw-r-----", "r--------", "r--r-----"})
    void aSecretFileOfModes0600Or0640IsReadTrimmed(String mode) throws IOException {
        Path p = secret("ok-" + mode + ".secret", " \t\r\n" + SECRET_TEXT + "\n\n", mode);
        BridgeConfig c = parse(BridgeConfig.SECRET_FILE, p.toString());
        assertArrayEquals(SECRET_TEXT.getBytes(StandardCharsets.US_ASCII), c.secret.getEncoded());
        assertTrue(c.toString().contains("strata.secret.file=" + p), c.toString());
        assertFalse(c.toString().contains(SECRET_TEXT.substring(0, 12)), c.toString());
        assertFalse(String.valueOf(c.secret).contains(SECRET_TEXT.substring(0, 12)));
    }

    @Test
    void aSecretShorterThan32BytesOnceTrimmedIsRefused() throws IOException {
        String shortSecret = SECRET_TEXT.substring(0, 31);
        Path p = secret("short.secret", "  " + shortSecret + " \n", "rw-------");
        String m = secretRefused(p).getMessage();
        assertTrue(m.contains("holds 31 bytes once surrounding whitespace is removed; at least 32 are needed"), m);
        assertFalse(m.contains(shortSecret), m);
        // Exactly 32 is enough; a vertical tab is not whitespace that is trimmed.
        Path ok = secret("32.secret", "\n" + SECRET_TEXT.substring(0, 32) + "\n", "rw-------");
        assertEquals(32, parse(BridgeConfig.SECRET_FILE, ok.toString()).secret.getEncoded().length);
        Path vt = secret("vt.secret", "\u000b" + shortSecret, "rw-------");
        assertEquals(32, parse(BridgeConfig.SECRET_FILE, vt.toString()).secret.getEncoded().length);
    }

    @Test
    void aSecretFileThatIsNotARegularFileIsRefused() throws IOException {
        Path d = Files.createDirectories(shared.resolve("a-directory.secret"));
        Files.setPosixFilePermissions(d, PosixFilePermissions.fromString("rwx------"));
        assertTrue(secretRefused(d).getMessage().endsWith("is not a regular file: point it at the file holding the secret"));
    }

    // -------------------------------------------------------------------------- trust file

    @Test
    void aTrustFileIsOnlyForHttps() throws IOException {
        Path pem = Files.writeString(shared.resolve("unused.pem"), "");
        ConfigException e = assertThrows(ConfigException.class, () -> parse(BridgeConfig.TLS_TRUST_FILE, pem.toString()));
        assertTrue(e.getMessage().startsWith("Invalid value " + pem + " for configuration strata.tls.trust.file: is only"
            + " used with an https strata.endpoint"), e.getMessage());
    }

    @ParameterizedTest
    @ValueSource(strings = {"", "not a certificate\n",
        "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"})
    void aTrustFileWithoutCertificatesIsRefused(String content) throws IOException {
        Path pem = Files.writeString(shared.resolve("bad" + content.length() + ".pem"), content);
        ConfigException e = assertThrows(ConfigException.class, () -> parse(BridgeConfig.ENDPOINT, "https://tier.example",
            BridgeConfig.TLS_TRUST_FILE, pem.toString()));
        assertTrue(e.getMessage().startsWith("Invalid value " + pem + " for configuration strata.tls.trust.file: "),
            e.getMessage());
    }

    @Test
    void aMissingTrustFileIsRefused() {
        Path pem = shared.resolve("missing.pem");
        ConfigException e = assertThrows(ConfigException.class, () -> parse(BridgeConfig.ENDPOINT, "https://tier.example",
            BridgeConfig.TLS_TRUST_FILE, pem.toString()));
        assertTrue(e.getMessage().contains("strata.tls.trust.file: the file does not exist"), e.getMessage());
    }
}
