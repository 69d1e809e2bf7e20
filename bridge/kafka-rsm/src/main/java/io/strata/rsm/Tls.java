package io.strata.rsm;

import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLSocket;
import javax.net.ssl.SSLSocketFactory;

import java.io.IOException;
import java.nio.channels.SocketChannel;

/**
 * TLS for an {@code https} endpoint: which certificates are trusted ({@code strata.tls.trust.file},
 * read by {@link TrustFile}, else the JVM's defaults) and the client handshake over a connected
 * TCP channel, always with host name verification and bounded by the connect timeout.
 */
final class Tls {
    private Tls() {
    }

    /** The TLS sockets of {@code cfg}'s endpoint, or {@code null} for plain http. */
    static SSLSocketFactory sockets(BridgeConfig cfg) {
        return !cfg.https ? null : cfg.trust != null ? cfg.trust : (SSLSocketFactory) SSLSocketFactory.getDefault();
    }

    /**
     * Runs the handshake over {@code ch} (connected to {@code host}:{@code port}) within
     * {@code timeoutMs}; the caller closes {@code ch} when it fails.
     */
    static SSLSocket handshake(SSLSocketFactory tls, SocketChannel ch, String host, int port, int timeoutMs)
            throws IOException {
        SSLSocket ssl = (SSLSocket) tls.createSocket(ch.socket(), host, port, true);
        SSLParameters params = ssl.getSSLParameters();
        params.setEndpointIdentificationAlgorithm("HTTPS");
        ssl.setSSLParameters(params);
        ssl.setSoTimeout(timeoutMs);
        ssl.startHandshake();
        ssl.setSoTimeout(0);
        return ssl;
    }
}
