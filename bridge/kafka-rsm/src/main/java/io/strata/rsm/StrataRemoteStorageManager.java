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

import java.io.ByteArrayInputStream;
import java.io.IOException;
import java.io.InputStream;
import java.net.ConnectException;
import java.net.http.HttpConnectTimeoutException;
import java.net.http.HttpTimeoutException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedByInterruptException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Optional;

/**
 * Kafka tiered storage (KIP-405) {@link RemoteStorageManager} that forwards every call to the
 * {@code strata tier} HTTP service, on this host or over https on another, authenticating both
 * sides with the shared secret on every connection. It holds no storage logic of its own.
 *
 * <p>Broker settings:
 * <pre>
 * remote.log.storage.system.enable=true
 * remote.log.storage.manager.class.name=io.strata.rsm.StrataRemoteStorageManager
 * remote.log.storage.manager.class.path=/path/strata-kafka-rsm.jar
 * rsm.config.strata.endpoint=http://127.0.0.1:9190
 * rsm.config.strata.secret.file=/etc/strata/tier.secret
 * </pre>
 * The HTTP protocol is described in this module's README.md.
 */
public class StrataRemoteStorageManager implements RemoteStorageManager {
    private static final Logger LOG = LoggerFactory.getLogger(StrataRemoteStorageManager.class);

    /** Most bytes of an error response body kept for the exception message. */
    static final int ERROR_BODY_CAP = 8 * 1024;
    /**
     * Most bytes accepted in a response other than a fetch's bytes or an index (a copy's tiny JSON
     * object, an error text): each body is read whole, for its signature, before it is used.
     */
    static final int RESPONSE_CAP = 1024 * 1024;
    /** Most bytes of an index, in an upload or a fetch-index answer (strata tier's limit too). */
    static final int INDEX_CAP = 64 * 1024 * 1024;

    static final String HINT = "is `strata tier` running on this host?";

    private volatile BridgeConfig config;
    private volatile TierHttp http;
    /** Recent handoff answers, for the broker's next fetches of their segments. */
    private final HandoffCache answers = new HandoffCache();

    public StrataRemoteStorageManager() {
    }

    /**
     * Reads the settings and sets up the HTTP client. Does not contact the service: the broker may
     * start before {@code strata tier} does.
     */
    @Override
    public void configure(Map<String, ?> configs) {
        BridgeConfig cfg = BridgeConfig.parse(configs);
        TierHttp newHttp = new TierHttp(cfg);
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
        TierHttp.Response resp;
        if (cfg.copyUpload) {
            SegmentUpload upload = segmentUpload(metadata, data);
            resp = send("copy", cfg.copyTimeout, true,
                h -> h.upload("/v1/copy-upload", upload, cfg.copyTimeout, RESPONSE_CAP));
        } else {
            byte[] body = copyRequestJson(metadata, data).getBytes(StandardCharsets.UTF_8);
            resp = send("copy", cfg.copyTimeout, true, h -> h.post("/v1/copy", body, cfg.copyTimeout, RESPONSE_CAP));
        }
        return parseCopyResponse(new String(resp.body, StandardCharsets.UTF_8));
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
        byte[] body = fetchIndexRequestJson(metadata, indexType).getBytes(StandardCharsets.UTF_8);
        TierHttp.Response resp = send("fetch-index", cfg.fetchTimeout, true,
            h -> h.post("/v1/fetch-index", body, cfg.fetchTimeout, INDEX_CAP));
        return new ByteArrayInputStream(resp.body);
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
        byte[] body = deleteRequestJson(metadata).getBytes(StandardCharsets.UTF_8);
        send("delete", cfg.fetchTimeout, false, h -> h.post("/v1/delete", body, cfg.fetchTimeout, RESPONSE_CAP));
    }

    /**
     * Whether {@code GET /v1/health} answers 2xx, authenticated. Not part of the Kafka interface;
     * for logs and diagnostics. Never throws.
     */
    boolean healthy() {
        BridgeConfig cfg = config;
        TierHttp h = http;
        if (cfg == null || h == null) {
            return false;
        }
        try {
            return h.get("/v1/health", cfg.fetchTimeout, RESPONSE_CAP).status / 100 == 2;
        } catch (IOException e) {
            return false;
        }
    }

    /** The Unix socket new connections go to, or {@code null} for TCP (for tests). */
    Path unixSocket() {
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
        w.name("leader_epoch_index").value(leaderEpochIndex(d));
        return w.endObject().toString();
    }

