package io.strata.rsm;

import org.apache.kafka.common.config.ConfigException;

import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.Arguments;
import org.junit.jupiter.params.provider.MethodSource;

import java.net.URI;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.stream.Stream;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

class BridgeConfigTest {

    @Test
    void defaults() {
        BridgeConfig c = BridgeConfig.parse(Map.of());
        assertEquals("http://127.0.0.1:9190", c.endpoint);
        assertEquals(Duration.ofMillis(2000), c.connectTimeout);
        assertEquals(Duration.ofMillis(300000), c.copyTimeout);
        assertEquals(Duration.ofMillis(30000), c.fetchTimeout);
        assertEquals(URI.create("http://127.0.0.1:9190/v1/copy"), c.uri("/v1/copy"));
        assertEquals("http://127.0.0.1:9190", BridgeConfig.parse(null).endpoint);
    }

    @Test
    void explicitValuesAsStringsOrNumbersAndUnknownKeysIgnored() {
        Map<String, Object> m = new HashMap<>();
        m.put("strata.endpoint", "  https://tier.local:8443/base//  ");
        m.put("strata.connect.timeout.ms", " 150 ");
        m.put("strata.copy.timeout.ms", 600000);
        m.put("strata.fetch.timeout.ms", 45000L);
        m.put("broker.id", 3);
        m.put("something.else", new Object());
        BridgeConfig c = BridgeConfig.parse(m);
        assertEquals("https://tier.local:8443/base", c.endpoint);
        assertEquals(Duration.ofMillis(150), c.connectTimeout);
        assertEquals(Duration.ofMillis(600000), c.copyTimeout);
        assertEquals(Duration.ofMillis(45000), c.fetchTimeout);
        assertEquals(URI.create("https://tier.local:8443/base/v1/fetch"), c.uri("/v1/fetch"));
    }

    @Test
    void endpointTrailingSlashAndIpv6() {
        assertEquals("http://127.0.0.1:9190", BridgeConfig.parse(Map.of("strata.endpoint", "http://127.0.0.1:9190/")).endpoint);
        assertEquals("http://[::1]:9190", BridgeConfig.parse(Map.of("strata.endpoint", "HTTP://[::1]:9190")).endpoint);
    }

    static Stream<Arguments> badValues() {
        return Stream.of(
            Arguments.of("strata.endpoint", ""),
            Arguments.of("strata.endpoint", "   "),
            Arguments.of("strata.endpoint", "127.0.0.1:9190"),
            Arguments.of("strata.endpoint", "localhost"),
            Arguments.of("strata.endpoint", "ftp://127.0.0.1:9190"),
            Arguments.of("strata.endpoint", "http://"),
            Arguments.of("strata.endpoint", "http:///v1"),
            Arguments.of("strata.endpoint", "http://bad host:1"),
            Arguments.of("strata.endpoint", "http://127.0.0.1:9190/?x=1"),
            Arguments.of("strata.endpoint", "http://127.0.0.1:9190/#frag"),
            Arguments.of("strata.endpoint", 9190),
            Arguments.of("strata.connect.timeout.ms", "abc"),
            Arguments.of("strata.connect.timeout.ms", ""),
            Arguments.of("strata.connect.timeout.ms", "0"),
            Arguments.of("strata.connect.timeout.ms", "-1"),
            Arguments.of("strata.connect.timeout.ms", "1.5"),
            Arguments.of("strata.copy.timeout.ms", "99999999999999999999"),
            Arguments.of("strata.copy.timeout.ms", 0),
            Arguments.of("strata.copy.timeout.ms", 2.5d),
            Arguments.of("strata.fetch.timeout.ms", -30000L),
            Arguments.of("strata.fetch.timeout.ms", "30s"),
            Arguments.of("strata.fetch.timeout.ms", true));
    }

    @ParameterizedTest
    @MethodSource("badValues")
    void badValuesAreRejectedNamingTheKey(String key, Object value) {
        ConfigException e = assertThrows(ConfigException.class, () -> BridgeConfig.parse(Map.of(key, value)));
        assertTrue(e.getMessage().contains("for configuration " + key), e.getMessage());
        assertTrue(e.getMessage().contains(String.valueOf(value)), e.getMessage());
        assertTrue(e instanceof RuntimeException);
    }
}
