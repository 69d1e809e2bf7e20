package io.strata.rsm;

import org.apache.kafka.common.config.ConfigException;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLSocketFactory;
import javax.net.ssl.TrustManagerFactory;

import java.io.IOException;
import java.io.InputStream;
import java.nio.file.Files;
import java.nio.file.InvalidPathException;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.security.GeneralSecurityException;
import java.security.KeyStore;
import java.security.cert.Certificate;
import java.security.cert.CertificateFactory;
import java.security.cert.X509Certificate;
import java.util.Collection;

/**
 * {@code strata.tls.trust.file}: a PEM file of X.509 certificates that an {@code https}
 * connection to strata tier must chain to, instead of the JVM's default trust store (pinning
 * strata tier's own certificate or the CA that issued it). Host names are verified either way.
 */
final class TrustFile {
    private TrustFile() {
    }

    /** TLS sockets trusting only the file's certificates. */
    static SSLSocketFactory load(String key, Object raw) {
        if (!(raw instanceof String) || ((String) raw).isBlank()) {
            throw new ConfigException(key, raw, "must be the path of a PEM file of the certificates to trust");
        }
        String name = ((String) raw).trim();
        Collection<? extends Certificate> certs;
        try (InputStream in = Files.newInputStream(Path.of(name))) {
            certs = CertificateFactory.getInstance("X.509").generateCertificates(in);
        } catch (NoSuchFileException e) {
            throw new ConfigException(key, name, "the file does not exist: export strata tier's certificate"
                + " (or its CA's) there as PEM");
        } catch (IOException | InvalidPathException e) {
            throw new ConfigException(key, name, "cannot be read (" + e.getClass().getSimpleName() + ")");
        } catch (GeneralSecurityException e) {
            throw new ConfigException(key, name, "is not a PEM file of X.509 certificates: " + e.getMessage());
        }
        if (certs.isEmpty()) {
            throw new ConfigException(key, name, "holds no certificate: put strata tier's certificate (or its"
                + " CA's) there as PEM (-----BEGIN CERTIFICATE-----)");
        }
        try {
            KeyStore store = KeyStore.getInstance(KeyStore.getDefaultType());
            store.load(null, null);
            int i = 0;
            for (Certificate c : certs) {
                if (!(c instanceof X509Certificate)) {
                    throw new ConfigException(key, name, "holds a certificate that is not X.509");
                }
                store.setCertificateEntry("strata-tier-" + i++, c);
            }
            TrustManagerFactory tmf = TrustManagerFactory.getInstance(TrustManagerFactory.getDefaultAlgorithm());
            tmf.init(store);
            SSLContext ctx = SSLContext.getInstance("TLS");
            ctx.init(null, tmf.getTrustManagers(), null);
            return ctx.getSocketFactory();
        } catch (GeneralSecurityException | IOException e) {
            throw new ConfigException(key, name, "its certificates cannot be used for TLS: " + e.getMessage());
        }
    }
}