    /**
     * The upload of a segment's files, sized from the files now; fails, before anything is sent,
     * when the {@code .log} is not the size the metadata declares or an index is too large.
     */
    static SegmentUpload segmentUpload(RemoteLogSegmentMetadata m, LogSegmentData d) throws RemoteStorageException {
        Optional<Path> txn = d.transactionIndex();
        List<SegmentUpload.Part> parts = new ArrayList<>(5);
        parts.add(indexPart(d.offsetIndex()));
        parts.add(indexPart(d.timeIndex()));
        if (txn.isPresent()) {
            parts.add(indexPart(txn.get()));
        }
        parts.add(indexPart(d.producerSnapshotIndex()));
        SegmentUpload.Part log = new SegmentUpload.Part(d.logSegment(), size(d.logSegment()));
        if (log.size() != m.segmentSizeInBytes()) {
            throw failure("strata tier copy failed before sending: " + log.file() + " holds " + log.size()
                + " bytes but the segment's metadata declares " + m.segmentSizeInBytes() + " (segment_size_bytes)");
        }
        parts.add(log);
        JsonWriter w = new JsonWriter().beginObject();
        w.name("segment");
        writeSegment(w, m);
        w.name("sizes").beginObject()
            .name("offset_index").value(parts.get(0).size())
            .name("time_index").value(parts.get(1).size());
        if (txn.isPresent()) {
            w.name("transaction_index").value(parts.get(2).size());
        } else {
            w.name("transaction_index").nullValue();
        }
        w.name("producer_snapshot").value(parts.get(parts.size() - 2).size())
            .name("log").value(log.size())
            .endObject();
        w.name("leader_epoch_index").value(leaderEpochIndex(d));
        return new SegmentUpload(w.endObject().toString(), parts);
    }

    private static SegmentUpload.Part indexPart(Path file) throws RemoteStorageException {
        long size = size(file);
        if (size > INDEX_CAP) {
            throw failure("strata tier copy failed before sending: " + file + " holds " + size
                + " bytes, more than the " + INDEX_CAP + " strata tier accepts for an index");
        }
        return new SegmentUpload.Part(file, size);
    }

    private static long size(Path file) throws RemoteStorageException {
        try {
            return Files.size(file);
        } catch (IOException e) {
            throw failure("strata tier copy failed before sending: cannot read the size of " + file + ": " + e);
        }
    }

    /** The leader-epoch checkpoint as standard base64; the broker's buffer is left as it was. */
    private static String leaderEpochIndex(LogSegmentData d) {
        ByteBuffer epochs = d.leaderEpochIndex().duplicate();
        byte[] epochBytes = new byte[epochs.remaining()];
        epochs.get(epochBytes);
        return Base64.getEncoder().encodeToString(epochBytes);
    }

    /** The segment object alone (rendered once per fetch, reused for every window). */
    static String segmentJson(RemoteLogSegmentMetadata m) {
        JsonWriter w = new JsonWriter();
        writeSegment(w, m);
        return w.toString();
    }

    static String fetchRequestJson(String segmentJson, long startPosition, long endPosition, long maxBytes,
                                   boolean handoff, long handoffMaxBytes, String damagedFile) {
        return "{\"segment\":" + segmentJson + ",\"start_position\":" + startPosition
            + ",\"end_position\":" + (endPosition < 0 ? "null" : Long.toString(endPosition))
            + ",\"max_bytes\":" + maxBytes
            + (handoff ? ",\"handoff\":true" : "")
            + (handoff && handoffMaxBytes > maxBytes ? ",\"handoff_max_bytes\":" + handoffMaxBytes : "")
            + (damagedFile == null ? "" : ",\"damaged_file\":" + new JsonWriter().value(damagedFile))
            + "}";
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
        if (http == null) {
            throw new IllegalStateException("StrataRemoteStorageManager is closed");
        }
        String segment = segmentJson(metadata);
        String segmentId = metadata.remoteLogSegmentId().id().toString();
        FetchStream.Opener opener = (position, maxBytes, handoff, damagedFile) -> {
            if (handoff && damagedFile == null) {
                Handoff known = answers.window(segmentId, position, maxBytes);
                if (known != null) {
                    return known;
                }
            } else {
                // A handoff fell through (a file evicted or damaged, or the directory refused):
                // what this segment's kept answer names is no longer to be trusted.
                answers.forget(segmentId);
            }
            long ahead = Math.max(maxBytes, HandoffCache.AHEAD);
            if (endPosition >= 0) {
                ahead = Math.min(ahead, endPosition - position + 1);
            }
            byte[] body = fetchRequestJson(segment, position, endPosition, maxBytes, handoff, ahead, damagedFile)
                .getBytes(StandardCharsets.UTF_8);
            TierHttp.Response resp = send("fetch", cfg.fetchTimeout, true,
                h -> h.post(TierHttp.FETCH_PATH, body, cfg.fetchTimeout, RESPONSE_CAP));
            if (resp.stream != null) {
                return FetchStream.bytes(resp.stream, maxBytes);
            }
            if (resp.status == 200 && handoff && TierHttp.HANDOFF_TYPE.equals(resp.contentType)) {
                Handoff answer;
                try {
                    answer = Handoff.parse(resp.body, maxBytes, ahead);
                } catch (Handoff.Unusable e) {
                    // Never the fetch's end: the stream reads these bytes over the socket.
                    return FetchStream.unusable(e);
                }
                answers.put(segmentId, position, answer);
                return answer.slice(0, maxBytes);
            }
            throw failure("strata tier fetch answered HTTP " + resp.status + " instead of 200 with the bytes");
        };
        return new FetchStream(opener, metadata.remoteLogSegmentId().id().toString(), startPosition, endPosition,
            cfg.handoff).open();
    }

