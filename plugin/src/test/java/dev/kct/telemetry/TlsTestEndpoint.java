package dev.kct.telemetry;

import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.security.Principal;
import java.security.PrivateKey;
import java.security.cert.X509Certificate;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;

import javax.net.ssl.SSLContext;
import javax.net.ssl.SSLEngine;
import javax.net.ssl.SSLParameters;
import javax.net.ssl.SSLPeerUnverifiedException;
import javax.net.ssl.X509ExtendedKeyManager;

import com.sun.net.httpserver.HttpsConfigurator;
import com.sun.net.httpserver.HttpsExchange;
import com.sun.net.httpserver.HttpsParameters;
import com.sun.net.httpserver.HttpsServer;

/**
 * A loopback HTTPS endpoint that requires a client certificate, answers 200 and records each request's body
 * and the subject of the client certificate it came with. Its server certificate can be swapped: new
 * connections use the new one, as a receiver that reloaded its certificate does.
 */
final class TlsTestEndpoint implements AutoCloseable {

    /** One received request: the client certificate's subject and the body as text. */
    record Received(String clientSubject, String body) {
    }

    final List<Received> received = new CopyOnWriteArrayList<>();
    private final HttpsServer server;
    private final SwappableKeyManager keys = new SwappableKeyManager();
    private final ExecutorService executor = Executors.newCachedThreadPool();

    /** Serves with this server certificate, trusting client certificates of the given CA. */
    TlsTestEndpoint(TestCertificates.Issued serverCert, TestCertificates.Ca clientCa) throws Exception {
        keys.delegate = TestCertificates.keyManager(serverCert);
        SSLContext context = TestCertificates.serverContext(keys, clientCa);
        server = HttpsServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.setHttpsConfigurator(new HttpsConfigurator(context) {
            @Override
            public void configure(HttpsParameters params) {
                SSLParameters p = context.getDefaultSSLParameters();
                p.setNeedClientAuth(true);
                params.setSSLParameters(p);
            }
        });
        server.setExecutor(executor);
        server.createContext("/v1/metrics", exchange -> {
            byte[] body;
            try (InputStream in = exchange.getRequestBody()) {
                body = in.readAllBytes();
            }
            String subject;
            try {
                subject = ((X509Certificate) ((HttpsExchange) exchange).getSSLSession().getPeerCertificates()[0])
                    .getSubjectX500Principal().getName();
            } catch (SSLPeerUnverifiedException e) {
                subject = "";
            }
            received.add(new Received(subject, new String(body, StandardCharsets.UTF_8)));
            exchange.sendResponseHeaders(200, -1);
            exchange.close();
        });
        server.start();
    }

    /** Serve new connections with another certificate, as a receiver that reloaded its files does. */
    void serve(TestCertificates.Issued serverCert) throws Exception {
        keys.delegate = TestCertificates.keyManager(serverCert);
    }

    /** The server's key manager, swappable while the server runs (the JDK server's context is fixed). */
    private static final class SwappableKeyManager extends X509ExtendedKeyManager {
        volatile X509ExtendedKeyManager delegate;

        @Override
        public String[] getClientAliases(String keyType, Principal[] issuers) {
            return delegate.getClientAliases(keyType, issuers);
        }

        @Override
        public String chooseClientAlias(String[] keyType, Principal[] issuers, Socket socket) {
            return delegate.chooseClientAlias(keyType, issuers, socket);
        }

        @Override
        public String[] getServerAliases(String keyType, Principal[] issuers) {
            return delegate.getServerAliases(keyType, issuers);
        }

        @Override
        public String chooseServerAlias(String keyType, Principal[] issuers, Socket socket) {
            return delegate.chooseServerAlias(keyType, issuers, socket);
        }

        @Override
        public String chooseEngineServerAlias(String keyType, Principal[] issuers, SSLEngine engine) {
            return delegate.chooseEngineServerAlias(keyType, issuers, engine);
        }

        @Override
        public X509Certificate[] getCertificateChain(String alias) {
            return delegate.getCertificateChain(alias);
        }

        @Override
        public PrivateKey getPrivateKey(String alias) {
            return delegate.getPrivateKey(alias);
        }
    }

    long countFrom(String subject) {
        return received.stream().filter(r -> r.clientSubject().equals(subject)).count();
    }

    String url() {
        return "https://127.0.0.1:" + server.getAddress().getPort() + "/v1/metrics";
    }

    @Override
    public void close() {
        server.stop(0);
        executor.shutdownNow();
    }
}
