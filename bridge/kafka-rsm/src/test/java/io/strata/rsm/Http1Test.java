package io.strata.rsm;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

import javax.crypto.spec.SecretKeySpec;

import java.io.EOFException;
import java.io.IOException;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.ByteBuffer;
import java.nio.channels.ServerSocketChannel;
import java.nio.channels.SocketChannel;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

/** The HTTP/1.1 framing on its own: request heads written, responses read off a loopback socket. */
class Http1Test {
    private static final int CAP = 1024;
    private final List<AutoCloseable> open = new ArrayList<>();

    @AfterEach
    void closeAll() throws Exception {
        for (AutoCloseable c : open) {
            c.close();
        }
    }

    /** A connection whose peer has sent {@code wire} and closed its side. */
    private TierConnection conn(String wire) throws IOException {
        ServerSocketChannel server = ServerSocketChannel.open();
        open.add(server);
        server.bind(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0));
        SocketChannel client = SocketChannel.open(server.getLocalAddress());
        open.add(client);
        SocketChannel peer = server.accept();
        open.add(peer);
        // Written from another thread: a head larger than the socket buffers must not block the test.
        Thread writer = new Thread(() -> {
            try {
                ByteBuffer b = ByteBuffer.wrap(wire.getBytes(StandardCharsets.ISO_8859_1));
                while (b.hasRemaining()) {
                    peer.write(b);
                }
                peer.shutdownOutput();
            } catch (IOException e) {
                // the reader failed first and closed its side: its assertion reports it
            }
        });
        writer.setDaemon(true);
        writer.start();
        return new TierConnection(client, null, false, "test peer");
    }

    private Http1.Raw read(String wire) throws IOException {
        return Http1.readResponse(conn(wire), r -> false, CAP);
    }

    private static String text(byte[] b) {
        return new String(b, StandardCharsets.UTF_8);
    }

    @Test
    void headOfASignedJsonRequest() {
        TierHttp.RequestBody body = new TierHttp.RequestBody() {
            @Override
            public String contentType() {
                return "application/json";
            }

            @Override
            public long length() {
                return 7;
            }

            @Override
            public byte[] signed() {
                return new byte[0];
            }

            @Override
            public void write(OutputStream out, byte[] head, SecretKeySpec session, long seq) {
            }
        };
        assertEquals("POST /base/v1/fetch HTTP/1.1\r\nHost: 127.0.0.1:9190\r\nContent-Type: application/json\r\n"
                + "Content-Length: 7\r\nStrata-Auth: 3 abc\r\n\r\n",
            text(Http1.head("POST", "/base/v1/fetch", "127.0.0.1:9190", body, "3 abc")));
    }

    @Test
    void headWithoutBodyOrAuth() {
        assertEquals("GET /v1/health HTTP/1.1\r\nHost: localhost\r\n\r\n",
            text(Http1.head("GET", "/v1/health", "localhost", null, null)));
    }

    @Test
    void statusLine() throws IOException {
        assertEquals(404, Http1.parseStatus("HTTP/1.1 404 Not Found"));
        assertEquals(200, Http1.parseStatus("HTTP/1.0 200"));
        assertThrows(IOException.class, () -> Http1.parseStatus("HTTP/2 200 OK"));
        assertThrows(IOException.class, () -> Http1.parseStatus("HTTP/1.1 2x0 OK"));
        assertThrows(IOException.class, () -> Http1.parseStatus("HTTP/1.1 20"));
    }

    @Test
    void lengthFramedBodyAndItsHeaders() throws IOException {
        Http1.Raw r = read("HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n"
            + "HTTP/1.1 200 OK\r\nContent-Type: Application/JSON; charset=utf-8\r\nStrata-Auth: f00\r\n"
            + "Content-Length: 5\r\n\r\nhello");
        assertEquals(200, r.status);
        assertEquals("application/json", r.contentType);
        assertEquals("f00", r.auth);
        assertFalse(r.authRepeated);
        assertEquals("hello", text(r.body));
        assertTrue(r.reusable());
    }

    @Test
    void chunkedBodyIsJoinedAndTrailersSkipped() throws IOException {
        Http1.Raw r = read("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + "3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n");
        assertEquals("abcde", text(r.body));
        assertTrue(r.chunked);
        assertTrue(r.reusable());
    }

    @Test
    void bodyUntilCloseLeavesTheConnectionUnusable() throws IOException {
        Http1.Raw r = read("HTTP/1.1 500 Oops\r\nConnection: close\r\n\r\nall of it");
        assertEquals("all of it", text(r.body));
        assertFalse(r.reusable());
    }

    @Test
    void noContentHasNoBody() throws IOException {
        Http1.Raw r = read("HTTP/1.1 204 No Content\r\nContent-Length: 99\r\n\r\n");
        assertEquals(0, r.body.length);
        assertTrue(r.reusable());
    }

    @Test
    void aLeftBodyStaysInTheSocket() throws IOException {
        TierConnection c = conn("HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nlive");
        Http1.Raw r = Http1.readResponse(c, raw -> raw.status == 200, CAP);
        assertNull(r.body);
        assertEquals(4, r.length);
        byte[] b = new byte[4];
        c.readFully(b, 0, 4);
        assertArrayEquals("live".getBytes(StandardCharsets.UTF_8), b);
    }

    @Test
    void refusesWhatCannotBeFramedSafely() {
        assertThrows(IOException.class, () -> read("HTTP/1.1 200 OK\r\nContent-Length: 3\r\n"
            + "Transfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n"), "both framings");
        assertThrows(IOException.class, () -> read("HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n"),
            "two lengths");
        assertThrows(IOException.class, () -> read("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n"));
        assertThrows(IOException.class, () -> read("HTTP/1.1 200 OK\r\nno colon\r\n\r\n"));
        assertThrows(IOException.class, () -> read("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"));
        assertThrows(EOFException.class, () -> read("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nshort"));
        assertThrows(EOFException.class, () -> read("HTTP/1.1 200 OK\r\nContent-"));
        assertThrows(EOFException.class, () -> read(""));
    }

    @Test
    void boundsBodiesAndHeads() {
        assertThrows(IOException.class, () -> read("HTTP/1.1 200 OK\r\nContent-Length: " + (CAP + 1) + "\r\n\r\n"));
        String big = "x".repeat(CAP + 1);
        assertThrows(IOException.class, () -> read("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            + Integer.toHexString(big.length()) + "\r\n" + big + "\r\n0\r\n\r\n"));
        assertThrows(IOException.class, () -> read("HTTP/1.1 200 OK\r\n\r\n" + big));
        String header = "X-Big: " + "y".repeat(Http1.HEAD_CAP) + "\r\n";
        IOException e = assertThrows(IOException.class, () -> read("HTTP/1.1 200 OK\r\n" + header + "\r\n"));
        assertTrue(e.getMessage().contains(String.valueOf(Http1.HEAD_CAP)), e.getMessage());
    }
}
