package io.strata.rsm;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.nio.channels.SocketChannel;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** Which idle connections the pool hands out again, and which it closes (unconnected channels). */
class ConnectionPoolTest {
    private final List<TierConnection> made = new ArrayList<>();

    @AfterEach
    void closeAll() {
        made.forEach(TierConnection::close);
    }

    private TierConnection conn(boolean unix) throws IOException {
        SocketChannel ch = unix ? SocketChannel.open(StandardProtocolFamily.UNIX) : SocketChannel.open();
        TierConnection c = new TierConnection(ch, null, unix, "test");
        made.add(c);
        return c;
    }

    private static boolean open(TierConnection c) {
        return c.channel.isOpen();
    }

    @Test
    void theMostRecentlyReleasedComesBackFirst() throws IOException {
        ConnectionPool pool = new ConnectionPool(now -> true);
        TierConnection a = conn(false);
        TierConnection b = conn(false);
        pool.release(a);
        pool.release(b);
        assertSame(b, pool.take());
        assertSame(a, pool.take());
        assertNull(pool.take());
        assertTrue(open(a) && open(b));
    }

    @Test
    void keepsAtMostMaxIdle() throws IOException {
        ConnectionPool pool = new ConnectionPool(now -> true);
        List<TierConnection> all = new ArrayList<>();
        for (int i = 0; i <= ConnectionPool.MAX_IDLE; i++) {
            TierConnection c = conn(false);
            all.add(c);
            pool.release(c);
        }
        assertFalse(open(all.get(ConnectionPool.MAX_IDLE)), "one over the limit is closed");
        for (int i = 0; i < ConnectionPool.MAX_IDLE; i++) {
            assertTrue(open(pool.take()));
        }
        assertNull(pool.take());
    }

    @Test
    void anOldIdleConnectionIsClosedInsteadOfReused() throws IOException {
        ConnectionPool pool = new ConnectionPool(now -> true);
        TierConnection c = conn(false);
        pool.release(c);
        c.idleSince -= ConnectionPool.MAX_IDLE_NANOS;
        assertNull(pool.take());
        assertFalse(open(c));
    }

    @Test
    void tcpConnectionsRetireWhenTheSocketIsPreferred() throws IOException {
        ConnectionPool pool = new ConnectionPool(now -> false);
        TierConnection tcp = conn(false);
        TierConnection unix = conn(true);
        pool.release(unix);
        pool.release(tcp);
        assertSame(unix, pool.take());
        assertFalse(open(tcp));
        assertNull(pool.take());
    }

    @Test
    void aClosedPoolClosesWhatItHeldAndWhatComesBack() throws IOException {
        ConnectionPool pool = new ConnectionPool(now -> true);
        TierConnection held = conn(false);
        TierConnection inUse = conn(false);
        pool.release(held);
        pool.close();
        assertFalse(open(held));
        pool.release(inUse);
        assertFalse(open(inUse));
        assertNull(pool.take());
    }
}
