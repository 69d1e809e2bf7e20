package io.strata.rsm;

import org.apache.kafka.common.TopicIdPartition;
import org.apache.kafka.server.log.remote.storage.LogSegmentData;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteLogSegmentMetadata.CustomMetadata;
import org.apache.kafka.server.log.remote.storage.RemoteResourceNotFoundException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageException;
import org.apache.kafka.server.log.remote.storage.RemoteStorageManager;

import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.http.HttpClient;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Base64;
import java.util.Map;
import java.util.Optional;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.atomic.AtomicInteger;

/**
 * Kafka tiered storage (KIP-405) {@link RemoteStorageManager} that forwards every call to the
 * local {@code strata tier} HTTP service. It holds no storage logic of its own.
 *
 * <p>Broker settings:
 * <pre>
 * remote.log.storage.system.enable=true
 * remote.log.storage.manager.class.name=io.strata.rsm.StrataRemoteStorageManager
 * remote.log.storage.manager.class.path=/path/strata-kafka-rsm.jar
 * rsm.config.strata.endpoint=http://127.0.0.1:9190
 * </pre>
 * The HTTP protocol is described in this module's README.md.
 */
public class StrataRemoteStorageManager implements RemoteStorageManager {
    private static final Logger LOG = LoggerFactory.getLogger(StrataRemoteStorageManager.class);

    /** Most bytes of an error response body kept for the exception message. */
    static final int ERROR_BODY_CAP = 8 * 1024;
    /** Most bytes accepted in a copy response (a tiny JSON object). */
    static final int COPY_RESPONSE_CAP = 1024 * 1024;

    static final String HINT = "is `strata tier` running on this host?";

    private static final String JSON = "application/json";
    private static final AtomicInteger CLIENT_SEQ = new AtomicInteger();

    private volatile BridgeConfig config;
    private volatile HttpClient client;
    private volatile ExecutorService executor;

    public StrataRemoteStorageManager() {
    }

    /**
     * Reads the settings and builds the HTTP client. Does not contact the service: the broker may
     * start before {@code strata tier} does.
     */
    @Override
    public void configure(Map<String, ?> configs) {
        BridgeConfig cfg = BridgeConfig.parse(configs);
        int seq = CLIENT_SEQ.incrementAndGet();
        AtomicInteger threadSeq = new AtomicInteger();
        ExecutorService exec = Executors.newCachedThreadPool(r -> {
            Thread t = new Thread(r, "strata-rsm-http-" + seq + "-" + threadSeq.incrementAndGet());
            t.setDaemon(true);
            return t;
        });
        HttpClient newClient = HttpClient.newBuilder()
            .version(HttpClient.Version.HTTP_1_1)
            .connectTimeout(cfg.connectTimeout)
            .followRedirects(HttpClient.Redirect.NEVER)
            .proxy(HttpClient.Builder.NO_PROXY)
            .executor(exec)
            .build();
        ExecutorService old = this.executor;
        this.config = cfg;
        this.client = newClient;
        this.executor = exec;
        if (old != null) {
            old.shutdown();
        }
        LOG.info("Strata remote storage manager configured, forwarding to strata tier: {}", cfg);
    }

    @Override
    public Optional<CustomMetadata> copyLogSegmentData(RemoteLogSegmentMetadata metadata, LogSegmentData data)
            throws RemoteStorageException {
        BridgeConfig cfg = config();
        String body = copyRequestJson(metadata, data);
        HttpResponse<InputStream> resp = send("copy", "/v1/copy", body, cfg.copyTimeout, true);
        byte[] raw;
        try (InputStream in = resp.body()) {
            raw = readCapped(in, COPY_RESPONSE_CAP + 1);
        } catch (IOException e) {
            throw transportFailure("copy", e, cfg.copyTimeout);
        }
        if (raw.length > COPY_RESPONSE_CAP) {
            throw failure("strata tier copy returned a response larger than " + COPY_RESPONSE_CAP + " bytes");
        }
        return parseCopyResponse(new String(raw, StandardCharsets.UTF_8));
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition)
            throws RemoteStorageException {
        if (startPosition < 0) {
            throw new IllegalArgumentException("startPosition must be >= 0, got " + startPosition);
        }
        return fetch(metadata, startPosition, null);
    }

