package io.strata.rsm;

import org.apache.kafka.common.config.ConfigException;

import javax.crypto.spec.SecretKeySpec;
import javax.net.ssl.SSLSocketFactory;

import java.net.InetAddress;
import java.net.URI;
import java.net.URISyntaxException;
import java.net.UnknownHostException;
import java.nio.file.InvalidPathException;
import java.nio.file.Path;
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
    static final String SECRET_FILE = "strata.secret.file";
    static final String TLS_TRUST_FILE = "strata.tls.trust.file";
    static final String CONNECT_TIMEOUT_MS = "strata.connect.timeout.ms";
    static final String COPY_TIMEOUT_MS = "strata.copy.timeout.ms";
    static final String FETCH_TIMEOUT_MS = "strata.fetch.timeout.ms";
    static final String UNIX_SOCKET = "strata.unix.socket";
    static final String COPY_MODE = "strata.copy.mode";
    static final String FETCH_HANDOFF = "strata.fetch.handoff";

    static final String DEFAULT_ENDPOINT = "http://127.0.0.1:9190";
    static final long DEFAULT_CONNECT_TIMEOUT_MS = 2_000L;
    static final long DEFAULT_COPY_TIMEOUT_MS = 300_000L;
    static final long DEFAULT_FETCH_TIMEOUT_MS = 30_000L;

    /** Endpoint without a trailing slash, e.g. {@code http://127.0.0.1:9190} or {@code https://h:1/prefix}. */
    final String endpoint;
    /** Whether the endpoint is {@code https}. */
    final boolean https;
    /** The shared secret K (its {@code toString} does not show it). */
    final SecretKeySpec secret;
    private final String secretFile;
    /** TLS sockets trusting only {@code strata.tls.trust.file}, or {@code null} for the JVM's defaults. */
    final SSLSocketFactory trust;
    private final String trustFile;
    final Duration connectTimeout;
    final Duration copyTimeout;
    final Duration fetchTimeout;
    /** {@code strata.unix.socket} as given: {@code auto}, {@code off} or the path. */
    private final String unixSetting;
    /** The socket every connection goes to ({@code strata.unix.socket} set to a path), or {@code null}. */
    final Path unixSocket;
    /** Whether a socket named in strata tier's authenticated hello is used ({@code auto}, plain http). */
    final boolean followSocket;
    private final String copyModeSetting;
    /** Whether copies send the files' bytes ({@code /v1/copy-upload}) rather than their paths. */
    final boolean copyUpload;
    /**
     * Whether fetches ask for strata tier's cache files rather than bytes ({@link Handoff});
     * strata grants it on its Unix socket only, and only a followed or fixed socket gets there.
     */
    final boolean handoff;

    private BridgeConfig(Map<String, ?> c) {
        URI uri = parseEndpoint(c.get(ENDPOINT));
        this.https = uri.getScheme().equals("https");
        this.endpoint = uri.toString();
        boolean loopback = isLoopback(uri.getHost());
        if (!https && !loopback) {
            throw new ConfigException(ENDPOINT, c.get(ENDPOINT), "plain http is only allowed to a loopback address"
                + " (127.0.0.1, [::1] or localhost): use https (with " + TLS_TRUST_FILE + ") for strata tier on"
                + " another host");
        }
        this.secret = SecretFile.read(SECRET_FILE, c.get(SECRET_FILE));
        this.secretFile = c.get(SECRET_FILE).toString().trim();
        Object trustRaw = c.get(TLS_TRUST_FILE);
        if (trustRaw != null && !https) {
            throw new ConfigException(TLS_TRUST_FILE, trustRaw, "is only used with an https " + ENDPOINT
                + " (it is " + endpoint + "): remove it or use https");
        }
        this.trust = trustRaw == null ? null : TrustFile.load(TLS_TRUST_FILE, trustRaw);
        this.trustFile = trustRaw == null ? null : trustRaw.toString().trim();
        this.connectTimeout = parseMillis(CONNECT_TIMEOUT_MS, c.get(CONNECT_TIMEOUT_MS), DEFAULT_CONNECT_TIMEOUT_MS);
        this.copyTimeout = parseMillis(COPY_TIMEOUT_MS, c.get(COPY_TIMEOUT_MS), DEFAULT_COPY_TIMEOUT_MS);
        this.fetchTimeout = parseMillis(FETCH_TIMEOUT_MS, c.get(FETCH_TIMEOUT_MS), DEFAULT_FETCH_TIMEOUT_MS);

        this.unixSetting = choice(UNIX_SOCKET, c.get(UNIX_SOCKET), "auto", true);
        this.unixSocket = unixSetting.equals("auto") || unixSetting.equals("off") ? null : Path.of(unixSetting);
        // The hello's socket is only followed from a plain http loopback endpoint: over https the
        // operator asked for TLS, which a Unix socket would silently drop.
        this.followSocket = unixSetting.equals("auto") && !https;

        this.copyModeSetting = choice(COPY_MODE, c.get(COPY_MODE), "auto", false);
        this.copyUpload = copyModeSetting.equals("upload")
            || (copyModeSetting.equals("auto") && !loopback && unixSocket == null);
        this.handoff = parseBoolean(FETCH_HANDOFF, c.get(FETCH_HANDOFF), true);
    }

    private static boolean parseBoolean(String key, Object raw, boolean def) {
        if (raw == null) {
            return def;
        }
        if (raw instanceof Boolean) {
            return (Boolean) raw;
        }
        String v = raw instanceof String ? ((String) raw).trim().toLowerCase(Locale.ROOT) : "";
        if (v.equals("true") || v.equals("false")) {
            return v.equals("true");
        }
        throw new ConfigException(key, raw, "must be true or false");
    }

    static BridgeConfig parse(Map<String, ?> configs) {
        return new BridgeConfig(configs == null ? Map.of() : configs);
    }

    /**
     * {@code strata.unix.socket} ({@code auto}, {@code off} or an absolute path, when
     * {@code pathAllowed}) or {@code strata.copy.mode} ({@code auto}, {@code paths},
     * {@code upload}); keywords in lower case.
     */
    private static String choice(String key, Object raw, String def, boolean pathAllowed) {
        if (raw == null) {
            return def;
        }
        String v = raw instanceof String ? ((String) raw).trim() : "";
        String lower = v.toLowerCase(Locale.ROOT);
        if (pathAllowed) {
            if (lower.equals("auto") || lower.equals("off")) {
                return lower;
            }
            try {
                if (!v.isEmpty() && Path.of(v).isAbsolute()) {
                    return v;
                }
            } catch (InvalidPathException e) {
                // reported below
            }
            throw new ConfigException(key, raw, "must be auto, off or the absolute path of strata tier's Unix socket");
        }
        if (lower.equals("auto") || lower.equals("paths") || lower.equals("upload")) {
            return lower;
        }
        throw new ConfigException(key, raw, "must be auto, paths or upload");
    }

    /**
     * Whether {@code host} (as in a URI, IPv6 in brackets) is a loopback address, decided from its
     * text alone: an IP literal of the loopback range, or {@code localhost}. No name is looked up,
     * so configure neither waits on DNS nor trusts its answer.
     */
    static boolean isLoopback(String host) {
        String h = host.toLowerCase(Locale.ROOT);
        if (h.equals("localhost")) {
            return true;
        }
        if (h.startsWith("[") && h.endsWith("]")) {
            try {
                // Bracketed, the JDK parses it as an IPv6 literal and never asks DNS.
                return InetAddress.getByName(h).isLoopbackAddress();
            } catch (UnknownHostException e) {
                return false;
            }
        }
        String[] octets = h.split("\\.", -1);
        if (octets.length != 4) {
            return false;
        }
        for (String o : octets) {
            if (o.isEmpty() || o.length() > 3 || !o.chars().allMatch(ch -> ch >= '0' && ch <= '9') || Integer.parseInt(o) > 255) {
                return false;
            }
        }
        return octets[0].equals("127");
    }

    /** The full URI of an API path such as {@code /v1/copy}. */
    URI uri(String path) {
        return URI.create(endpoint + path);
    }

    private static URI parseEndpoint(Object raw) {
        if (raw == null) {
            return URI.create(DEFAULT_ENDPOINT);
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
        return URI.create(scheme + "://" + uri.getRawAuthority() + path);
    }

    private static Duration parseMillis(String key, Object raw, long def) {
        if (raw == null) {
            return Duration.ofMillis(def);
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
        return Duration.ofMillis(v);
    }

    /** The settings for the log; the secret file by name only. */
    @Override
    public String toString() {
        return ENDPOINT + "=" + endpoint
            + ", " + SECRET_FILE + "=" + secretFile
            + ", " + TLS_TRUST_FILE + "=" + (trustFile == null ? "(JVM default trust)" : trustFile)
            + ", " + CONNECT_TIMEOUT_MS + "=" + connectTimeout.toMillis()
            + ", " + COPY_TIMEOUT_MS + "=" + copyTimeout.toMillis()
            + ", " + FETCH_TIMEOUT_MS + "=" + fetchTimeout.toMillis()
            + ", " + UNIX_SOCKET + "=" + unixSetting
            + ", " + COPY_MODE + "=" + copyModeSetting + " (" + (copyUpload ? "upload" : "paths") + ")"
            + ", " + FETCH_HANDOFF + "=" + handoff;
    }
}
