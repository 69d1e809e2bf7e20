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

import javax.net.ssl.SSLSocketFactory;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Base64;
import java.util.Map;
import java.util.Optional;

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

    private volatile BridgeConfig config;
    private volatile TierHttp http;

    public StrataRemoteStorageManager() {
    }

    /**
     * Reads the settings and sets up the HTTP client. Does not contact the service: the broker may
     * start before {@code strata tier} does.
     */
    @Override
    public void configure(Map<String, ?> configs) {
        configure(configs, null);
    }

    /** {@link #configure(Map)} with the TLS socket factory for {@code https} endpoints (tests). */
    void configure(Map<String, ?> configs, SSLSocketFactory tls) {
        BridgeConfig cfg = BridgeConfig.parse(configs);
        TierHttp newHttp = new TierHttp(cfg.endpoint, cfg.connectTimeout, cfg.unixSocket, tls);
        TierHttp old = this.http;
        this.config = cfg;
        this.http = newHttp;
        if (old != null) {
            old.close();
        }
        LOG.info("Strata remote storage manager configured, forwarding to strata tier: {}", cfg);
    }

    @Override
    public Optional<CustomMetadata> copyLogSegmentData(RemoteLogSegmentMetadata metadata, LogSegmentData data)
            throws RemoteStorageException {
        BridgeConfig cfg = config();
        String body = copyRequestJson(metadata, data);
        TierHttp.Response resp = send("copy", "/v1/copy", body, cfg.copyTimeout, true);
        byte[] raw;
        try (InputStream in = resp.body) {
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
        return fetch(metadata, startPosition, -1);
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
        return send("fetch-index", "/v1/fetch-index", body, cfg.fetchTimeout, true).body;
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
        TierHttp.Response resp = send("delete", "/v1/delete", body, cfg.fetchTimeout, false);
        try (InputStream in = resp.body) {
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
        TierHttp h = http;
        if (cfg == null || h == null) {
            return false;
        }
        try {
            TierHttp.Response resp = h.send("/v1/health", null, cfg.fetchTimeout);
            try (InputStream in = resp.body) {
                readCapped(in, ERROR_BODY_CAP);
            }
            return resp.status / 100 == 2;
        } catch (IOException e) {
            return false;
        }
    }

    /** Idle connections the client keeps now (for tests). */
    int idleConnections() {
        TierHttp h = http;
        return h == null ? 0 : h.idleCount();
    }

    /** The Unix socket new connections go to, or {@code null} for TCP (for tests). */
    java.nio.file.Path unixSocket() {
        TierHttp h = http;
        return h == null ? null : h.socket();
    }

    @Override
    public void close() {
        TierHttp h = this.http;
        this.http = null;
        if (h != null) {
            h.close();
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

    /** The segment object alone (rendered once per fetch, reused for every window). */
    static String segmentJson(RemoteLogSegmentMetadata m) {
        JsonWriter w = new JsonWriter();
        writeSegment(w, m);
        return w.toString();
    }

    static String fetchRequestJson(String segmentJson, long startPosition, long endPosition, long maxBytes) {
        return "{\"segment\":" + segmentJson + ",\"start_position\":" + startPosition
            + ",\"end_position\":" + (endPosition < 0 ? "null" : Long.toString(endPosition))
            + ",\"max_bytes\":" + maxBytes + "}";
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

    /**
     * The bytes as a live stream read from the socket (see {@link FetchStream} for the windows).
     * {@code endPosition} -1 means to the end of the segment.
     */
    private InputStream fetch(RemoteLogSegmentMetadata metadata, int startPosition, long endPosition)
            throws RemoteStorageException {
        BridgeConfig cfg = config();
        TierHttp h = http;
        if (h == null) {
            throw new IllegalStateException("StrataRemoteStorageManager is closed");
        }
        String segment = segmentJson(metadata);
        FetchStream.Opener opener = (position, maxBytes) -> send("fetch", "/v1/fetch",
            fetchRequestJson(segment, position, endPosition, maxBytes), cfg.fetchTimeout, true).body;
        return new FetchStream(opener, metadata.remoteLogSegmentId().id().toString(), startPosition, endPosition)
            .open();
    }

    /**
     * POSTs {@code json} to {@code path} and returns the response if its status is 2xx (the
     * caller owns and must close the body). Otherwise reads at most {@link #ERROR_BODY_CAP}
     * bytes of the body and throws: {@link RemoteResourceNotFoundException} for HTTP 404 when
     * {@code notFoundIsMissing}, {@link RemoteStorageException} for any other status.
     */
    private TierHttp.Response send(String op, String path, String json, Duration timeout,
                                   boolean notFoundIsMissing) throws RemoteStorageException {
        BridgeConfig cfg = config();
        TierHttp h = http;
        if (h == null) {
            throw new IllegalStateException("StrataRemoteStorageManager is closed");
        }
        TierHttp.Response resp;
        try {
            resp = h.send(path, json.getBytes(StandardCharsets.UTF_8), timeout);
        } catch (IOException e) {
            if (e instanceof ClosedByInterruptException || Thread.currentThread().isInterrupted()) {
                // The interrupt flag stays set for the caller.
                InterruptedException cause = new InterruptedException("interrupted during an HTTP exchange");
                cause.initCause(e);
                throw new RemoteStorageException(
                    "interrupted while waiting for strata tier " + op + " at " + cfg.endpoint, cause);
            }
            throw transportFailure(op, e, timeout);
        }
        int status = resp.status;
        if (status / 100 == 2) {
            return resp;
        }
        String text;
        try (InputStream in = resp.body) {
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
