package io.strata.rsm;

import java.io.IOException;

/**
 * Whoever answered did not prove it knows the shared secret: a wrong or missing hello proof, or a
 * response without a valid {@code Strata-Auth} signature. Nothing it sent is used, its
 * connection is closed, and the call is not retried.
 */
final class AuthenticationException extends IOException {
    private static final long serialVersionUID = 1L;

    AuthenticationException(String message) {
        super(message);
    }
}
