package io.strata.rsm;

import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager.IndexType;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.stream.Collectors;

import static io.strata.rsm.StrataRemoteStorageManagerTest.segment;
import static io.strata.rsm.StrataRemoteStorageManagerTest.segmentData;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The move to strata tier's Unix socket: only on an authenticated hello, and the socket's own hello checked. */
class UnixSocketTest extends FakeTierTest {
    static final byte[] IMPOSTOR_SECRET = "an-impostor-does-not-know-the-secret-42".getBytes(StandardCharsets.US_ASCII);

    Path sock;

    @BeforeEach
    void socketPath() {
        sock = tmp.resolve("tier.sock");
    }

    static List<String> transports(FakeTier t) {
        return t.requests.stream().map(r -> r.transport).collect(Collectors.toList());
    }

    byte[] index() throws Exception {
        return rsm.fetchIndex(segment(), IndexType.OFFSET).readAllBytes();
    }

    @Test
    void followsTheSocketNamedInAnAuthenticatedHelloAndGreetsAgainThere() throws Exception {
        tier.listenUnix(sock);
        tier.socketNamed = sock.toString();

        rsm.deleteLogSegmentData(segment());
        assertEquals(sock, rsm.unixSocket());
        rsm.deleteLogSegmentData(segment());
        rsm.deleteLogSegmentData(segment());

        assertEquals(List.of("tcp", "unix", "unix"), transports(tier));
        assertEquals(List.of("tcp", "unix"), tier.hellos);
        assertEquals(List.of(1L, 1L, 2L), tier.requests.stream().map(r -> r.seq).collect(Collectors.toList()));
    }

    @Test
    void aFixedSocketPathIsUsedFromTheFirstConnection() throws Exception {
        tier.listenUnix(sock);
        rsm.configure(config(BridgeConfig.ENDPOINT, tier.endpoint(), BridgeConfig.UNIX_SOCKET, sock.toString()));

        rsm.copyLogSegmentData(segment(), segmentData(Path.of("/d"), false, ByteBuffer.allocate(0)));

        assertEquals(List.of("unix"), tier.hellos);
        assertEquals("/v1/copy", tier.only().path, "copy.mode auto sends paths over a Unix socket");
    }

    @ParameterizedTest
    @EnumSource(value = FakeTier.Hello.class, names = {"WRONG_PROOF", "SOCKET_NOT_IN_PROOF"})
    void aHelloNamingASocketWithoutAValidProofDoesNotMoveTheBridge(FakeTier.Hello hello) throws Exception {
        tier.listenUnix(sock);
        tier.socketNamed = sock.toString();
        tier.hello = hello;

        RemoteStorageException e = assertThrows(RemoteStorageException.class, () -> rsm.deleteLogSegmentData(segment()));
        assertTrue(e.getMessage().startsWith("strata tier at " + tier.endpoint() + " failed authentication: the hello"
            + " proof of 127.0.0.1:"), e.getMessage());
        assertNull(rsm.unixSocket());

        tier.hello = FakeTier.Hello.HONEST;
        tier.socketNamed = null;
        rsm.deleteLogSegmentData(segment());
        assertEquals(List.of("tcp"), transports(tier));
        assertEquals(List.of("tcp", "tcp"), tier.hellos);
    }

    @Test
    void anImpostorOnTheNamedSocketIsRefusedAndTcpIsUsedAgain() throws Exception {
        try (FakeTier impostor = FakeTier.unixOnly(sock, IMPOSTOR_SECRET)) {
            impostor.respond(r -> FakeTier.Reply.of(200, "forged"));
            tier.socketNamed = sock.toString();
            tier.respond(r -> FakeTier.Reply.of(200, "real"));

            assertArrayEquals("real".getBytes(StandardCharsets.UTF_8), index());
            RemoteStorageException e = assertThrows(RemoteStorageException.class, this::index);
            assertEquals("strata tier at " + tier.endpoint() + " failed authentication: the hello proof of the Unix"
                + " socket " + sock + " is wrong: it does not hold the bridge's secret (check that strata.secret.file"
                + " holds the same secret as strata's tier.secret_file, and that nothing else listens there)",
                e.getMessage());
            assertInstanceOf(AuthenticationException.class, e.getCause());
            // Later calls go back to TCP, where the proof checks (the socket is retried after 5 s).
            assertArrayEquals("real".getBytes(StandardCharsets.UTF_8), index());

            assertEquals(List.of("unix"), impostor.hellos);
            assertEquals(List.of(), impostor.requests);
            assertEquals(List.of("tcp", "tcp"), transports(tier));
        }
    }

    @Test
    void anImpostorOnAFixedSocketPathIsRefused() throws Exception {
        try (FakeTier impostor = FakeTier.unixOnly(sock, IMPOSTOR_SECRET)) {
            rsm.configure(config(BridgeConfig.ENDPOINT, tier.endpoint(), BridgeConfig.UNIX_SOCKET, sock.toString()));

            RemoteStorageException e = assertThrows(RemoteStorageException.class,
                () -> rsm.copyLogSegmentData(segment(), segmentData(Path.of("/d"), false, ByteBuffer.allocate(0))));
            assertTrue(e.getMessage().startsWith("strata tier at " + tier.endpoint() + " failed authentication: "),
                e.getMessage());
            assertEquals(List.of(), impostor.requests);
            assertEquals(List.of(), tier.hellos, "no fallback to TCP with a fixed socket");
        }
    }

    @Test
    void aSocketThatFailedIsTriedAgainWhileTcpConnectionsStayBusy() throws Exception {
        // strata tier restarting: its socket refuses for a moment, the bridge goes to TCP...
        tier.socketNamed = sock.toString();
        rsm.deleteLogSegmentData(segment());
        rsm.deleteLogSegmentData(segment());
        assertNull(rsm.unixSocket(), "nobody listens on the socket yet");
        // ...and once the socket is back, its busy TCP connection does not keep it there.
        tier.listenUnix(sock);
        rsm.deleteLogSegmentData(segment());
        Thread.sleep(TimeUnit.NANOSECONDS.toMillis(UnixSocketTransport.RETRY_NANOS) + 200);
        rsm.deleteLogSegmentData(segment());
        rsm.deleteLogSegmentData(segment());

        List<String> t = transports(tier);
        assertEquals("unix", t.get(t.size() - 1), t.toString());
        assertEquals(List.of("tcp", "tcp", "tcp", "tcp", "unix"), t);
    }

    @Test
    void aNamedSocketThatCannotBeConnectedFallsBackToTcp() throws Exception {
        tier.socketNamed = tmp.resolve("nobody-listens.sock").toString();

        rsm.deleteLogSegmentData(segment());
        rsm.deleteLogSegmentData(segment());

        assertEquals(List.of("tcp", "tcp"), transports(tier));
        assertNull(rsm.unixSocket());
    }
}
