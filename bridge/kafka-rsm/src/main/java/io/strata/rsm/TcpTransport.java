package io.strata.rsm;

import javax.net.ssl.SSLSocket;
import javax.net.ssl.SSLSocketFactory;

import java.io.IOException;
import java.net.InetSocketAddress;
import java.net.SocketTimeoutException;
import java.net.StandardSocketOptions;
import java.net.UnknownHostException;
import java.net.http.HttpConnectTimeoutException;
import java.nio.channels.SocketChannel;

/**
 * TCP connections to the endpoint's host and port: resolved per connection, refused when plain
 * http would leave this host, connected within the connect timeout, with TLS over them for an
 * {@code https} endpoint ({@link Tls}).
 */
final class TcpTransport {
    private final String host;
    private final int port;
    private final int connectTimeoutMs;
    /** {@code null} for plain HTTP. */
    private final SSLSocketFactory tls;

    TcpTransport(String host, int port, int connectTimeoutMs, SSLSocketFactory tls) {
        this.host = host;
        this.port = port;
        this.connectTimeoutMs = connectTimeoutMs;
        this.tls = tls;
    }

    /** {@code host:port}, for messages. */
    String peer() {
        return host + ":" + port;
    }

    /**
     * A new connection, TLS set up for https; not yet greeted.
     *
     * @throws HttpConnectTimeoutException when no connection was made within the connect timeout
     */
    TierConnection open() throws IOException {
        InetSocketAddress addr = new InetSocketAddress(host, port);
        if (addr.isUnresolved()) {
            throw new UnknownHostException(host);
        }
        if (tls == null && !addr.getAddress().isLoopbackAddress()) {
            // The configuration allows only loopback names; this catches one that resolves elsewhere.
            throw new IOException(host + " resolves to " + addr.getAddress().getHostAddress()
                + ", not a loopback address: plain http is only used on this host");
        }
        SocketChannel ch = SocketChannel.open();
        try {
            ch.setOption(StandardSocketOptions.TCP_NODELAY, true);
            try {
                ch.socket().connect(addr, connectTimeoutMs);
            } catch (SocketTimeoutException e) {
                HttpConnectTimeoutException t = new HttpConnectTimeoutException(
                    "could not connect to " + peer() + " within " + connectTimeoutMs + " ms");
                t.initCause(e);
                throw t;
            }
            if (tls == null) {
                return new TierConnection(ch, null, false, peer());
            }
            SSLSocket ssl = Tls.handshake(tls, ch, host, port, connectTimeoutMs);
            return new TierConnection(ch, ssl, false, peer());
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
    }
}
