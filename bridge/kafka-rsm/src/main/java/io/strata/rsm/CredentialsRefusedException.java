package io.strata.rsm;

import java.io.IOException;

/** strata tier answered {@code 401} without a signature: it did not accept the bridge's mac or seq. */
final class CredentialsRefusedException extends IOException {
    private static final long serialVersionUID = 1L;

    CredentialsRefusedException(String message) {
        super(message);
    }
}
