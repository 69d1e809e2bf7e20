package io.strata.rsm;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

import java.io.IOException;
import java.io.InputStream;
import java.io.OutputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.nio.charset.StandardCharsets;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

/** A stand-in for {@code strata tier}: records every request and answers with a configurable handler. */
final class FakeTier implements AutoCloseable {

    /** One request as the server saw it. */
    static final class Recorded {
        final String method;
        final String path;
        final String contentType;
        final byte[] body;

        Recorded(String method, String path, String contentType, byte[] body) {
            this.method = method;
            this.path = path;
            this.contentType = contentType;
            this.body = body;
        }

        String bodyText() {
            return new String(body, StandardCharsets.UTF_8);
        }
    }

    @FunctionalInterface
    interface Responder {
        void respond(HttpExchange exchange, Recorded request) throws Exception;
    }

    final List<Recorded> requests = new CopyOnWriteArrayList<>();
    private final HttpServer server;
    private final ExecutorService pool = Executors.newCachedThreadPool(r -> {
        Thread t = new Thread(r, "fake-strata-tier");
        t.setDaemon(true);
        return t;
    });
    private volatile Responder responder = (ex, req) -> send(ex, 200, "{\"custom_metadata\":null}");

    FakeTier() throws IOException {
        server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.setExecutor(pool);
        server.createContext("/", ex -> {
            try {
                byte[] body;
                try (InputStream in = ex.getRequestBody()) {
                    body = in.readAllBytes();
                }
                Recorded rec = new Recorded(ex.getRequestMethod(), ex.getRequestURI().getRawPath(),
                    ex.getRequestHeaders().getFirst("Content-Type"), body);
                requests.add(rec);
                responder.respond(ex, rec);
            } catch (Exception e) {
                // A client that hung up mid-response is fine for these tests.
            } finally {
                ex.close();
            }
        });
        server.start();
    }

    String endpoint() {
        return "http://127.0.0.1:" + server.getAddress().getPort();
    }

    void respond(Responder r) {
        this.responder = r;
    }

    Recorded only() {
        if (requests.size() != 1) {
            throw new AssertionError("expected exactly one request, got " + requests.size());
        }
        return requests.get(0);
    }

    static void send(HttpExchange ex, int status, String body) throws IOException {
        send(ex, status, body.getBytes(StandardCharsets.UTF_8));
    }

    static void send(HttpExchange ex, int status, byte[] body) throws IOException {
        if (body.length == 0) {
            ex.sendResponseHeaders(status, -1);
            return;
        }
        ex.sendResponseHeaders(status, body.length);
        try (OutputStream out = ex.getResponseBody()) {
            out.write(body);
        }
    }

    @Override
    public void close() throws InterruptedException {
        server.stop(0);
        pool.shutdownNow();
        pool.awaitTermination(5, TimeUnit.SECONDS);
    }
}