    @Override
    public InputStream fetchLogSegment(RemoteLogSegmentMetadata metadata, int startPosition, int endPosition)
            throws RemoteStorageException {
        if (startPosition < 0) {
            throw new IllegalArgumentException("startPosition must be >= 0, got " + startPosition);
        }
        if (endPosition < startPosition) {
            throw new IllegalArgumentException(
                "endPosition (" + endPosition + ") must be >= startPosition (" + startPosition + ")");
        }
        return fetch(metadata, startPosition, endPosition);
    }

    @Override
    public InputStream fetchIndex(RemoteLogSegmentMetadata metadata, IndexType indexType)
            throws RemoteStorageException {
        BridgeConfig cfg = config();
        String body = fetchIndexRequestJson(metadata, indexType);
        return send("fetch-index", "/v1/fetch-index", body, cfg.fetchTimeout, true).body();
    }

    /**
     * Deletes the segment. The service answers 2xx when the segment is already gone (delete is
     * idempotent); per the Kafka contract this method never throws
     * {@link RemoteResourceNotFoundException}, so an HTTP 404 here (most likely a wrong endpoint
     * or route) is reported like any other error status, as a plain
     * {@link RemoteStorageException}, and the broker retries later.
     */
    @Override
    public void deleteLogSegmentData(RemoteLogSegmentMetadata metadata) throws RemoteStorageException {
        BridgeConfig cfg = config();
        String body = deleteRequestJson(metadata);
        HttpResponse<InputStream> resp = send("delete", "/v1/delete", body, cfg.fetchTimeout, false);
        try (InputStream in = resp.body()) {
            readCapped(in, ERROR_BODY_CAP);
        } catch (IOException e) {
            // The status line said success; a broken body does not change that.
            LOG.debug("Ignoring error reading strata tier delete response body", e);
        }
    }

    /**
     * Whether {@code GET /v1/health} answers 2xx. Not part of the Kafka interface; for logs and
     * diagnostics. Never throws.
     */
    boolean healthy() {
        BridgeConfig cfg = config;
        HttpClient c = client;
        if (cfg == null || c == null) {
            return false;
        }
        HttpRequest req = HttpRequest.newBuilder(cfg.uri("/v1/health"))
            .timeout(cfg.fetchTimeout)
            .GET()
            .build();
        try {
            HttpResponse<InputStream> resp = c.send(req, HttpResponse.BodyHandlers.ofInputStream());
            try (InputStream in = resp.body()) {
                readCapped(in, ERROR_BODY_CAP);
            }
            return resp.statusCode() / 100 == 2;
        } catch (IOException e) {
            return false;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            return false;
        }
    }

    @Override
    public void close() {
        ExecutorService exec = this.executor;
        this.client = null;
        this.executor = null;
        if (exec != null) {
            exec.shutdown();
        }
    }

    // ---------------------------------------------------------------------------------------
    // Request bodies

    static String copyRequestJson(RemoteLogSegmentMetadata m, LogSegmentData d) {
        JsonWriter w = new JsonWriter().beginObject();
        w.name("segment");
        writeSegment(w, m);
        w.name("files").beginObject()
            .name("log").value(absolute(d.logSegment()))
            .name("offset_index").value(absolute(d.offsetIndex()))
            .name("time_index").value(absolute(d.timeIndex()))
            .name("transaction_index").value(d.transactionIndex().map(StrataRemoteStorageManager::absolute).orElse(null))
            .name("producer_snapshot").value(absolute(d.producerSnapshotIndex()))
            .endObject();
        ByteBuffer epochs = d.leaderEpochIndex().duplicate();
        byte[] epochBytes = new byte[epochs.remaining()];
        epochs.get(epochBytes);
        w.name("leader_epoch_index").value(Base64.getEncoder().encodeToString(epochBytes));
        return w.endObject().toString();
    }

