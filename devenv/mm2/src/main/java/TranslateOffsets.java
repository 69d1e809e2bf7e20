// The MM2 offset-translation checker of strata's replicate tests (built by `./dev setup`).
//
//   java -cp "$STRATA_TEST_MM2_CLASSPATH" TranslateOffsets \
//       <bootstrap> <remote alias> <group> <default|identity> [key=value | @file.properties ...]
//
// Calls MirrorMaker 2's own client library,
//   RemoteClusterUtils.translateOffsets(props, <remote alias>, <group>, Duration.ofSeconds(20)),
// against the cluster at <bootstrap>: the MM2 *target*, which holds the checkpoints topic
// <remote alias>.checkpoints.internal; <remote alias> is the *source* cluster's alias (where the
// group consumed). Prints the result on stdout as one JSON object, keys "<topic>:<partition>"
// (the target-side topic names stored in the checkpoints), values the translated offsets,
// sorted by topic then partition, e.g. {"A.test:0": 7, "A.test:1": 12}; {} when the topic holds
// no checkpoint of the group. Exit 0. On any error: a message on stderr, exit 1. A missing
// checkpoints topic is an error too, reported at once (MirrorClient itself would wait for the
// consumer's default.api.timeout.ms, 60 s, which its config does not let one change).
//
// The policy sets replication.policy.class (DefaultReplicationPolicy or
// IdentityReplicationPolicy). Extra arguments are client properties: key=value (e.g.
// security.protocol=SASL_PLAINTEXT), or @FILE to load a properties file (e.g.
// $STRATA_TEST_PEER_CLIENT_CONFIG, so no password is on the command line); later ones win.
// Logging: slf4j-simple on stderr at warn (-Dorg.slf4j.simpleLogger.defaultLogLevel=info).

import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.connect.mirror.MirrorClient;
import org.apache.kafka.connect.mirror.RemoteClusterUtils;

public final class TranslateOffsets {
    private static final String USAGE =
            "usage: TranslateOffsets <bootstrap> <remote(source) alias> <group> <default|identity>"
                    + " [key=value | @file.properties ...]";

    private TranslateOffsets() {}

    public static void main(String[] args) {
        int rc;
        try {
            System.out.println(run(args));
            System.out.flush();
            rc = 0;
        } catch (UsageException e) {
            System.err.println("TranslateOffsets: " + e.getMessage());
            System.err.println(USAGE);
            rc = 1;
        } catch (Throwable t) {
            System.err.println("TranslateOffsets: " + t);
            for (Throwable c = t.getCause(); c != null && c != c.getCause(); c = c.getCause()) {
                System.err.println("  caused by: " + c);
            }
            rc = 1;
        }
        // Exit explicitly: a client thread left behind must not keep the JVM up.
        System.exit(rc);
    }

    static String run(String[] args) throws Exception {
        if (args.length < 4) {
            throw new UsageException("expected at least 4 arguments, got " + args.length);
        }
        String bootstrap = args[0];
        String alias = args[1];
        String group = args[2];
        String policy;
        switch (args[3]) {
            case "default":
                policy = "org.apache.kafka.connect.mirror.DefaultReplicationPolicy";
                break;
            case "identity":
                policy = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy";
                break;
            default:
                throw new UsageException("unknown policy '" + args[3] + "' (default | identity)");
        }
        Map<String, Object> props = new HashMap<>();
        props.put("bootstrap.servers", bootstrap);
        props.put("replication.policy.class", policy);
        for (int i = 4; i < args.length; i++) {
            String a = args[i];
            if (a.startsWith("@")) {
                Properties p = new Properties();
                try (InputStream in = Files.newInputStream(Path.of(a.substring(1)))) {
                    p.load(in);
                }
                for (String k : p.stringPropertyNames()) {
                    props.put(k, p.getProperty(k));
                }
                continue;
            }
            int eq = a.indexOf('=');
            if (eq <= 0) {
                throw new UsageException("extra argument '" + a + "' is not key=value or @file");
            }
            props.put(a.substring(0, eq), a.substring(eq + 1));
        }

        requireCheckpointsTopic(props, alias);
        Map<TopicPartition, OffsetAndMetadata> offsets =
                RemoteClusterUtils.translateOffsets(props, alias, group, Duration.ofSeconds(20));

        List<Map.Entry<TopicPartition, OffsetAndMetadata>> entries = new ArrayList<>(offsets.entrySet());
        entries.sort(Comparator.comparing((Map.Entry<TopicPartition, OffsetAndMetadata> e) -> e.getKey().topic())
                .thenComparingInt(e -> e.getKey().partition()));
        StringBuilder out = new StringBuilder("{");
        for (Map.Entry<TopicPartition, OffsetAndMetadata> e : entries) {
            if (out.length() > 1) {
                out.append(", ");
            }
            jsonString(out, e.getKey().topic() + ":" + e.getKey().partition());
            out.append(": ").append(e.getValue().offset());
        }
        return out.append('}').toString();
    }

    /** Fails fast when the checkpoints topic does not exist (same client settings as MirrorClient). */
    private static void requireCheckpointsTopic(Map<String, Object> props, String alias) throws Exception {
        try (MirrorClient client = new MirrorClient(props)) {
            String topic = client.replicationPolicy().checkpointsTopic(alias);
            if (!client.checkpointTopics().contains(topic)) {
                throw new IllegalStateException("checkpoints topic " + topic + " does not exist");
            }
        }
    }

    private static void jsonString(StringBuilder out, String s) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"':
                    out.append("\\\"");
                    break;
                case '\\':
                    out.append("\\\\");
                    break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c));
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }

    private static final class UsageException extends Exception {
        UsageException(String msg) {
            super(msg);
        }
    }
}
