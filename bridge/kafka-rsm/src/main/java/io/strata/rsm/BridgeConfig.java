package io.strata.rsm;

import org.apache.kafka.common.config.ConfigException;

import java.net.URI;
import java.net.URISyntaxException;
import java.time.Duration;
import java.util.Locale;
import java.util.Map;

/**
 * The bridge's settings, parsed from the map the broker hands to {@code configure} (broker
 * settings {@code rsm.config.*} with the prefix stripped). Keys the bridge does not know, such as
 * the {@code broker.id} the broker adds, are ignored. Invalid values throw
 * {@link ConfigException}, whose message names the key and the value.
 */
final class BridgeConfig {
    static final String ENDPOINT = "strata.endpoint";
    static final String CONNECT_TIMEOUT_MS = "strata.connect.timeout.ms";
    static final String COPY_TIMEOUT_MS = "strata.copy.timeout.ms";
    static final String FETCH_TIMEOUT_MS = "strata.fetch.timeout.ms";
    static final String UNIX_SOCKET = "strata.unix.socket";

    static final String DEFAULT_ENDPOINT = "http://127.0.0.1:9190";
    static final long DEFAULT_CONNECT_TIMEOUT_MS = 2_000L;
    static final long DEFAULT_COPY_TIMEOUT_MS = 300_000L;
    static final long DEFAULT_FETCH_TIMEOUT_MS = 30_000L;

    /** Endpoint without a trailing slash, e.g. {@code http://127.0.0.1:9190} or {@code http://h:1/prefix}. */
    final String endpoint;
    final Duration connectTimeout;
    final Duration copyTimeout;
    final Duration fetchTimeout;
    /**
     * {@code auto}: move to the Unix domain socket strata tier names in its answers when the
     * endpoint is on this host; {@code off}: TCP only.
     */
    final boolean unixSocket;

    private BridgeConfig(String endpoint, Duration connectTimeout, Duration copyTimeout, Duration fetchTimeout,
                         boolean unixSocket) {
        this.endpoint = endpoint;
        this.connectTimeout = connectTimeout;
        this.copyTimeout = copyTimeout;
        this.fetchTimeout = fetchTimeout;
        this.unixSocket = unixSocket;
    }

    static BridgeConfig parse(Map<String, ?> configs) {
        Map<String, ?> c = configs == null ? Map.of() : configs;
        return new BridgeConfig(
            parseEndpoint(c.get(ENDPOINT)),
            Duration.ofMillis(parsePositiveMillis(CONNECT_TIMEOUT_MS, c.get(CONNECT_TIMEOUT_MS), DEFAULT_CONNECT_TIMEOUT_MS)),
            Duration.ofMillis(parsePositiveMillis(COPY_TIMEOUT_MS, c.get(COPY_TIMEOUT_MS), DEFAULT_COPY_TIMEOUT_MS)),
            Duration.ofMillis(parsePositiveMillis(FETCH_TIMEOUT_MS, c.get(FETCH_TIMEOUT_MS), DEFAULT_FETCH_TIMEOUT_MS)),
            parseAutoOrOff(UNIX_SOCKET, c.get(UNIX_SOCKET)));
    }

    /** {@code auto} (true) or {@code off} (false); unset = auto. */
    private static boolean parseAutoOrOff(String key, Object raw) {
        if (raw == null) {
            return true;
        }
        String v = raw instanceof String ? ((String) raw).trim().toLowerCase(Locale.ROOT) : "";
        if (v.equals("auto")) {
            return true;
        }
        if (v.equals("off")) {
            return false;
        }
        throw new ConfigException(key, raw, "must be auto or off");
    }

    /** The full URI of an API path such as {@code /v1/copy}. */
    URI uri(String path) {
        return URI.create(endpoint + path);
    }

    private static String parseEndpoint(Object raw) {
        if (raw == null) {
            return DEFAULT_ENDPOINT;
        }
        if (!(raw instanceof String)) {
            throw new ConfigException(ENDPOINT, raw, "must be a string such as " + DEFAULT_ENDPOINT);
        }
        String value = ((String) raw).trim();
        if (value.isEmpty()) {
            throw new ConfigException(ENDPOINT, raw, "must not be empty (e.g. " + DEFAULT_ENDPOINT + ")");
        }
        URI uri;
        try {
            uri = new URI(value);
        } catch (URISyntaxException e) {
            throw new ConfigException(ENDPOINT, raw, "not a valid URI: " + e.getMessage());
        }
        String scheme = uri.getScheme() == null ? null : uri.getScheme().toLowerCase(Locale.ROOT);
        if (!"http".equals(scheme) && !"https".equals(scheme)) {
            throw new ConfigException(ENDPOINT, raw, "must be an http:// or https:// URL such as " + DEFAULT_ENDPOINT);
        }
        if (uri.getHost() == null || uri.getHost().isEmpty()) {
            throw new ConfigException(ENDPOINT, raw, "must name a host, e.g. " + DEFAULT_ENDPOINT);
        }
        if (uri.getRawQuery() != null || uri.getRawFragment() != null) {
            throw new ConfigException(ENDPOINT, raw, "must not have a query or fragment");
        }
        String path = uri.getRawPath() == null ? "" : uri.getRawPath();
        while (path.endsWith("/")) {
            path = path.substring(0, path.length() - 1);
        }
        return scheme + "://" + uri.getRawAuthority() + path;
    }

    private static long parsePositiveMillis(String key, Object raw, long def) {
        if (raw == null) {
            return def;
        }
        long v;
        if (raw instanceof Integer || raw instanceof Long || raw instanceof Short || raw instanceof Byte) {
            v = ((Number) raw).longValue();
        } else if (raw instanceof String) {
            try {
                v = Long.parseLong(((String) raw).trim());
            } catch (NumberFormatException e) {
                throw new ConfigException(key, raw, "must be a whole number of milliseconds");
            }
        } else {
            throw new ConfigException(key, raw, "must be a whole number of milliseconds");
        }
        if (v <= 0) {
            throw new ConfigException(key, raw, "must be greater than 0 milliseconds");
        }
        return v;
    }

    @Override
    public String toString() {
        return ENDPOINT + "=" + endpoint
            + ", " + CONNECT_TIMEOUT_MS + "=" + connectTimeout.toMillis()
            + ", " + COPY_TIMEOUT_MS + "=" + copyTimeout.toMillis()
            + ", " + FETCH_TIMEOUT_MS + "=" + fetchTimeout.toMillis()
            + ", " + UNIX_SOCKET + "=" + (unixSocket ? "auto" : "off");
    }
}