    static String fetchRequestJson(RemoteLogSegmentMetadata m, int startPosition, Integer endPosition) {
        JsonWriter w = new JsonWriter().beginObject();
        w.name("segment");
        writeSegment(w, m);
        w.name("start_position").value(startPosition);
        w.name("end_position");
        if (endPosition == null) {
            w.nullValue();
        } else {
            w.value(endPosition.longValue());
        }
        return w.endObject().toString();
    }

    static String fetchIndexRequestJson(RemoteLogSegmentMetadata m, IndexType indexType) {
        JsonWriter w = new JsonWriter().beginObject();
        w.name("segment");
        writeSegment(w, m);
        w.name("index").value(indexType.name());
        return w.endObject().toString();
    }

    static String deleteRequestJson(RemoteLogSegmentMetadata m) {
        JsonWriter w = new JsonWriter().beginObject();
        w.name("segment");
        writeSegment(w, m);
        return w.endObject().toString();
    }

    private static void writeSegment(JsonWriter w, RemoteLogSegmentMetadata m) {
        TopicIdPartition tip = m.topicIdPartition();
        w.beginObject()
            .name("topic").value(tip.topic())
            .name("topic_id").value(tip.topicId().toString())
            .name("partition").value(tip.partition())
            .name("segment_id").value(m.remoteLogSegmentId().id().toString())
            .name("start_offset").value(m.startOffset())
            .name("end_offset").value(m.endOffset())
            .name("max_timestamp_ms").value(m.maxTimestampMs())
            .name("event_timestamp_ms").value(m.eventTimestampMs())
            .name("broker_id").value(m.brokerId())
            .name("segment_size_bytes").value(m.segmentSizeInBytes());
        w.name("leader_epochs").beginArray();
        for (Map.Entry<Integer, Long> e : m.segmentLeaderEpochs().entrySet()) {
            w.beginArray().value(e.getKey()).value(e.getValue()).endArray();
        }
        w.endArray().endObject();
    }

    private static String absolute(Path p) {
        return p.toAbsolutePath().toString();
    }

    // ---------------------------------------------------------------------------------------
    // Responses

    static Optional<CustomMetadata> parseCopyResponse(String text) throws RemoteStorageException {
        if (text.isBlank()) {
            return Optional.empty();
        }
        Object parsed;
        try {
            parsed = JsonReader.parse(text);
        } catch (IllegalArgumentException e) {
            throw failure("strata tier copy returned a body that is not JSON: " + e.getMessage());
        }
        if (!(parsed instanceof Map)) {
            throw failure("strata tier copy returned JSON that is not an object");
        }
        Object cm = ((Map<?, ?>) parsed).get("custom_metadata");
        if (cm == null) {
            return Optional.empty();
        }
        if (!(cm instanceof String)) {
            throw failure("strata tier copy returned custom_metadata that is neither null nor a base64 string");
        }
        try {
            return Optional.of(new CustomMetadata(Base64.getDecoder().decode((String) cm)));
        } catch (IllegalArgumentException e) {
            throw failure("strata tier copy returned custom_metadata that is not valid base64: " + e.getMessage());
        }
    }

    // ---------------------------------------------------------------------------------------
    // HTTP

    private InputStream fetch(RemoteLogSegmentMetadata metadata, int startPosition, Integer endPosition)
            throws RemoteStorageException {
        BridgeConfig cfg = config();
        String body = fetchRequestJson(metadata, startPosition, endPosition);
        // The body is handed to the broker as a live stream: no buffering here.
        return send("fetch", "/v1/fetch", body, cfg.fetchTimeout, true).body();
    }

