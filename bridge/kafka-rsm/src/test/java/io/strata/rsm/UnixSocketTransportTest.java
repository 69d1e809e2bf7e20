package io.strata.rsm;

import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.nio.file.Path;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Which transport new connections take, as hellos name sockets and sockets fail (no sockets opened). */
class UnixSocketTransportTest {
    static final Path SOCK = Path.of("/run/strata-tier/tier.sock");

    @Test
    void followsOnlyAnAbsolutePathWhenAllowed() {
        UnixSocketTransport off = new UnixSocketTransport(false, null, "127.0.0.1:9190");
        off.helloNamed(SOCK.toString());
        assertNull(off.named());

        UnixSocketTransport auto = new UnixSocketTransport(true, null, "127.0.0.1:9190");
        auto.helloNamed("relative/tier.sock");
        assertNull(auto.named());
        auto.helloNamed("");
        assertNull(auto.named());
        assertTrue(auto.keepsTcp(System.nanoTime()));
        auto.helloNamed(SOCK.toString());
        assertEquals(SOCK, auto.named());
        assertFalse(auto.keepsTcp(System.nanoTime()), "idle TCP connections retire once a socket is known");
        auto.helloNamed("/elsewhere.sock");
        assertEquals(SOCK, auto.named(), "the first socket named stays");
    }

    @Test
    void aFailedSocketSendsConnectionsToTcpUntilItsRetryIsDue() {
        UnixSocketTransport auto = new UnixSocketTransport(true, null, "127.0.0.1:9190");
        auto.helloNamed(SOCK.toString());
        long before = System.nanoTime();
        auto.failed(SOCK, new IOException("connection refused"));
        long due = System.nanoTime() + UnixSocketTransport.RETRY_NANOS;
        assertNull(auto.named());
        assertTrue(auto.keepsTcp(before), "TCP is used while the retry is not due");
        assertFalse(auto.keepsTcp(due),
            "once the retry is due, idle TCP connections retire so that a new hello names the socket again");
        auto.helloNamed("");
        assertTrue(auto.keepsTcp(due), "a hello naming none clears the failure");
    }

    @Test
    void aFixedSocketIsKeptAsConfigured() {
        UnixSocketTransport fixed = new UnixSocketTransport(false, SOCK, "127.0.0.1:9190");
        assertEquals(SOCK, fixed.fixed());
        assertNull(fixed.named());
    }
}
