package io.strata.rsm;

import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.io.InputStream;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import java.util.stream.Collectors;

import static io.strata.rsm.StrataRemoteStorageManagerTest.segment;
import static io.strata.rsm.StrataRemoteStorageManagerTest.segmentData;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The handshake, request signing and response checks over TCP, against honest and dishonest fakes. */
class AuthenticationTest extends FakeTierTest {

    @FunctionalInterface
    interface Call {
        void on(StrataRemoteStorageManager rsm) throws Exception;
    }

    /** One call of each kind the broker makes, each reading its whole result. */
    static Map<String, Call> calls() {
        Map<String, Call> m = new LinkedHashMap<>();
        m.put("copy", r -> r.copyLogSegmentData(segment(), segmentData(Path.of("/d"), false, ByteBuffer.allocate(0))));
        m.put("fetch", r -> {
            try (InputStream in = r.fetchLogSegment(segment(), 0)) {
                in.readAllBytes();
            }
        });
        m.put("fetch-index", r -> r.fetchIndex(segment(), IndexType.OFFSET).readAllBytes());
        m.put("delete", r -> r.deleteLogSegmentData(segment()));
        return m;
    }

    /** Answers that would make each call succeed, with a result the test can recognise. */
    static FakeTier.Reply plausible(FakeTier.Recorded r) {
        switch (r.path) {
            case "/v1/copy":
                return FakeTier.Reply.of(200, "{\"custom_metadata\":\"AQID\"}");
            case "/v1/fetch":
                return FakeTier.Reply.of(200, "forged segment bytes");
            case "/v1/fetch-index":
                return FakeTier.Reply.of(200, "forged index");
            case "/v1/delete":
                return FakeTier.Reply.of(204, "");
            default:
                return FakeTier.Reply.of(200, "{\"custom_metadata\":null}");
        }
    }