    /**
     * POSTs {@code json} to {@code path} and returns the response if its status is 2xx (the
     * caller owns and must close the body). Otherwise reads at most {@link #ERROR_BODY_CAP}
     * bytes of the body and throws: {@link RemoteResourceNotFoundException} for HTTP 404 when
     * {@code notFoundIsMissing}, {@link RemoteStorageException} for any other status.
     */
    private HttpResponse<InputStream> send(String op, String path, String json, Duration timeout,
                                           boolean notFoundIsMissing) throws RemoteStorageException {
        BridgeConfig cfg = config();
        HttpClient c = client;
        if (c == null) {
            throw new IllegalStateException("StrataRemoteStorageManager is closed");
        }
        HttpRequest req = HttpRequest.newBuilder(cfg.uri(path))
            .timeout(timeout)
            .header("Content-Type", JSON)
            .POST(HttpRequest.BodyPublishers.ofString(json, StandardCharsets.UTF_8))
            .build();
        HttpResponse<InputStream> resp;
        try {
            resp = c.send(req, HttpResponse.BodyHandlers.ofInputStream());
        } catch (IOException e) {
            throw transportFailure(op, e, timeout);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new RemoteStorageException(
                "interrupted while waiting for strata tier " + op + " at " + cfg.endpoint, e);
        }
        int status = resp.statusCode();
        if (status / 100 == 2) {
            return resp;
        }
        String text;
        try (InputStream in = resp.body()) {
            text = errorText(in);
        } catch (IOException e) {
            text = "(error body unreadable: " + e + ")";
        }
        if (status == 404 && notFoundIsMissing) {
            throw new RemoteResourceNotFoundException(
                text.isEmpty() ? "strata tier " + op + ": not found (HTTP 404)" : text);
        }
        String msg = "strata tier " + op + " failed: HTTP " + status + ": " + text;
        LOG.warn(msg);
        throw new RemoteStorageException(msg);
    }

    private RemoteStorageException transportFailure(String op, IOException e, Duration timeout) {
        BridgeConfig cfg = config;
        String msg = "strata tier " + op + " at " + cfg.endpoint + " failed: " + describe(e, cfg, timeout)
            + " (" + HINT + ")";
        LOG.warn(msg);
        return new RemoteStorageException(msg, e);
    }

    private static RemoteStorageException failure(String msg) {
        LOG.warn(msg);
        return new RemoteStorageException(msg);
    }

    private static String describe(IOException e, BridgeConfig cfg, Duration timeout) {
        if (e instanceof HttpConnectTimeoutException) {
            return "could not connect within " + cfg.connectTimeout.toMillis() + " ms";
        }
        if (e instanceof HttpTimeoutException) {
            return "no response within " + timeout.toMillis() + " ms";
        }
        String m = e.getMessage();
        String name = e.getClass().getSimpleName();
        if (e instanceof ConnectException) {
            return "could not connect (" + (m == null || m.isEmpty() ? name : name + ": " + m) + ")";
        }
        return m == null || m.isEmpty() ? name : name + ": " + m;
    }

    /** The error body as text: at most {@link #ERROR_BODY_CAP} bytes, trimmed. */
    private static String errorText(InputStream in) throws IOException {
        byte[] raw = readCapped(in, ERROR_BODY_CAP + 1);
        boolean truncated = raw.length > ERROR_BODY_CAP;
        String text = new String(raw, 0, Math.min(raw.length, ERROR_BODY_CAP), StandardCharsets.UTF_8).strip();
        return truncated ? text + "... (truncated)" : text;
    }

    /** Reads until EOF or until {@code max} bytes have been read, whichever comes first. */
    static byte[] readCapped(InputStream in, int max) throws IOException {
        ByteArrayOutputStream out = new ByteArrayOutputStream(Math.min(max, 8192));
        byte[] buf = new byte[8192];
        int total = 0;
        while (total < max) {
            int n = in.read(buf, 0, Math.min(buf.length, max - total));
            if (n < 0) {
                break;
            }
            out.write(buf, 0, n);
            total += n;
        }
        return out.toByteArray();
    }

    private BridgeConfig config() {
        BridgeConfig cfg = config;
        if (cfg == null) {
            throw new IllegalStateException("StrataRemoteStorageManager.configure() has not been called");
        }
        return cfg;
    }
}
