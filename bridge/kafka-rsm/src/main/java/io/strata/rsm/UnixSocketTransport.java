package io.strata.rsm;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.IOException;
import java.net.StandardProtocolFamily;
import java.net.UnixDomainSocketAddress;
import java.nio.channels.SocketChannel;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.TimeUnit;

/**
 * The Unix domain socket transport ({@code strata.unix.socket}): either one fixed socket, or the
 * socket an authenticated TCP hello names, used for new connections until it fails; then TCP,
 * and the socket again after {@link #RETRY_NANOS}. Never switches on an unauthenticated hint.
 */
final class UnixSocketTransport {
    /** Logged under the client's name, as before this class existed (operators' log settings keep working). */
    private static final Logger LOG = LoggerFactory.getLogger(TierHttp.class);

    /** After a failed connect or hello, the named socket is not tried again for this long. */
    static final long RETRY_NANOS = Duration.ofSeconds(5).toNanos();

    /** Whether the socket strata tier names in its hello is used. */
    private final boolean follow;
    /** The socket every connection goes to, or {@code null} ({@code strata.unix.socket} set to a path). */
    private final Path fixed;
    /** Where connections go instead, for messages. */
    private final String tcpPeer;
    /** The socket strata tier named, new connections go there; {@code null} for TCP. */
    private volatile Path socket;
    private volatile Path failedSocket;
    private volatile long failedAt;

    UnixSocketTransport(boolean follow, Path fixed, String tcpPeer) {
        this.follow = follow;
        this.fixed = fixed;
        this.tcpPeer = tcpPeer;
    }

    /** The socket every connection goes to, or {@code null}. */
    Path fixed() {
        return fixed;
    }

    /** The socket strata tier named, which new connections go to, or {@code null} for TCP. */
    Path named() {
        return socket;
    }

    /**
     * Whether an idle TCP connection may still be used: no socket is known, and no failed one is
     * due for another try (a new connection's hello names it again: busy TCP connections would
     * otherwise keep the bridge off the socket for good).
     */
    boolean keepsTcp(long now) {
        return socket == null && !retryDue(now);
    }

    /** A socket strata tier named failed, long enough ago to be tried again. */
    private boolean retryDue(long now) {
        return follow && failedSocket != null && now - failedAt >= RETRY_NANOS;
    }

    /** A connection to {@code path}, not yet greeted. */
    static TierConnection open(Path path) throws IOException {
        SocketChannel ch = SocketChannel.open(StandardProtocolFamily.UNIX);
        try {
            ch.connect(UnixDomainSocketAddress.of(path));
            return new TierConnection(ch, null, true, "the Unix socket " + path);
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }

    /** The named socket could not be connected to or failed the hello: TCP for {@link #RETRY_NANOS}. */
    void failed(Path unix, IOException why) {
        failedSocket = unix;
        failedAt = System.nanoTime();
        socket = null;
        LOG.info("strata tier's Unix socket {} is not usable ({}); using TCP {} for {} s", unix, why.toString(),
            tcpPeer, TimeUnit.NANOSECONDS.toSeconds(RETRY_NANOS));
    }

    /**
     * An authenticated TCP hello named {@code value} ("" for none): new connections go there if
     * allowed, an absolute path, and not a socket that failed less than {@link #RETRY_NANOS} ago.
     */
    void helloNamed(String value) {
        if (value.isEmpty()) {
            failedSocket = null;
            return;
        }
        if (!follow || socket != null) {
            return;
        }
        Path p;
        try {
            p = Path.of(value);
        } catch (InvalidPathException e) {
            return;
        }
        if (!p.isAbsolute()) {
            return;
        }
        if (p.equals(failedSocket) && System.nanoTime() - failedAt < RETRY_NANOS) {
            return;
        }
        if (!p.equals(failedSocket)) {
            LOG.info("strata tier also listens on the Unix socket {}: new connections go there", p);
        }
        failedSocket = null;
        socket = p;
    }
}