    /** Every call fails with "failed authentication"; returns the messages. */
    List<String> assertAllRefused(String endpoint) {
        return calls().entrySet().stream().map(c -> {
            RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> c.getValue().on(rsm), c.getKey());
            assertEquals(RemoteStorageException.class, e.getClass(), c.getKey());
            assertTrue(e.getMessage().startsWith("strata tier at " + endpoint + " failed authentication: "),
                c.getKey() + ": " + e.getMessage());
            assertInstanceOf(AuthenticationException.class, e.getCause(), c.getKey());
            return e.getMessage();
        }).collect(Collectors.toList());
    }

    static List<Long> seqs(FakeTier t) {
        return t.requests.stream().map(r -> r.seq).collect(Collectors.toList());
    }

    static List<Integer> connections(FakeTier t) {
        return t.requests.stream().map(r -> r.connection).collect(Collectors.toList());
    }

    // ------------------------------------------------------------------------- honest server

    @Test
    void everyRequestIsSignedAfterOneHello() throws Exception {
        tier.respond(r -> r.path.equals("/v1/health") ? FakeTier.Reply.of(200, "ok pid=1") : plausible(r));

        rsm.deleteLogSegmentData(segment());
        assertTrue(rsm.healthy());

        assertEquals(List.of("tcp"), tier.hellos);
        assertEquals(List.of(1L, 2L), seqs(tier));
        assertEquals("GET", tier.requests.get(1).method);
    }

    @Test
    void seqGrowsPerRequestOnAReusedConnectionAndRestartsOnANewOne() throws Exception {
        byte[] window = new byte[1 << 20];
        tier.respond(r -> r.path.equals("/v1/fetch") ? FakeTier.Reply.of(200, window) : plausible(r));

        rsm.deleteLogSegmentData(segment());
        assertArrayEquals("forged index".getBytes(StandardCharsets.UTF_8), rsm.fetchIndex(segment(), IndexType.OFFSET).readAllBytes());
        assertArrayEquals(new byte[] {1, 2, 3},
            rsm.copyLogSegmentData(segment(), segmentData(Path.of("/d"), false, ByteBuffer.allocate(0))).orElseThrow().value());
        // A fetch window abandoned early costs its connection ...
        try (InputStream in = rsm.fetchLogSegment(segment(), 0)) {
            assertEquals(10, in.readNBytes(10).length);
        }
        // ... so the next request runs a new hello and starts again at 1.
        rsm.deleteLogSegmentData(segment());

        assertEquals(List.of(1L, 2L, 3L, 4L, 1L), seqs(tier));
        List<Integer> conns = connections(tier);
        assertEquals(List.of(conns.get(0), conns.get(0), conns.get(0), conns.get(0)), conns.subList(0, 4));
        assertFalse(conns.get(4).equals(conns.get(0)));
        assertEquals(List.of("tcp", "tcp"), tier.hellos);
    }

    @Test
    void bufferedChunkedAnswerIsCheckedOverItsBytes() throws Exception {
        byte[] index = new byte[5000];
        new Random(3).nextBytes(index);
        tier.respond(r -> FakeTier.Reply.chunked(200, index));

        assertArrayEquals(index, rsm.fetchIndex(segment(), IndexType.TIMESTAMP).readAllBytes());
    }

    // ------------------------------------------------------------------- dishonest servers

    @Test
    void wrongProofIsRefusedBeforeAnyRequest() {
        tier.hello = FakeTier.Hello.WRONG_PROOF;
        tier.respond(AuthenticationTest::plausible);

        for (String m : assertAllRefused(tier.endpoint())) {
            assertTrue(m.contains("the hello proof of 127.0.0.1:"), m);
            assertTrue(m.contains("check that strata.secret.file holds the same secret as strata's tier.secret_file"), m);
        }
        assertEquals(List.of(), tier.requests);
        assertEquals(4, tier.hellos.size(), "one hello per call, none retried");
    }

    @Test
    void serverWithAnotherSecretIsRefusedAndNeverSeesARequest() throws Exception {
        byte[] other = "another-secret-entirely-0123456789abcdef".getBytes(StandardCharsets.US_ASCII);
        try (FakeTier impostor = new FakeTier(other)) {
            impostor.respond(AuthenticationTest::plausible);
            rsm.configure(config(BridgeConfig.ENDPOINT, impostor.endpoint()));

            for (String m : assertAllRefused(impostor.endpoint())) {
                assertFalse(m.contains(new String(FakeTier.SECRET, StandardCharsets.US_ASCII)), m);
                assertFalse(m.contains(new String(other, StandardCharsets.US_ASCII)), m);
            }
            assertEquals(List.of(), impostor.requests);
        }
    }

    @Test
    void serverThatIsNotStrataGetsOnlyHellosAndItsAnswersAreIgnored() {
        tier.hello = FakeTier.Hello.NOT_STRATA;
        tier.respond(AuthenticationTest::plausible);

        assertAllRefused(tier.endpoint());
        assertEquals(4, tier.requests.size());
        assertTrue(tier.requests.stream().allMatch(r -> r.path.equals("/v1/hello")), "nothing but hellos was sent");
    }

    @ParameterizedTest
    @EnumSource(value = FakeTier.Signature.class, names = "VALID", mode = EnumSource.Mode.EXCLUDE)
    void answersWithoutAValidSignatureAreRefusedAndNotRetried(FakeTier.Signature signature) throws Exception {
        tier.respond(r -> r.path.equals("/v1/fetch")
            ? FakeTier.Reply.streamed(200, 20, out -> out.write("forged segment bytes".getBytes(StandardCharsets.UTF_8)))
            : plausible(r));
        rsm.deleteLogSegmentData(segment()); // leaves a pooled connection: the first call below reuses it
        tier.signature = signature;

        for (String m : assertAllRefused(tier.endpoint())) {
            assertTrue(m.contains(signature == FakeTier.Signature.MISSING ? " has no Strata-Auth signature (an unsigned"
                + " HTTP " : " has a wrong Strata-Auth signature"), m);
        }

        assertEquals(5, tier.requests.size(), "each call sent once");
        assertEquals(4, tier.hellos.size(), "a refused answer drops its connection, the reused one included");
        tier.signature = FakeTier.Signature.VALID;
        rsm.deleteLogSegmentData(segment());
        assertEquals(5, tier.hellos.size());
    }

    @Test
    void fetchAnswerWithoutContentLengthIsRefused() {
        tier.respond(r -> FakeTier.Reply.chunked(200, new byte[100]));

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.fetchLogSegment(segment(), 0));
        assertEquals("strata tier at " + tier.endpoint() + " failed authentication: its 200 answer to /v1/fetch has no"
            + " Content-Length, which its signature must cover", e.getMessage());
    }

    @Test
    void unsigned401ReportsRefusedCredentialsAndIsNotRetried() throws Exception {
        rsm.deleteLogSegmentData(segment());
        tier.refuseRequests = true;

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.deleteLogSegmentData(segment()));
        assertEquals("strata tier at " + tier.endpoint() + " refused the bridge's credentials: HTTP 401 to POST"
            + " /v1/delete (credentials refused); check that strata.secret.file holds the same secret as strata's"
            + " tier.secret_file", e.getMessage());
        assertInstanceOf(CredentialsRefusedException.class, e.getCause());
        assertEquals(List.of("tcp"), tier.hellos, "not retried on a new connection");
    }
}