    /** One call of the client. */
    @FunctionalInterface
    private interface Call {
        TierHttp.Response on(TierHttp http) throws IOException;
    }

    /**
     * Makes {@code call} and returns its response if its status is 2xx. Otherwise throws, with at
     * most {@link #ERROR_BODY_CAP} bytes of the body as text: {@link RemoteResourceNotFoundException}
     * for HTTP 404 when {@code notFoundIsMissing}, {@link RemoteStorageException} for any other
     * status or failure.
     */
    private TierHttp.Response send(String op, Duration timeout, boolean notFoundIsMissing, Call call)
            throws RemoteStorageException {
        TierHttp h = http;
        if (h == null) {
            throw new IllegalStateException("StrataRemoteStorageManager is closed");
        }
        TierHttp.Response resp;
        try {
            resp = call.on(h);
        } catch (IOException e) {
            throw callFailure(op, e, timeout);
        }
        int status = resp.status;
        if (status / 100 == 2) {
            return resp;
        }
        String text = errorText(resp.body);
        if (status == 404 && notFoundIsMissing) {
            throw new RemoteResourceNotFoundException(
                text.isEmpty() ? "strata tier " + op + ": not found (HTTP 404)" : text);
        }
        throw failure("strata tier " + op + " failed: HTTP " + status + ": " + text);
    }

    private RemoteStorageException callFailure(String op, IOException e, Duration timeout) {
        BridgeConfig cfg = config();
        if (e instanceof ClosedByInterruptException || Thread.currentThread().isInterrupted()) {
            // The interrupt flag stays set for the caller.
            InterruptedException cause = new InterruptedException("interrupted during an HTTP exchange");
            cause.initCause(e);
            return new RemoteStorageException(
                "interrupted while waiting for strata tier " + op + " at " + cfg.endpoint, cause);
        }
        String msg;
        if (e instanceof AuthenticationException) {
            msg = "strata tier at " + cfg.endpoint + " failed authentication: " + e.getMessage();
        } else if (e instanceof CredentialsRefusedException) {
            msg = "strata tier at " + cfg.endpoint + " refused the bridge's credentials: " + e.getMessage()
                + "; check that " + BridgeConfig.SECRET_FILE + " holds the same secret as strata's tier.secret_file";
        } else if (e instanceof SegmentUpload.SegmentFileException) {
            msg = "strata tier " + op + " failed: " + e.getMessage();
        } else {
            return transportFailure(op, e, timeout);
        }
        LOG.warn(msg);
        return new RemoteStorageException(msg, e);
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
    private static String errorText(byte[] raw) {
        boolean truncated = raw.length > ERROR_BODY_CAP;
        String text = new String(raw, 0, Math.min(raw.length, ERROR_BODY_CAP), StandardCharsets.UTF_8).strip();
        return truncated ? text + "... (truncated)" : text;
    }

    private BridgeConfig config() {
        BridgeConfig cfg = config;
        if (cfg == null) {
            throw new IllegalStateException("StrataRemoteStorageManager.configure() has not been called");
        }
        return cfg;
    }
}
