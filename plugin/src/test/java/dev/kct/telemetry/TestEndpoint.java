package dev.kct.telemetry;

import java.io.IOException;
import java.io.InputStream;
import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.function.BiFunction;
import java.util.function.Function;

import com.sun.net.httpserver.HttpExchange;
import com.sun.net.httpserver.HttpServer;

/** A loopback HTTP endpoint for tests: records every request and answers with a scripted response. */
final class TestEndpoint implements AutoCloseable {

    /** One received request: arrival time, lower-cased headers (first value), body. */
    record Received(long nanos, Map<String, String> headers, byte[] body) {
    }

    /** What to answer to the n-th request (0-based): status and extra headers. */
    record Answer(int status, Map<String, String> headers) {
        static Answer ok() {
            return new Answer(200, Map.of());
        }
    }

    final List<Received> received = new CopyOnWriteArrayList<>();
    private final HttpServer server;

    TestEndpoint(Function<Integer, Answer> script) throws IOException {
        this((n, request) -> script.apply(n));
    }

    /** Answers from the request's index (0-based) and the request itself. */
    TestEndpoint(BiFunction<Integer, Received, Answer> script) throws IOException {
        server = HttpServer.create(new InetSocketAddress(InetAddress.getLoopbackAddress(), 0), 0);
        server.setExecutor(Executors.newCachedThreadPool());
        server.createContext("/v1/metrics", exchange -> handle(exchange, script));
        server.start();
    }

    private void handle(HttpExchange exchange, BiFunction<Integer, Received, Answer> script) throws IOException {
        byte[] body;
        try (InputStream in = exchange.getRequestBody()) {
            body = in.readAllBytes();
        }
        Map<String, String> headers = new TreeMap<>();
        exchange.getRequestHeaders().forEach((k, v) -> headers.put(k.toLowerCase(), v.get(0)));
        Received request = new Received(System.nanoTime(), headers, body);
        int n;
        synchronized (received) {
            n = received.size();
            received.add(request);
        }
        Answer answer = script.apply(n, request);
        answer.headers().forEach((k, v) -> exchange.getResponseHeaders().add(k, v));
        exchange.sendResponseHeaders(answer.status(), -1);
        exchange.close();
    }

    String url() {
        return "http://127.0.0.1:" + server.getAddress().getPort() + "/v1/metrics";
    }

    @Override
    public void close() {
        server.stop(0);
    }
}
