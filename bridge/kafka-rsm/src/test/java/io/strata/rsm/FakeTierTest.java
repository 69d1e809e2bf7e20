package io.strata.rsm;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.io.TempDir;

import java.io.IOException;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import static org.junit.jupiter.api.Assertions.assertEquals;

/**
 * A bridge configured against a {@link FakeTier} on loopback TCP sharing its secret. After each
 * test the fake must have seen no protocol violation from the bridge (a test that provokes one
 * checks and clears them).
 */
abstract class FakeTierTest {
    @TempDir
    Path tmp;
    Path secretFile;
    FakeTier tier;
    StrataRemoteStorageManager rsm;

    @BeforeEach
    void startFakeTier() throws IOException {
        secretFile = FakeTier.writeSecret(tmp, "tier.secret", FakeTier.SECRET);
        tier = new FakeTier();
        rsm = new StrataRemoteStorageManager();
        rsm.configure(config(BridgeConfig.ENDPOINT, tier.endpoint()));
    }

    @AfterEach
    void stopFakeTier() throws Exception {
        rsm.close();
        tier.close();
        assertEquals(List.of(), tier.violations, "the bridge kept to the protocol");
    }

    /** Settings: the test's secret file, then {@code keyValues} (pairs, later ones win). */
    Map<String, Object> config(Object... keyValues) {
        Map<String, Object> m = new HashMap<>();
        m.put(BridgeConfig.SECRET_FILE, secretFile.toString());
        for (int i = 0; i < keyValues.length; i += 2) {
            m.put((String) keyValues[i], keyValues[i + 1]);
        }
        return m;
    }
}
